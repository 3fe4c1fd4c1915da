"""calibrate on a staged image dataset with its own classes (a 10-class Capsule Vision
stand-in): the fold names its classes, the objective scores the model's 10 outputs (checked
against an independent computation); a Galar target refuses runs and data of another class
set."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from capsule_vision import CLASSES as CV
from capsule_vision import write_cv_staged
from sklearn.metrics import roc_auc_score

from pipi.calibration.objective import (
    CalibrationObjective,
    calibration_fold,
    check_galar_classes,
)
from pipi.classes import CLASSES, class_set_of
from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD, build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError
from pipi.prior import prior_channels
from pipi.training.frames import build_frame_model


def test_the_objective_scores_the_staged_class_set(tmp_path):
    root = write_cv_staged(tmp_path / "cv")
    frames, manifest = load_staged(root)
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none",
                      seed=0).with_classes(class_set_of(manifest))
    torch.manual_seed(0)
    model = build_frame_model(cfg).eval()
    images = build_cache(root, frames, size=cfg.image_size, digest=manifest["data_digest"],
                         cache_dir=tmp_path / "cache", progress=False)
    fold = calibration_fold(frames, manifest, "kvasir-val")  # the staged data's val split
    assert fold.class_names == list(CV)  # every class has val frames in the stand-in
    obj = CalibrationObjective(model, cfg, images, fold, torch.device("cpu"))
    alpha, frac = 3.0, 0.5
    x01 = torch.from_numpy(np.asarray(images[fold.rows])).float() / 255
    prior = prior_channels(x01, alpha=alpha, lambda_eff=frac * math.hypot(*[cfg.image_size] * 2))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        probs = torch.softmax(model(torch.cat([(x01 - mean) / std, prior], 1)), 1).numpy()
    assert probs.shape == (len(fold.rows), len(CV))
    want = np.mean([roc_auc_score(fold.labels == k, probs[:, k]) for k in fold.classes])
    assert obj.score(alpha, frac) == pytest.approx(want, abs=1e-6)


def test_a_galar_target_refuses_another_class_set_in_one_line():
    with pytest.raises(ConfigError) as exc:
        check_galar_classes("galar:PillCam SB3", CV, "run abc")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("target=galar:PillCam SB3: run abc predicts 10 "
                                              "classes (Angioectasia, Bleeding,")
    assert "not Kvasir-Capsule's 14" in msg and "--class-map" in msg
    check_galar_classes("galar:PillCam SB3", CLASSES, "run abc")  # Kvasir's 14: fine
    check_galar_classes("kvasir-val", CV, "run abc")  # the data's own val split: fine


def test_mode_train_scores_a_predictions_table_of_the_data_s_classes():
    """A trial's fold predictions on a 4-class set carry prob_00..prob_03 only."""
    from pipi.calibration.trials import fold_macro_auc
    from pipi.predictions import prob_columns

    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 120)
    p = rng.dirichlet(np.ones(4), size=120)
    df = pd.DataFrame({"label": y, **{c: p[:, i] for i, c in enumerate(prob_columns(4))}})
    want = np.mean([roc_auc_score(y == c, p[:, c]) for c in range(4)])
    assert fold_macro_auc(df, range(4)) == pytest.approx(want, abs=1e-12)
