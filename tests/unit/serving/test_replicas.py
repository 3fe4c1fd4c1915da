"""pipi.serving.replicas: tasks mapped over forked one-thread processes, their errors and
deaths, and how many ``replicas=auto`` starts."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

from pipi.errors import ConfigError, DataError
from pipi.serving import replicas as rep
from pipi.serving.replicas import resolve_replicas

pytestmark = pytest.mark.timeout(120)


def _where(task: int) -> tuple[int, int, int]:
    return task * task, os.getpid(), torch.get_num_threads()


def test_every_task_once_in_forked_processes_of_one_thread():
    got = dict(rep.replica_map(_where, list(range(40)), 2))
    assert sorted(got) == list(range(40))
    assert all(sq == t * t for t, (sq, _, _) in got.items())
    pids = {pid for _, pid, _ in got.values()}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {threads for _, _, threads in got.values()} == {1}
    assert not mp.active_children()


def _fails_on_7(task: int) -> int:
    if task == 7:
        raise DataError(f"frame {task}: not a JPEG or PNG image")
    return task


def test_an_error_in_a_replica_is_raised_with_its_type_and_the_replicas_stop():
    with pytest.raises(DataError, match="frame 7: not a JPEG"):
        list(rep.replica_map(_fails_on_7, list(range(20)), 2))
    assert not mp.active_children()


def _dies_on_3(task: int) -> int:
    if task == 3:
        os._exit(3)
    return task


def test_a_replica_that_dies_is_an_error_with_its_exit_status(monkeypatch):
    monkeypatch.setattr(rep, "_POLL_S", 0.1)
    with pytest.raises(RuntimeError, match="exit status 3"):
        list(rep.replica_map(_dies_on_3, list(range(8)), 1))
    assert not mp.active_children()


@pytest.mark.parametrize(("cores", "want"), [(1, 1), (2, 2), (4, 4), (8, 1)])
def test_auto_is_one_replica_per_core_on_a_small_cpu(monkeypatch, cores, want):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert rep.auto_replicas(torch.device("cpu")) == want
    assert resolve_replicas("auto", torch.device("cpu")) == want
    assert rep.auto_replicas(torch.device("cuda")) == 1


@pytest.mark.parametrize("bad", ["x", "0", -1])
def test_a_bad_replica_count_is_refused(bad):
    with pytest.raises(ConfigError, match="replicas="):
        resolve_replicas(bad, torch.device("cpu"))


def test_replicas_are_for_a_cpu():
    assert resolve_replicas("3", torch.device("cpu")) == 3
    assert resolve_replicas(1, torch.device("cuda")) == 1
    with pytest.raises(ConfigError, match="on cuda use 1"):
        resolve_replicas(2, torch.device("cuda"))
