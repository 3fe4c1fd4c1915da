"""Resuming a run that another process is still training is refused (issue 24): two real
``pipi train`` processes on one store, the first one's heartbeat read from the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipi import tracking

ROOT = Path(__file__).resolve().parents[2]
PIPI = [sys.executable, "-c", "from pipi.cli import main; main()"]


def _env(uri: str) -> dict:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT),
            "PIPI_HEARTBEAT_S": "2"}


@pytest.mark.slow
def test_resume_of_a_live_run_is_refused_in_one_line(tiny_staged, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    first = subprocess.Popen(
        [*PIPI, "train", "--cell", "a", "--profile", "smoke", "--weights", "none",
         "--epochs", "200", "--patience", "200", "--data", str(tiny_staged),
         "--experiment", "live"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(uri))
    try:
        rid = None
        deadline = time.time() + 600
        while rid is None and time.time() < deadline:
            assert first.poll() is None, first.communicate()[1][-3000:]
            exp = client.get_experiment_by_name("live")
            runs = client.search_runs([exp.experiment_id]) if exp else []
            rid = next((r.info.run_id for r in runs if "train/loss" in r.data.metrics
                        and client.list_artifacts(r.info.run_id, "checkpoints")), None)
            time.sleep(1)
        assert rid, "no epoch logged"
        second = subprocess.run([*PIPI, "train", "--resume", rid], check=False, capture_output=True,
                                text=True, cwd=tmp_path, env=_env(uri), timeout=300)
        assert second.returncode != 0
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, second.stderr[-3000:]
        assert lines[0].startswith(f"error: resume={rid}: the run is still being trained by "
                                   "process "), lines[0]
        assert first.poll() is None  # the first one goes on, untouched
        run = client.get_run(rid)
        assert run.info.status == "RUNNING"
        steps = [m.step for m in client.get_metric_history(rid, "train/loss")]
        assert len(steps) == len(set(steps))
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    # stopped: its run is no longer held by anyone
    assert tracking.live_holder(client.get_run(rid)) is None
