"""First run and bad input (issue 10): every entry point refuses a bad option with one line
naming the parameter and its value, before anything is staged, loaded or started; under
`mlflow run` the run MLflow created is marked FAILED with that line as the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
from fakes import _invoke

BIN = Path(sys.executable).parent


def test_early_failure_under_mlflow_run_marks_the_run_failed_with_the_reason(tracking, capsys,
                                                                           monkeypatch):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("first-run-bad-option")
    run = client.create_run(exp)
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    code, err = _invoke("train", ["--image-size", "7"], capsys)
    assert code == 2
    got = client.get_run(run.info.run_id)
    assert got.info.status == "FAILED"
    assert "image-size" in got.data.tags["pipi.failure_reason"]
    assert got.data.tags["pipi.failure_reason"] in err


def test_resume_of_a_finished_run_is_refused(tracking, tiny_staged, capsys):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("first-run-resume")
    run = client.create_run(exp)
    client.set_terminated(run.info.run_id, "FINISHED")
    code, err = _invoke("train", ["--resume", run.info.run_id, "--data", str(tiny_staged),
                                  "--profile", "smoke", "--weights", "none",
                                  "--experiment", "first-run-resume"], capsys)
    assert code == 2
    assert f"resume={run.info.run_id}: that run FINISHED" in err
    assert "start a new run without resume" in err
    # nothing new was logged: no wrapper run, no model version
    runs = client.search_runs([exp])
    assert [r.info.run_id for r in runs] == [run.info.run_id]


def test_a_garbage_weights_file_is_one_line(tracking, tiny_staged, tmp_path, capsys):
    bad = tmp_path / "weights.pth"
    bad.write_bytes(b"definitely not a torch file\n" * 10)
    code, err = _invoke("train", ["--weights", str(bad), "--data", str(tiny_staged),
                                  "--profile", "smoke", "--experiment", "first-run-weights"],
                        capsys)
    assert code == 2
    line = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(line) == 1 and f"weights='{bad}'" in line[0] and "state_dict" in line[0]
    assert "Traceback" not in err and "weights_only" not in err


def test_default_synthetic_staging_is_idempotent(tmp_path):
    env = {**os.environ, "PIPI_HOME": str(tmp_path / "home"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}
    cmd = [str(BIN / "pipi"), "stage", "--source", "synthetic-tiny"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "reusing the staged synthetic-tiny release" in second.stdout
    assert "choose a new --out" not in second.stderr
