"""The `galar` entry point: zero-shot children of Kvasir-trained runs on staged Galar frames,
their metrics (checked against scikit-learn on the logged predictions), reuse, the retention
tables of `aggregate` and `pipi galkva submission --experiment` on those runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fakes import sk_macro
from scipy import special

from pipi.classes import CLASSES, class_index
from pipi.errors import ConfigError
from pipi.galkva import SCORING_SETS
from pipi.predictions import predictions_frame, read_predictions, write_predictions
from pipi.workflows import galar as workflow

GALKVA = [class_index(c) for c in SCORING_SETS["v1.0"]]


def test_galar_metrics_match_scikit_learn_overall_and_per_capsule_system():
    rng = np.random.default_rng(0)
    classes = [*GALKVA, 3, 7]  # two mapped classes outside the GalKva intersection
    y = rng.choice(classes, 400)
    systems = rng.choice(["PillCam SB3", "Olympus"], 400)
    probs = special.softmax(rng.normal(size=(400, 14)) + np.eye(14)[y], axis=1)
    frames = pd.DataFrame({"class_index": y, "capsule_system": systems})
    m = workflow.galar_metrics(frames, probs)
    assert m["test/mapped_macro_auc"] == pytest.approx(sk_macro(y, probs, classes))
    g = np.isin(y, GALKVA)
    assert m["test/galkva_macro_auc"] == pytest.approx(sk_macro(y[g], probs[g], GALKVA))
    for s in ("PillCam SB3", "Olympus"):
        k = systems == s
        slug = s.replace(" ", "_")
        assert m[f"test/capsule/{slug}/mapped_macro_auc"] == pytest.approx(
            sk_macro(y[k], probs[k], classes))
        assert m[f"test/capsule/{slug}/galkva_macro_auc"] == pytest.approx(
            sk_macro(y[k & g], probs[k & g], GALKVA))
        assert m[f"test/capsule/{slug}/n_frames"] == k.sum()


def test_galar_evaluation_selects_the_fold_and_refuses_unknown_folds():
    frames = pd.DataFrame({"vendor_fold": ["calibration", "evaluation", "evaluation"]})
    ev = workflow.galar_evaluation("evaluation")
    assert (ev.study, ev.variant, ev.splits, dict(ev.options)) == (
        "galar", "zero_shot", ("test",), {"fold": "evaluation"})
    assert ev.select(frames).tolist() == [False, True, True]
    assert workflow.galar_evaluation("all").select(frames).all()
    with pytest.raises(ConfigError, match="fold='calib'"):
        workflow.galar_evaluation("calib")


def test_predictions_carry_capsule_system_and_stay_readable(tmp_path):
    frames = pd.DataFrame({"path": ["a.png", "b.png"], "video_id": ["1", "2"],
                           "frame_number": [0, 1], "class_index": [1, 2],
                           "class": [CLASSES[1], CLASSES[2]],
                           "capsule_system": ["Olympus", "PillCam SB3"]})
    folder = write_predictions({"test": predictions_frame(frames, np.full((2, 14), 1 / 14))},
                               tmp_path / "predictions")
    schema = json.loads((folder / "schema.json").read_text())
    assert schema["version"] == 1 and schema["columns"][-1] == "capsule_system"
    assert read_predictions(folder)["capsule_system"].tolist() == ["Olympus", "PillCam SB3"]
    plain = write_predictions({"test": predictions_frame(frames.drop(columns="capsule_system"),
                                                         np.full((2, 14), 1 / 14))},
                              tmp_path / "plain")
    assert "capsule_system" not in json.loads((plain / "schema.json").read_text())["columns"]


