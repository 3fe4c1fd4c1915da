"""calibrate: the objective against an independent computation, folds, prior_params, the
Optuna study with nested MLflow runs (SQLite; PostgreSQL with two workers), bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from pipi.calibration.objective import (
    CalibrationObjective,
    PriorParams,
    calibration_fold,
    parse_target,
    prior_params_document,
)
from pipi.calibration.study import open_storage
from pipi.cli import ENTRY_POINTS
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError
from pipi.runs.prior_params import load_prior_params
from pipi.workflows.calibrate import run_calibration

SMOKE_PI = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none"}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pi_run(smoke_study) -> str:
    """The smoke study's `pi` run (ResNet-18: an untrained EfficientNet is nearly
    input-independent)."""
    return smoke_study.run("pi")


def test_folds_of_kvasir_and_galar(tiny_staged, galar_staged):
    frames, manifest = load_staged(tiny_staged)
    fold = calibration_fold(frames, manifest, "kvasir-val")
    np.testing.assert_array_equal(fold.rows, np.flatnonzero(frames["split"] == "val"))
    assert set(fold.classes) == set(frames.loc[frames["split"] == "val", "class_index"])
    gframes, gman = load_staged(galar_staged)
    system = sorted(set(gframes["capsule_system"]))[0]
    gfold = calibration_fold(gframes, gman, f"galar:{system}")
    want = np.flatnonzero((gframes["capsule_system"] == system)
                          & (gframes["vendor_fold"] == "calibration"))
    np.testing.assert_array_equal(gfold.rows, want)
    assert set(gfold.rows).isdisjoint(np.flatnonzero(gframes["vendor_fold"] == "evaluation"))
    with pytest.raises(ConfigError, match="no capsule system 'Nope'.*Available"):
        calibration_fold(gframes, gman, "galar:Nope")
    with pytest.raises(ConfigError, match="staged Galar folder"):
        calibration_fold(gframes, gman, "kvasir-val")
    with pytest.raises(ConfigError, match="needs data=<a staged Galar folder>"):
        calibration_fold(frames, manifest, f"galar:{system}")
    for bad in ("", "galar:", "kvasir-test", "galar"):
        with pytest.raises(ConfigError, match="target="):
            parse_target(bad)


def _children(parent_id: str):
    return mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")


def test_calibrate_fits_logs_and_continues_the_study(tracking, pi_run, tiny_staged, tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    kw = {"run": pi_run, "target": "kvasir-val", "storage": storage, "data": str(tiny_staged),
          "experiment": "calibrate", "progress": False}
    r = run_calibration(trials=3, **kw)
    assert r.trials_run == [0, 1, 2] and r.n_total == 3
    study = optuna.load_study(study_name=r.study, storage=open_storage(storage))
    trials = {t.number: t for t in study.trials}
    # trial 0 is the run's own prior (alpha 4, lambda_eff 0.25 x diagonal)
    assert trials[0].params == {"alpha": 4.0, "lambda_eff_fraction": 0.25}
    kids = {int(c.data.tags["pipi.trial_number"]): c for c in _children(r.run_id)}
    assert set(kids) == {0, 1, 2}
    for n, child in kids.items():
        assert float(child.data.params["alpha"]) == pytest.approx(trials[n].params["alpha"])
        assert child.data.tags["pipi.trial_state"] == trials[n].state.name
        if trials[n].value is not None:
            assert child.data.metrics["calibration/macro_auc"] == pytest.approx(trials[n].value)
    parent = mlflow.get_run(r.run_id)
    best = max((t for t in trials.values() if t.value is not None), key=lambda t: t.value)
    assert float(parent.data.params["alpha"]) == pytest.approx(best.params["alpha"])
    assert parent.data.metrics["calibration/best_macro_auc"] == pytest.approx(best.value)
    # the baseline trial's value is the objective of the model as trained, recomputed here
    from pipi.runs.evaluate import load_run_model

    model, cfg = load_run_model(pi_run)
    frames, manifest = load_staged(tiny_staged)
    images = build_cache(tiny_staged, frames, size=cfg.image_size,
                         digest=manifest["data_digest"], cache_dir=tmp_path, progress=False)
    obj = CalibrationObjective(model, cfg, images, calibration_fold(frames, manifest,
                                                                    "kvasir-val"),
                               torch.device("cpu"))
    assert r.baseline_value == pytest.approx(obj.score(4.0, 0.25), abs=1e-9)
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(r.run_id, "optuna")}
    assert {"optuna/plots.html", "optuna/trials.csv"} <= arts
    figs = {a.path for a in mlflow.MlflowClient().list_artifacts(r.run_id, "figures")}
    assert figs == {"figures/best_prior_examples.png"}  # the best trial's prior (mlflow-ui.md)
    html = Path(mlflow.artifacts.download_artifacts(run_id=r.run_id,
                                                    artifact_path="optuna/plots.html",
                                                    dst_path=str(tmp_path / "a"))).read_text()
    assert html.count("<h2>") == 3 and "alpha x lambda_eff contour" in html
    # prior_params by calibrate run id: the best trial, lambda_eff scaled to the image size
    p = load_prior_params(r.run_id)
    assert (p.alpha, p.lambda_eff_fraction) == (best.params["alpha"],
                                                best.params["lambda_eff_fraction"])
    # a second call continues the same study (default name: run, target, data digest)
    again = run_calibration(trials=1, **kw)
    assert again.study == r.study and again.trials_run == [3] and again.n_total == 4
    assert len(_children(again.run_id)) == 1


def test_calibrate_on_a_galar_vendor_fold(tracking, pi_run, galar_staged, tmp_path):
    gframes, _ = load_staged(galar_staged)
    system = sorted(set(gframes["capsule_system"]))[-1]
    r = run_calibration(run=pi_run, target=f"galar:{system}", trials=2, sampler="grid",
                        storage=f"sqlite:///{tmp_path / 'o.db'}", data=str(galar_staged),
                        experiment="calibrate", progress=False)
    parent = mlflow.get_run(r.run_id)
    assert parent.data.tags["pipi.target"] == f"galar:{system}"
    assert parent.data.tags["pipi.dataset"] == "galar"
    assert int(parent.data.params["fold_frames"]) == int(
        ((gframes["capsule_system"] == system) & (gframes["vendor_fold"] == "calibration")).sum())
    assert len(_children(r.run_id)) == 2


def test_cli_bad_input_is_one_line_and_starts_nothing(tracking, pi_run, tmp_path):
    cmd = ENTRY_POINTS["calibrate"]
    runner = CliRunner()
    before = len(mlflow.search_runs(search_all_experiments=True, output_format="list"))
    cases = {
        ("--storage", "postgresql://pipi@127.0.0.1:9/nowhere"): "cannot open the Optuna storage",
        ("--target", "galar"): "target='galar'",
        ("--storage", "redis://x"): "use an Optuna RDB URL",
        ("--target", "galar:Olympus"): "pass data=<a staged Galar folder>",
    }
    for (opt, value), expected in cases.items():
        res = runner.invoke(cmd, ["--run", pi_run, opt, value, "--trials", "1"]
                            + (["--storage", f"sqlite:///{tmp_path / 'x.db'}"]
                               if opt != "--storage" else []))
        assert res.exit_code == 2, res.output
        errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], res.output
    res = runner.invoke(cmd, ["--run", "0" * 32, "--storage", f"sqlite:///{tmp_path / 'y.db'}"])
    assert res.exit_code == 2 and "not found" in res.output
    after = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(after) == before  # nothing was started


# --------------------------------------------------------------------------- PostgreSQL
@pytest.fixture()
def postgres():
    import shutil
    import tempfile

    from pipi.tracking.server import Postgres, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (make test installs it: scripts/system-deps.sh)")
    root = Path(tempfile.mkdtemp(prefix="pipi-pg-"))  # outside pytest's 0700 tree
    root.chmod(0o755)  # the postgres user must reach its folder
    pg = Postgres(root / "pg", databases=("optuna",))
    yield pg.uri("optuna", with_password=True)  # the workers take only the URL
    pg.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_share_one_postgresql_study(tracking, pi_run, tiny_staged, postgres):
    storage = postgres
    r = run_calibration(run=pi_run, target="kvasir-val", trials=6, workers=2, storage=storage,
                        data=str(tiny_staged), experiment="calibrate-pg", pruner="none",
                        progress=False)
    study = optuna.load_study(study_name=r.study, storage=open_storage(storage))
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers)) == 6 and r.trials_run == sorted(numbers)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    kids = _children(r.run_id)
    assert sorted(int(c.data.tags["pipi.trial_number"]) for c in kids) == numbers
    workers = {c.data.tags["pipi.worker"] for c in kids}
    assert len(workers) == 2 and workers == {t.user_attrs["worker"] for t in study.trials}
    assert {w.worker for w in r.workers} == workers
    assert all(os.getpid() != int(w.split(":")[1]) for w in workers)  # separate processes


@pytest.mark.slow
def test_galar_scores_with_the_calibrated_prior(tracking, pi_run, galar_staged, tmp_path):
    from pipi.predictions import PROB_COLUMNS
    from pipi.workflows.galar import run_galar

    def probs(child_id, name):
        folder = mlflow.artifacts.download_artifacts(run_id=child_id, artifact_path="predictions",
                                                     dst_path=str(tmp_path / name))
        return pd.read_parquet(Path(folder) / "test.parquet")[list(PROB_COLUMNS)].to_numpy()

    # one fold for all three (the default is every video zero-shot, the evaluation fold with
    # a calibrated prior)
    kw = {"runs": pi_run, "data": str(galar_staged), "experiment": "calibrate-galar",
          "progress": False, "fold": "evaluation"}
    zero = run_galar(**kw).table.iloc[0]["galar_run_id"]
    own = tmp_path / "own.json"  # the run's own prior, written as a calibration result
    own.write_text(json.dumps(prior_params_document(PriorParams(4.0, 0.25), image_size=32)))
    same = run_galar(prior_params=str(own), **kw).table.iloc[0]["galar_run_id"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(prior_params_document(PriorParams(11.0, 0.9), image_size=32)))
    moved = run_galar(prior_params=str(other), **kw).table.iloc[0]["galar_run_id"]
    assert mlflow.get_run(moved).data.tags["pipi.variant"] == "calibrated"
    assert mlflow.get_run(moved).data.tags["pipi.prior_params"] == str(other)
    np.testing.assert_allclose(probs(same, "same"), probs(zero, "zero"), atol=1e-6)
    assert np.abs(probs(moved, "moved") - probs(zero, "zero2")).max() > 1e-4


