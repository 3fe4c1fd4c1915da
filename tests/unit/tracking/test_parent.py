"""Which process is ``mlflow run``: the command-line forms MLflow is started with, and the
``/proc`` reading the entry point's watcher relies on (the watcher itself: integration
test ``test_sigterm_to_mlflow_run_alone_ends_the_entry_point_and_its_run_killed``)."""

import os

import pytest

from pipi.tracking.parent import _is_mlflow_run, _proc_stat, mlflow_run_ancestor


@pytest.mark.parametrize(("argv", "want"), [
    (["/w/.venv/bin/python", "/w/.venv/bin/mlflow", "run", ".", "-e", "train"], True),
    (["/w/.venv/bin/mlflow", "run", "."], True),
    (["python", "-m", "mlflow", "run", "."], True),
    (["python", "/w/.venv/lib/python3.11/site-packages/mlflow/__main__.py", "run", "."], True),
    (["/w/.venv/bin/mlflow", "server", "--port", "5000"], False),
    (["python", "entrypoints/train.py", "--cell", "a"], False),
    (["bash", "-c", "python entrypoints/train.py"], False),
    ([], False),
])
def test_mlflow_run_command_lines(argv, want):
    assert _is_mlflow_run(argv) is want


def test_proc_stat_reads_state_and_parent():
    state, ppid = _proc_stat(os.getpid())
    assert state in "RS" and ppid == os.getppid()
    assert _proc_stat(2**22 + 12345) is None  # no such process


def test_no_ancestor_outside_mlflow_run(monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert mlflow_run_ancestor() is None
    monkeypatch.setenv("MLFLOW_RUN_ID", "0" * 32)  # pytest's parents are not `mlflow run`
    assert mlflow_run_ancestor() is None


@pytest.mark.parametrize(("ppid", "started"), [(4242, True), (1, False)])
def test_the_killed_status_finaliser_watches_mlflow_run_and_not_init(monkeypatch, ppid, started):
    """After Ctrl-C under `mlflow run`, a finaliser waits for `mlflow run` (the parent) to exit
    and puts KILLED back. An orphaned entry point (parent 1: `mlflow run` already gone) starts
    none: it would wait on init for its whole five minutes."""
    import subprocess

    from pipi.tracking import runs

    calls = []
    monkeypatch.setattr(runs.os, "getppid", lambda: ppid)
    monkeypatch.setattr(runs.mlflow, "get_tracking_uri", lambda: "sqlite:///x.db")
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: calls.append(argv))
    runs.keep_killed_after_parent("r" * 32)
    assert bool(calls) is started
    if started:
        assert calls[0][1:] == ["-m", "pipi.tracking.finalise", "4242", "r" * 32,
                                "sqlite:///x.db"]
