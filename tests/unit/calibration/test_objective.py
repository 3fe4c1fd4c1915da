"""calibrate: the objective against an independent computation, folds, prior_params, the
Optuna study with nested MLflow runs (SQLite; PostgreSQL with two workers), bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import optuna
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from pipi.calibration.objective import (
    REPORTS_PER_TRIAL,
    CalibrationObjective,
    PriorParams,
    calibration_fold,
    interleaved_order,
    prior_params_document,
)
from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD, build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError, DataError
from pipi.prior import prior_channels
from pipi.runs.prior_params import load_prior_params
from pipi.training.frames import build_frame_model

SMOKE_PI = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none"}


# --------------------------------------------------------------------------- fixtures
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
def test_storage_from_the_environment_keeps_the_password_out_of_params(monkeypatch, tmp_path):
    from pipi.calibration.study import STORAGE_ENV, check_storage_url, default_storage, redact

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
