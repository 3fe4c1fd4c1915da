"""`ablate`: study plans, idempotent nested sweeps, retries, channel_infer, the SLURM executor."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from pipi.training.frames import PROB_COLUMNS
from pipi.workflows.ablate import run_ablation

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[2]
SMOKE = {"profile": "smoke", "weights": "none", "progress": False}


def _train_runs(experiment: str) -> pd.DataFrame:
    return mlflow.search_runs(experiment_names=[experiment],
                              filter_string="tags.`pipi.entry_point` = 'train'")


# --------------------------------------------------------------------------- plans
def test_sweep_retries_reports_and_is_idempotent(tracking, tiny_staged, monkeypatch):
    import pipi.runs.training as train_workflow

    real_frame, real_fit, calls = train_workflow.run_frame_cell, train_workflow.fit_sequence, {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("transient: node lost")
        return real_frame(*a, **k)

    def broken(*a, **k):
        raise RuntimeError("head exploded")

    monkeypatch.setattr(train_workflow, "run_frame_cell", flaky)
    monkeypatch.setattr(train_workflow, "fit_sequence", broken)
    kw = {"study": "eight_cell", "cells": "a,b", "seeds": "5", "data": str(tiny_staged),
          "experiment": "sweep", **SMOKE}
    first = run_ablation(**kw)
    by = {c.cell: c for c in first.children}
    assert by["a"].status == "retried" and by["a"].attempts == 2
    assert "transient: node lost" in by["a"].error
    assert by["b"].status == "failed" and by["b"].attempts == 2
    assert by["b"].error.count("head exploded") == 2
    parent = mlflow.get_run(first.parent_run_id)
    assert parent.data.tags["pipi.failed_children"] == "1"
    runs = _train_runs("sweep")
    kids = runs[runs["tags.mlflow.parentRunId"] == first.parent_run_id]
    assert sorted(kids["status"]) == ["FAILED", "FAILED", "FAILED", "FINISHED"]
    assert "head exploded" in " ".join(kids["tags.pipi.failure_reason"].dropna())
    summary = mlflow.artifacts.load_text(f"runs:/{first.parent_run_id}/summary/summary.md")
    assert "| b | efficientnet_b0 | 5 | study | failed | 2 |" in summary

    monkeypatch.setattr(train_workflow, "run_frame_cell", real_frame)
    monkeypatch.setattr(train_workflow, "fit_sequence", real_fit)
    second = run_ablation(**kw)
    assert [(c.cell, c.status) for c in second.children] == [("a", "reused"), ("b", "trained")]
    n_runs = len(_train_runs("sweep"))
    third = run_ablation(**kw)
    assert {c.status for c in third.children} == {"reused"}      # trains nothing
    assert len(_train_runs("sweep")) == n_runs
    assert [c.run_id for c in third.children] == [c.run_id for c in second.children]
    b = mlflow.get_run(second.children[1].run_id)
    assert b.data.tags["mlflow.parentRunId"] == second.parent_run_id
    assert b.data.tags["pipi.base_run_id"] == second.children[0].run_id


def test_cli_prints_the_summary(tracking, tiny_staged, monkeypatch):
    from pipi.cli import ENTRY_POINTS

    args = ["--study", "per_frame", "--cells", "a", "--seeds", "5", "--profile", "smoke",
            "--data", str(tiny_staged), "--weights", "none"]
    r = CliRunner().invoke(ENTRY_POINTS["ablate"], args)
    assert r.exit_code == 0, r.output
    assert "# ablate: per_frame" in r.output and "| a | efficientnet_b0 | 5 |" in r.output


def test_channel_infer_zeroes_prior_channels_at_inference(tracking, tiny_staged, tmp_path):
    # ResNet-18 (an untrained EfficientNet in eval mode is nearly input-independent)
    kw = {"study": "channel_infer", "seeds": "12", "backbones": "resnet18",
          "data": str(tiny_staged), "experiment": "channel-infer", **SMOKE}
    res = run_ablation(**kw)
    pi = [c for c in res.children if c.cell == "pi"]
    variants = {c.cell: c for c in res.children if "@" in c.cell}
    assert len(pi) == 1 and set(variants) == {"pi@zero_phi", "pi@zero_pblood", "pi@zero_both"}
    assert all(c.status in ("trained", "reused") for c in res.children)
    model_id = mlflow.get_run(pi[0].run_id).outputs.model_outputs[0].model_id
    py = mlflow.pyfunc.load_model(f"models:/{model_id}")
    inner = py.unwrap_python_model().predictor
    from pipi.data.cache import build_cache
    from pipi.data.staging import load_staged

    frames, man = load_staged(tiny_staged)
    test_rows = np.flatnonzero(frames["split"].to_numpy() == "test")
    imgs = np.asarray(build_cache(tiny_staged, frames, size=inner.cfg.image_size,
                                  digest=man["data_digest"], cache_dir=tmp_path, progress=False))
    hwc = imgs[test_rows].transpose(0, 2, 3, 1)

    def logged(cell):
        run = mlflow.get_run(variants[cell].run_id)
        assert run.data.tags["pipi.base_run_id"] == pi[0].run_id
        assert run.data.tags["pipi.variant"] == cell.split("@")[1]
        assert run.data.tags["mlflow.parentRunId"] == res.parent_run_id
        folder = mlflow.artifacts.download_artifacts(run_id=run.info.run_id,
                                                     artifact_path="predictions",
                                                     dst_path=str(tmp_path / cell))
        return pd.read_parquet(Path(folder) / "test.parquet")[list(PROB_COLUMNS)].to_numpy()

    # strip-and-serve through the registered pyfunc's own parameter
    served = py.predict({"pixels": list(hwc)}, params={"strip_prior": True}).iloc[:, :14].to_numpy()
    np.testing.assert_allclose(logged("pi@zero_both"), served, atol=1e-5)
    # zeroing an input channel equals zeroing its first-conv weights (EfficientNet: no bias)
    conv = inner.model.backbone.first_conv
    weights = conv.weight.detach().clone()
    for cell, channels in (("pi@zero_phi", [4]), ("pi@zero_pblood", [3])):
        with torch.no_grad():
            conv.weight.copy_(weights)
            conv.weight[:, channels] = 0
        np.testing.assert_allclose(logged(cell), py.predict({"pixels": list(hwc)}).iloc[:, :14].to_numpy(),
                                   atol=1e-5)
    assert np.abs(logged("pi@zero_phi") - logged("pi@zero_pblood")).max() > 1e-4
    assert np.abs(logged("pi@zero_both") - logged("pi@zero_phi")).max() > 1e-4
    again = run_ablation(**kw)
    assert {c.status for c in again.children} == {"reused"}


# --------------------------------------------------------------------------- SLURM


@pytest.mark.slow
def test_slurm_executor_runs_children_as_a_job_array(tracking, tiny_staged, slurm,
                                                     monkeypatch):
    import pipi.sweeps.slurm as slurm_mod

    real_command, seen = slurm_mod.train_command, set()

    def first_b_task_dies(cfg, **k):
        if cfg.cell == "b" and "b" not in seen:
            seen.add("b")
            return "echo 'simulated node failure' >&2; exit 3"
        return real_command(cfg, **k)

    monkeypatch.setattr(slurm_mod, "train_command", first_b_task_dies)
    kw = {"study": "eight_cell", "cells": "a,b", "seeds": "6", "data": str(tiny_staged),
          "experiment": "sweep-slurm", "executor": "slurm", **SMOKE}
    res = run_ablation(**kw)
    assert [(c.cell, c.status) for c in res.children] == [("a", "trained"), ("b", "retried")]
    assert "simulated node failure" in res.children[1].error
    failed = mlflow.search_runs(experiment_names=["sweep-slurm"],
                                filter_string="attributes.status = 'FAILED'")
    assert len(failed) == 1 and "simulated node failure" in failed["tags.pipi.failure_reason"][0]
    for c in res.children:
        run = mlflow.get_run(c.run_id)
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == res.parent_run_id
        _, task = run.data.tags["pipi.slurm_job"].split("_")
        name = "frame-try1" if c.cell == "a" else "sequence-try2"
        log = Path(os.environ["PIPI_SLURM_DIR"]) / res.parent_run_id / f"{name}_{task}.log"
        assert f"mlflow run {ROOT} -e train" in log.read_text()           # ran via `mlflow run`
        assert run.data.tags["pipi.cell"] == c.cell and "test/macro_auc" in run.data.metrics
    jobs = Path(os.environ["PIPI_SLURM_DIR"]) / res.parent_run_id
    assert {p.name for p in jobs.glob("*.sh")} == {"frame-try1.sh", "sequence-try1.sh",
                                                  "sequence-try2.sh"}
    assert mlflow.get_run(res.children[1].run_id).data.tags["pipi.base_run_id"] == \
        res.children[0].run_id
    again = run_ablation(**kw)
    assert {c.status for c in again.children} == {"reused"}
    assert not (Path(os.environ["PIPI_SLURM_DIR"]) / again.parent_run_id).exists()


@pytest.mark.slow
def test_mlflow_run_ablate_entry_point(tracking, tiny_staged):
    import subprocess

    bin_dir = Path(sys.executable).parent
    r = subprocess.run(
        [str(bin_dir / "mlflow"), "run", str(ROOT), "-e", "ablate", "--env-manager", "local",
         "--experiment-name", "sweep-cli", "-P", "study=per_frame", "-P", "cells=a",
         "-P", "seeds=5", "-P", "profile=smoke", "-P", f"data={tiny_staged}",
         "-P", "weights=none"],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=False,
        env={**os.environ, "MLFLOW_TRACKING_URI": tracking,
             "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# ablate: per_frame" in r.stdout
    parents = mlflow.search_runs(experiment_names=["sweep-cli"],
                                 filter_string="tags.`pipi.entry_point` = 'ablate'")
    assert len(parents) == 1
    assert parents["tags.mlflow.project.entryPoint"][0] == "ablate"
    assert parents["params.study"][0] == "per_frame"
