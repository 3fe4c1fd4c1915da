"""Training throughput options (issue 15): device, precision, channels_last, determinism,
the device batch stream, and ``ablate -P parallel=N``, on CPU."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from pipi import tracking as pipi_tracking
from pipi.config import make_config
from pipi.training.frames import run_frame_cell
from pipi.workflows.ablate import run_ablation


def test_cli_refuses_a_missing_gpu_before_anything_starts(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from pipi.cli import ENTRY_POINTS

    r = CliRunner().invoke(ENTRY_POINTS["train"], ["--device", "cuda", "--profile", "smoke",
                                                   "--data", str(tmp_path / "nowhere")])
    assert r.exit_code == 2
    assert "error: device=cuda: torch sees no CUDA device" in r.output


# --------------------------------------------------------------------------- data path
def test_deterministic_training_repeats_exactly_and_bf16_channels_last_trains(tiny_staged,
                                                                               tmp_path):
    kw = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none",
          "seed": 7}
    cfg = make_config(**kw, deterministic=True)
    runs = [run_frame_cell(cfg, data=tiny_staged, progress=False, cache_dir=tmp_path)
            for _ in range(2)]
    a, b = (r.predictions["test"] for r in runs)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert runs[0].history[0]["loss"] == runs[1].history[0]["loss"]
    fast = make_config(**kw, precision="bf16", channels_last="true")
    out = run_frame_cell(fast, data=tiny_staged, progress=False, cache_dir=tmp_path)
    assert out.runtime["resolved_precision"] == "bf16"
    assert out.runtime["resolved_channels_last"] == "true"
    assert np.isfinite(out.history[0]["loss"])
    probs = out.predictions["test"].filter(like="prob_").to_numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-4)
    assert next(out.model.parameters()).is_contiguous()  # handed back as plain NCHW


@pytest.mark.slow
def test_compile_true_trains_and_predicts_like_eager(tiny_staged, tmp_path):
    # a compiled module has no truth value: `forward or model` raised TypeError in every
    # compile=true run (found on an H100)
    kw = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none",
          "seed": 5}
    eager = run_frame_cell(make_config(**kw), data=tiny_staged, progress=False,
                           cache_dir=tmp_path)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    comp = run_frame_cell(make_config(**kw, compile=True), data=tiny_staged, progress=False,
                          cache_dir=tmp_path)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it did compile
    a, b = (r.predictions["test"].filter(like="prob_").to_numpy() for r in (eager, comp))
    np.testing.assert_allclose(b, a, atol=1e-2)  # same weights and batches; fused kernels round
    # (the training losses differ: compiled dropout draws its own masks)
    assert np.isfinite(comp.history[0]["loss"])


def _children(parent_run_id: str) -> pd.DataFrame:
    rows = []
    for r in pipi_tracking.runs.child_runs(parent_run_id):
        rows.append({"cell": r.tags["pipi.cell"], "seed": r.tags["pipi.seed"],
                     "config_hash": r.tags["pipi.config_hash"], "status": r.status,
                     "role": r.tags.get("pipi.sweep_role"),
                     "test_macro_auc": r.metrics["test/macro_auc"],
                     "params": {k: v for k, v in r.params.items()
                                if k != "data_dir"},
                     "run_id": r.run_id})
    return pd.DataFrame(rows).sort_values(["cell", "seed"]).reset_index(drop=True)


def _test_probs(run_id: str, dst) -> np.ndarray:
    path = mlflow.artifacts.download_artifacts(run_id=run_id,
                                               artifact_path="predictions/test.parquet",
                                               dst_path=str(dst))
    return pd.read_parquet(path).filter(like="prob_").to_numpy()


@pytest.mark.slow
def test_parallel_2_gives_the_same_child_runs_as_parallel_1(tracking, tiny_staged, tmp_path,
                                                           monkeypatch):
    # the sweep's process and its (spawned) workers must key children alike even when git
    # answers differently in each (a loaded machine, a dirty tree): give this process a
    # code version of its own that a worker could not read from git
    import pipi.tracking.store as store

    monkeypatch.delenv(pipi_tracking.CODE_VERSION_ENV, raising=False)
    monkeypatch.setattr(store, "_git_code_version", lambda: "sweep-process-version")
    kw = {"study": "per_frame", "cells": "a,pi", "seeds": "3", "data": str(tiny_staged),
          "profile": "smoke", "weights": "none", "experiment": "parallel", "progress": False}
    one = run_ablation(parallel=1, **kw)
    first = _children(one.parent_run_id)
    # forget the first sweep's children, so the second one trains them again
    for rid in first["run_id"]:
        mlflow.delete_run(rid)
    two = run_ablation(parallel=2, **kw)
    assert {c.status for c in two.children} == {"trained"}
    second = _children(two.parent_run_id)
    assert list(second["status"]) == ["FINISHED", "FINISHED"]
    assert set(second["run_id"]).isdisjoint(first["run_id"])
    assert list(first["params"]) == list(second["params"])
    cols = ["cell", "seed", "config_hash", "role", "test_macro_auc"]
    pd.testing.assert_frame_equal(first[cols], second[cols])
    for a, b in zip(first["run_id"], second["run_id"]):
        np.testing.assert_array_equal(_test_probs(a, tmp_path / a), _test_probs(b, tmp_path / b))
    assert mlflow.get_run(two.parent_run_id).data.params["parallel"] == "2"
    assert {mlflow.get_run(r).data.tags["pipi.code_version"]
            for r in second["run_id"]} == {"sweep-process-version"}
