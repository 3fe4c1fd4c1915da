"""`mlflow run` makes a run of its own: when pipi works in another run (resume) or in none
(staged data reused), that run says so in tags instead of staying empty (issue 24)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from stores import new_sqlite_store

from pipi import tracking
from pipi.cli.train import train as train_cmd
from pipi.runs.data import ensure_synthetic_staged

ROOT = Path(__file__).resolve().parents[2]


def _mlflow_run(uri: str, cwd: Path, entry: str, *params: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", entry,
         "--env-manager", "local", "--experiment-name", "wrap",
         *[x for p in params for x in ("-P", p)]],
        check=False, capture_output=True, text=True, cwd=cwd, timeout=900,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_EXPERIMENT")},
             "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)})


def _runs(client: MlflowClient) -> list:
    exp = client.get_experiment_by_name("wrap")
    return client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.slow
def test_stage_reusing_staged_data_tags_its_run(pipi_home, tmp_path):
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    target = ensure_synthetic_staged("tiny", log_run=False)
    r = _mlflow_run(uri, tmp_path, "stage", "source=synthetic-tiny")
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = _runs(MlflowClient(uri))
    assert run.info.status == "FINISHED"
    assert run.data.tags[tracking.tags.TAG_ENTRY_POINT] == "stage"
    assert run.data.tags[tracking.tags.TAG_REUSED_STAGED] == str(target)
    assert run.data.tags[tracking.tags.TAG_DATA_DIGEST]
    assert "reused" in run.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_mlflow_run_resume_tags_its_run_with_the_resumed_one(tiny_staged, tmp_path,
                                                              monkeypatch):
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    import mlflow

    mlflow.set_tracking_uri(uri)
    real = tracking.RunTracker.log_checkpoint

    def interrupt(self, state):
        real(self, state)
        raise KeyboardInterrupt  # Ctrl-C after the first epoch's checkpoint

    monkeypatch.setattr(tracking.RunTracker, "log_checkpoint", interrupt)
    CliRunner().invoke(train_cmd, ["--cell", "a", "--profile", "smoke", "--weights", "none",
                                   "--data", str(tiny_staged), "--epochs", "2",
                                   "--experiment", "wrap"])
    monkeypatch.setattr(tracking.RunTracker, "log_checkpoint", real)
    client = MlflowClient(uri)
    (trained,) = _runs(client)
    rid = trained.info.run_id
    assert trained.info.status == "KILLED"
    r = _mlflow_run(uri, tmp_path, "train", f"resume={rid}")
    assert r.returncode == 0, r.stderr[-3000:]
    (wrapper,) = [x for x in _runs(client) if x.info.run_id != rid]
    assert wrapper.data.tags[tracking.tags.TAG_RESUMED_RUN] == rid
    assert wrapper.data.tags[tracking.tags.TAG_ENTRY_POINT] == "train"
    assert rid in wrapper.data.tags["mlflow.note.content"]
    resumed = client.get_run(rid)
    assert resumed.info.status == "FINISHED"
    assert resumed.data.tags[tracking.tags.TAG_RESUMED_BY] == wrapper.info.run_id
