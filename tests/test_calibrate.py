"""calibrate: the objective against an independent computation, folds, prior_params, the
Optuna study with nested MLflow runs (SQLite; PostgreSQL with two workers), bad input."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from sklearn.metrics import roc_auc_score

from pipi.calibration import (
    REPORTS_PER_TRIAL,
    CalibrationObjective,
    PriorParams,
    calibration_fold,
    interleaved_order,
    load_prior_params,
    parse_target,
    prior_params_document,
)
from pipi.cli import ENTRY_POINTS
from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD, build_cache
from pipi.data.kvasir import load_staged
from pipi.errors import ConfigError, DataError
from pipi.prior import prior_channels
from pipi.training import build_frame_model
from pipi.workflows.calibrate import open_storage, run_calibration

SMOKE_PI = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none"}


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def galar_staged(tmp_path_factory, pipi_home) -> Path:
    from pipi.data import synthetic
    from pipi.data.galar import stage_galar

    rel = synthetic.synthesize_galar(tmp_path_factory.mktemp("galar") / "rel", preset="tiny",
                                     seed=3, progress=False)
    out = tmp_path_factory.mktemp("galar-st") / "staged"
    stage_galar(rel, out, progress=False)
    return out


@pytest.fixture(scope="module")
def pi_run(mlflow_server, tiny_staged) -> str:
    """A smoke `pi` run (ResNet-18: an untrained EfficientNet is nearly input-independent)."""
    from pipi.workflows import train as runner

    mlflow.set_tracking_uri(mlflow_server.uri)
    cfg = make_config(seed=7, **SMOKE_PI)
    return runner.train(cfg, data=str(tiny_staged), experiment="calibrate-src",
                        progress=False, register=False)["run_id"]


def _objective(tiny_staged, tmp_path, *, batch_size=64, cell="pi"):
    cfg = make_config(seed=0, **{**SMOKE_PI, "cell": cell})
    torch.manual_seed(0)
    model = build_frame_model(cfg).eval()
    frames, manifest = load_staged(tiny_staged)
    images = build_cache(tiny_staged, frames, size=cfg.image_size,
                         digest=manifest["data_digest"], cache_dir=tmp_path, progress=False)
    fold = calibration_fold(frames, manifest, "kvasir-val")
    return CalibrationObjective(model, cfg, images, fold, torch.device("cpu"),
                                batch_size=batch_size), images


def _sklearn_macro_auc(labels, probs, classes):
    return float(np.mean([roc_auc_score(labels == c, probs[:, c]) for c in classes
                          if 0 < (labels == c).sum() < len(labels)]))


# --------------------------------------------------------------------------- the objective
def test_objective_equals_an_independent_computation(tiny_staged, tmp_path):
    obj, images = _objective(tiny_staged, tmp_path)
    alpha, frac = 2.5, 0.6
    size = obj.cfg.image_size
    # independently: prior with lambda_eff in px, ImageNet normalisation, forward, sklearn AUC
    x01 = torch.from_numpy(np.asarray(images[obj.fold.rows])).float() / 255
    prior = prior_channels(x01, alpha=alpha, lambda_eff=frac * math.hypot(size, size))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        probs = torch.softmax(obj.model(torch.cat([(x01 - mean) / std, prior], 1)), 1).numpy()
    expected = _sklearn_macro_auc(obj.fold.labels, probs, obj.fold.classes)
    assert obj.score(alpha, frac) == pytest.approx(expected, abs=1e-6)
    np.testing.assert_allclose(obj.predict(alpha, frac), probs, atol=1e-5)
    # the prior really is recomputed: other parameters, other probabilities
    assert np.abs(obj.predict(1.0, 0.1) - obj.predict(12.0, 1.0)).max() > 1e-4
    # batching does not change the result
    small, _ = _objective(tiny_staged, tmp_path, batch_size=3)
    assert small.score(alpha, frac) == pytest.approx(expected, abs=1e-6)
    assert obj.last_cost.forward > 0 and obj.last_cost.inputs > 0


def test_intermediate_values_are_running_aucs_in_the_fixed_order(tiny_staged, tmp_path):
    obj, _ = _objective(tiny_staged, tmp_path, batch_size=2)
    probs = obj.predict(3.0, 0.3)
    reports = []
    obj.score(3.0, 0.3, report=lambda step, value: reports.append((step, value)))
    n_batches = math.ceil(len(obj.fold.rows) / 2)
    assert 1 <= len(reports) <= REPORTS_PER_TRIAL
    steps = [s for s, _ in reports]
    assert steps == sorted(set(steps)) and steps[-1] < n_batches
    order = obj.order
    for step, value in reports:
        seen = order[: step * 2]
        labels = obj.fold.labels[seen]
        assert value == pytest.approx(_sklearn_macro_auc(labels, probs[seen], [
            c for c in obj.fold.classes if c in set(labels)]), abs=1e-9)

    def stop(step, value):
        raise optuna.TrialPruned()

    with pytest.raises(optuna.TrialPruned):
        obj.score(3.0, 0.3, report=stop)


def test_interleaved_order_spreads_every_class():
    labels = np.repeat([0, 1, 2, 5], [40, 10, 3, 1])
    order = interleaved_order(labels, seed=4)
    assert sorted(order) == list(range(len(labels)))
    np.testing.assert_array_equal(order, interleaved_order(labels, seed=4))
    n = len(labels)
    for k in range(1, n + 1):
        got = labels[order[:k]]
        for c, nc in zip(*np.unique(labels, return_counts=True)):
            assert abs((got == c).sum() - k * nc / n) <= 4  # at most one per class off


def test_five_channel_runs_only(tiny_staged, tmp_path):
    with pytest.raises(ConfigError, match="5-channel cell"):
        _objective(tiny_staged, tmp_path, cell="a")


# --------------------------------------------------------------------------- folds
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


def test_a_fold_without_two_classes_is_refused():
    frames = pd.DataFrame({"split": ["val"] * 3 + ["train"], "class_index": [4, 4, 4, 2]})
    manifest = {"dataset": "kvasir-capsule", "evaluable_classes": None}
    with pytest.raises(DataError, match="no positives of any evaluable class"):
        calibration_fold(frames, manifest, "kvasir-val")
    with pytest.raises(DataError, match=r"\(0 frames\)"):
        calibration_fold(frames.assign(split="train"), manifest, "kvasir-val")


# --------------------------------------------------------------------------- prior_params
def test_prior_params_file_resolution_and_image_size(tmp_path):
    doc = prior_params_document(PriorParams(6.0, 0.4), image_size=32, value=0.7)
    path = tmp_path / "prior_params.json"
    path.write_text(json.dumps(doc))
    p = load_prior_params(str(path))
    assert (p.alpha, p.lambda_eff_fraction) == (6.0, 0.4)
    cfg = p.apply(make_config(cell="pi", profile="demo"))
    assert cfg.prior.alpha == 6.0
    assert cfg.prior.lambda_eff == pytest.approx(0.4 * math.hypot(64, 64))
    assert doc["lambda_eff"] == pytest.approx(0.4 * math.hypot(32, 32))
    path.write_text(json.dumps({**doc, "format": "other"}))
    with pytest.raises(ConfigError, match="not a pipi.prior_params document"):
        load_prior_params(str(path))
    with pytest.raises(ConfigError, match="neither a file nor a calibrate run id"):
        load_prior_params(str(tmp_path / "missing.json"))


# --------------------------------------------------------------------------- end to end
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
    from pipi.evaluate import load_run_model

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

    from pipi.server import Postgres, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (make test installs it: scripts/system-deps.sh)")
    root = Path(tempfile.mkdtemp(prefix="pipi-pg-"))  # outside pytest's 0700 tree
    root.chmod(0o755)  # the postgres user must reach its folder
    pg = Postgres(root / "pg", databases=("optuna",))
    yield pg.uri("optuna")
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

    kw = {"runs": pi_run, "data": str(galar_staged), "experiment": "calibrate-galar",
          "progress": False}
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


def test_storage_from_the_environment_keeps_the_password_out_of_params(monkeypatch, tmp_path):
    from pipi.workflows.calibrate import STORAGE_ENV, check_storage_url, default_storage, redact

    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert check_storage_url("") == default_storage()
    url = "postgresql+psycopg://lab:s3cret@db.example.org:5432/optuna"
    monkeypatch.setenv(STORAGE_ENV, url)
    assert check_storage_url("") == url               # `-P storage=` left empty
    assert check_storage_url(f"sqlite:///{tmp_path}/o.db") == f"sqlite:///{tmp_path}/o.db"
    assert "s3cret" not in redact(url) and "db.example.org" in redact(url)
    monkeypatch.setenv(STORAGE_ENV, "redis://nope")
    with pytest.raises(ConfigError, match="use an Optuna RDB URL"):
        check_storage_url("")
