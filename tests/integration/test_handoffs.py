"""Issue 39 step 3: a sweep's worker gets its run, tracking URI and code version as arguments;
nothing is written into ``os.environ`` (an exported ``MLFLOW_RUN_ID`` or code version leaked
into later work of the same process)."""

from __future__ import annotations

import os

import mlflow
import pytest
import torch

from pipi import tracking
from pipi.config import make_config
from pipi.sweeps.plan import Child
from pipi.sweeps.local import _spawn_child

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("test_handoffs")]


def test_a_worker_fills_its_run_from_arguments_and_leaves_the_environment(sqlite_tracking,
                                                                         tiny_staged):
    c = mlflow.MlflowClient()
    rid = c.create_run(c.create_experiment("handoffs")).info.run_id
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32)
    before = dict(os.environ)
    threads = torch.get_num_threads()
    try:
        got = _spawn_child(Child(cfg=cfg, config_hash="h"), run_id=rid, threads=1,
                           data=str(tiny_staged), tracking_uri=sqlite_tracking,
                           code_version="handed-1", model_prefix="lab-w")
    finally:
        torch.set_num_threads(threads)
        tracking.use_code_version("")
    assert got == rid
    run = tracking.get_run(rid)
    assert run.status == "FINISHED" and run.code_version == "handed-1"
    assert run.params["cell"] == "a"
    # the prefix came as an argument: the run registered under it, the environment untouched
    assert run.params["model_prefix"] == "lab-w"
    assert tracking.model_prefix() != "lab-w"
    assert dict(os.environ) == before
    assert tracking.code_version() != "handed-1"   # forgotten again
