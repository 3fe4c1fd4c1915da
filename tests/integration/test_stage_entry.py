"""The `stage` entry point and `pipi synthesize/stage` CLI against a real tracking server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
from stores import new_sqlite_store

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(uri, home):
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "PIPI_HOME": str(home),
            "PATH": f"{BIN}:{os.environ['PATH']}"}


def test_mlflow_run_stage_synthetic(tracking, tmp_path):
    out = tmp_path / "staged"
    r = subprocess.run(
        [str(BIN / "mlflow"), "run", str(ROOT), "-e", "stage", "--env-manager", "local",
         "-P", "source=synthetic-tiny", "-P", f"out={out}", "--experiment-name", "staging"],
        capture_output=True, text=True, cwd=ROOT, env=_env(tracking, tmp_path / "home"), timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # the count table in the paper's shape is printed, and where the run is
    assert "| Class | Train | Val | Test |" in r.stdout and "| **Total (frames)** |" in r.stdout
    assert "stage run" in r.stdout and tracking in r.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    runs = mlflow.search_runs(experiment_names=["staging"])
    assert len(runs) == 1 and runs["status"][0] == "FINISHED"
    run = mlflow.get_run(runs["run_id"][0])
    assert run.data.tags["pipi.entry_point"] == "stage"
    assert run.data.tags["pipi.data_digest"] == manifest["data_digest"]
    assert run.data.tags["pipi.split_sha256"] == manifest["content_sha256"]
    arts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"manifest.json", "counts.md", "counts.csv"} <= arts
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1 and inputs[0].dataset.name == "kvasir-synthetic-tiny"
    frames = pd.read_parquet(out / "frames.parquet")
    # frames, not (frame, class) rows: a multilabel frame counts once
    assert run.data.metrics["frames_test"] == frames.loc[frames["split"] == "test", "filename"].nunique()


def test_pipi_cli_synthesize_and_stage(tmp_path, monkeypatch):
    env = {**os.environ, "MLFLOW_TRACKING_URI": new_sqlite_store(tmp_path / "m.db")}
    r = subprocess.run([str(BIN / "pipi"), "synthesize", "kvasir", "--out", str(tmp_path / "rel"),
                        "--preset", "tiny", "--videos", "12", "--seed", "3"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([str(BIN / "pipi"), "stage", "kvasir", "--images",
                        str(tmp_path / "rel" / "labelled_images"), "--metadata",
                        str(tmp_path / "rel" / "metadata.csv"), "--out", str(tmp_path / "st"),
                        "--link", "copy"], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| Class | Train | Val | Test |" in r.stdout
    man = json.loads((tmp_path / "st" / "manifest.json").read_text())
    assert len(man["video_to_split"]) == 12
    # a bad input is one clear line on stderr and a non-zero exit, nothing written
    r = subprocess.run([str(BIN / "pipi"), "stage", "kvasir", "--images",
                        str(tmp_path / "rel" / "labelled_images"), "--metadata",
                        str(tmp_path / "missing.csv"), "--out", str(tmp_path / "st2"), "--no-mlflow"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "missing.csv: metadata file not found" in r.stderr
    assert not (tmp_path / "st2").exists()
    r = subprocess.run([str(BIN / "pipi"), "synthesize", "galar", "--out", str(tmp_path / "galar"),
                        "--preset", "tiny"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "galar" / "metadata.csv").is_file()


def test_params_logged_by_mlflow_run_are_not_logged_twice(tracking):
    from pipi import tracking as tr

    with tr.pipi_run(entry_point="test", experiment="params") as run:
        import mlflow as m

        m.log_params({"cells": "''", "epochs": "0"})  # what `mlflow run` logs for defaults
        run.log_params({"cells": "", "epochs": 4, "lr": 0.001})
        p = m.get_run(run.run_id).data.params
    assert p == {"cells": "''", "epochs": "0", "epochs.resolved": "4", "lr": "0.001"}
