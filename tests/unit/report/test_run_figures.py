"""The per-run figures and the descriptions the MLflow UI shows (no server, no training)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from sklearn.metrics import auc as sk_auc
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import roc_auc_score, roc_curve

from pipi.classes import CLASSES
from pipi.errors import ConfigError
from pipi.predictions import PROB_COLUMNS
from pipi.prior import prior_channels
from pipi.report.descriptions import (
    EVIDENCE_HEADING,
    model_card,
    run_description,
    training_evidence,
    version_description,
)
from pipi.report.run_figures import evaluation_figures, prediction_figures, prior_examples
from pipi.tracking import system_metrics_enabled
from pipi.tracking.handle import MAX_FIGURE_BYTES


def _predictions(n=300, seed=0, systems=False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 14, n)
    probs = rng.dirichlet(np.ones(14), n)
    probs[np.arange(n), labels] += rng.uniform(0, 1.5, n)  # a model better than chance
    probs /= probs.sum(1, keepdims=True)
    df = pd.DataFrame(probs.astype(np.float32), columns=list(PROB_COLUMNS))
    df["label"] = labels
    if systems:
        df["capsule_system"] = rng.choice(["PillCam SB3", "OMOM HD"], n)
    return df


def _image(png: bytes) -> Image.Image:
    assert png.startswith(b"\x89PNG")
    im = Image.open(io.BytesIO(png))
    im.load()
    return im


def test_prediction_figures_are_small_pngs_with_the_run_in_the_legend():
    df = _predictions()
    figs = prediction_figures(df, list(range(14)), label="pi efficientnet_b0 s42")
    assert set(figs) == {"roc_per_class", "pr_per_class", "confusion"}
    for png in figs.values():
        im = _image(png)
        assert 200 < im.width < 1200 and 200 < im.height < 1200
    assert sum(map(len, figs.values())) < MAX_FIGURE_BYTES / 2


def test_the_confusion_figure_shows_the_row_normalised_counts():
    """The numbers drawn are sklearn's confusion matrix divided by its row sums."""
    from pipi.stats import confusion_matrix, row_normalise

    df = _predictions(n=200, seed=3)
    y, pred = df["label"].to_numpy(), df[list(PROB_COLUMNS)].to_numpy().argmax(1)
    present = sorted(set(y.tolist()))
    ours = row_normalise(confusion_matrix(y, pred, present))[:, :len(present)]
    ref = sk_confusion(y, pred, labels=present, normalize="true")
    np.testing.assert_allclose(ours, ref)


def test_the_curves_drawn_are_sklearns_roc():
    """The step points of the per-class ROC (pipi.stats.roc_points) trace sklearn's curve:
    same area, which is the AUC in the legend."""
    from pipi.stats.operating import roc_points

    df = _predictions(seed=5)
    y = df["label"].to_numpy() == 2
    s = df["prob_02"].to_numpy(np.float64)
    fpr, tpr, _ = roc_points(y, s)
    rf, rt, _ = roc_curve(y, s)
    assert sk_auc(fpr, tpr) == pytest.approx(sk_auc(rf, rt))
    assert sk_auc(fpr, tpr) == pytest.approx(roc_auc_score(y, s))


def test_evaluation_figures_add_one_roc_per_capsule_system():
    figs = evaluation_figures(_predictions(systems=True), list(range(14)), label="pi@galar")
    assert "roc_per_capsule" in figs
    assert "roc_per_capsule" not in evaluation_figures(_predictions(), list(range(14)),
                                                       label="pi")


def test_prior_examples_one_row_per_class_and_a_size_bound():
    x = torch.rand(14, 3, 96, 96, generator=torch.Generator().manual_seed(0))  # worst case: noise
    prior = prior_channels(x).numpy()
    png = prior_examples((x * 255).to(torch.uint8).numpy(), prior, list(CLASSES),
                         label="pi s42", given={"P_blood": "input channel", "Phi": "zeroed"})
    im = _image(png)
    assert im.height > 3 * im.width  # fourteen rows of three panels
    assert len(png) < MAX_FIGURE_BYTES


def test_prior_examples_refuses_mismatched_arrays():
    with pytest.raises(ValueError, match="prior"):
        prior_examples(np.zeros((2, 3, 8, 8), np.uint8), np.zeros((2, 1, 8, 8)), ["a", "b"],
                       label="x", given={})


def test_run_description_names_cell_metric_classes_recipe_and_base_run():
    text = run_description(cell="b_plus", backbone="resnet18", seed=7,
                           recipe="mlflow run . -e train -P cell=b_plus", test_macro_auc=0.91234,
                           test_classes=[1, 2], data_digest="ab" * 32, base_run_id="r0",
                           base_run_url="http://h/#/experiments/1/runs/r0",
                           registered="models:/pipi-resnet18-b_plus/3")
    assert "**Cell `b_plus`** on `resnet18`, seed 7" in text
    assert "C1_5ch + C2" in text
    assert "Test macro-AUC 0.9123** over the 2 classes: Angiectasia, Blood - fresh" in text
    assert "[r0](http://h/#/experiments/1/runs/r0)" in text
    assert "mlflow run . -e train -P cell=b_plus" in text
    assert "models:/pipi-resnet18-b_plus/3" in text
    per_frame = run_description(cell="a", backbone="resnet18", seed=1, recipe="r",
                                test_macro_auc=float("nan"), test_classes=[])
    assert "base run" not in per_frame and "macro-AUC n/a" in per_frame


@pytest.mark.parametrize("cell,strip", [("pi", True), ("pblood_only", True), ("a", False),
                                        ("distill", False), ("e_plus", False)])
def test_model_card_says_how_to_serve_and_where_strip_and_serve_applies(cell, strip):
    card = model_card(cell=cell, backbone="efficientnet_b0")
    # the alias that exists: candidate after train, champion once promoted (issue 30)
    assert f"mlflow models serve -m models:/pipi-efficientnet_b0-{cell}@candidate " in card
    # issue 38: pipi serve (request limits) first, MLflow's server beside it
    assert card.index(f"pipi serve -m models:/pipi-efficientnet_b0-{cell}@candidate ") < \
        card.index("mlflow models serve")
    assert "@champion " not in card
    promoted = model_card(cell=cell, backbone="efficientnet_b0", alias="champion")
    assert f"mlflow models serve -m models:/pipi-efficientnet_b0-{cell}@champion " in promoted
    assert ('"strip_prior": true' in card) is strip
    assert ("clip" in card) is (cell == "e_plus")


@pytest.mark.parametrize("cell", ["pi", "e_plus"])
def test_model_card_names_the_classes_of_another_class_set(cell):
    assert "per Kvasir-Capsule class" in model_card(cell=cell, backbone="efficientnet_b0")
    card = model_card(cell=cell, backbone="efficientnet_b0",
                      class_names=("Bleeding", "Normal", "Worms"))
    assert "Kvasir" not in card
    assert "a probability per class of the data it was trained on (3: Bleeding, Normal, " \
           "Worms)" in card


def test_promote_keeps_the_training_evidence_of_a_version():
    text = version_description(run_id="r1", test_macro_auc=0.8, test_classes=[0, 1],
                               data_digest="d" * 64, recipe="mlflow run . -e train", seed=3)
    assert text.startswith(EVIDENCE_HEADING)
    assert "test macro-AUC 0.8000" in text and "d" * 64 in text
    promoted = "pipi promote 2026: PROMOTED\n\n| criterion |\n\n" + text
    assert training_evidence(promoted) == text
    assert training_evidence("written by hand") == ""
    gated = version_description(run_id="r1", test_macro_auc=0.8, test_classes=[0], data_digest="d",
                                recipe="r", seed=3, gate={"delta": "+0.0123"})
    assert "## Promotion gate" in gated and "- delta: +0.0123" in gated


def test_system_metrics_switch_and_its_environment_default(monkeypatch):
    monkeypatch.delenv("PIPI_SYSTEM_METRICS", raising=False)
    assert system_metrics_enabled("auto") is False
    assert system_metrics_enabled("true") is True
    monkeypatch.setenv("PIPI_SYSTEM_METRICS", "1")
    assert system_metrics_enabled("auto") is True
    assert system_metrics_enabled("false") is False
    with pytest.raises(ConfigError, match="system_metrics='maybe'"):
        system_metrics_enabled("maybe")
    monkeypatch.setenv("PIPI_SYSTEM_METRICS", "sometimes")
    with pytest.raises(ConfigError, match="PIPI_SYSTEM_METRICS='sometimes'"):
        system_metrics_enabled("auto")


# --------------------------------------------------------------------------- tracking.ui
def test_aggregate_description_links_the_dashboard_and_lists_the_tables():
    from types import SimpleNamespace

    from pipi.report.descriptions import aggregate_description

    report = SimpleNamespace(tables=[SimpleNamespace(key="headline"),
                                     SimpleNamespace(key="per_class")],
                             summary="headline: e_plus vs b +0.0123")
    text = aggregate_description(report, n_runs=6, dashboard_url="http://h/#/x/artifacts/d.html")
    assert "of 6 runs: [open the dashboard](http://h/#/x/artifacts/d.html)" in text
    assert "`headline`, `per_class`" in text and "e_plus vs b +0.0123" in text


def test_first_per_class_is_the_first_row_of_each_class():
    from pipi.report.run_figures import first_per_class

    frames = pd.DataFrame({"class_index": [5, 2, 5, 2, 7, 2], "split": list("tvttvt")})
    rows = np.flatnonzero(frames["split"] == "t")
    ref = frames.iloc[rows].reset_index().groupby("class_index")["index"].first()
    np.testing.assert_array_equal(first_per_class(frames, rows), ref.to_numpy())


@pytest.mark.parametrize("cell,zeroed,given", [
    ("pi", None, {"P_blood": "input channel", "Phi": "input channel"}),
    ("phi_only", 0, {"P_blood": "zeroed", "Phi": "input channel"}),
    ("pblood_only", 1, {"P_blood": "input channel", "Phi": "zeroed"}),
    ("distill", None, {"P_blood": "auxiliary target", "Phi": "not used"}),
])
def test_the_prior_figure_shows_what_the_cell_gives_its_model(cell, zeroed, given, monkeypatch):
    from pipi.config import make_config
    from pipi.report import run_figures

    seen = {}
    monkeypatch.setattr(run_figures, "prior_examples",
                        lambda rgb, prior, names, **kw: seen.update(rgb=rgb, prior=prior, **kw))
    cfg = make_config(cell=cell, profile="smoke", image_size=64)
    imgs = np.random.default_rng(0).integers(0, 256, (3, 3, 64, 64), dtype=np.uint8)
    run_figures.cell_prior_figure(cfg, imgs, ["a", "b", "c"], label="x", side=32)
    assert seen["given"] == given
    assert seen["rgb"].shape == (3, 3, 32, 32) and seen["prior"].shape == (3, 2, 32, 32)
    full = prior_channels(torch.from_numpy(imgs).float() / 255).numpy()
    # area shrink by 2: each thumbnail pixel is the mean of a 2 x 2 block of the full prior
    blocks = full.reshape(3, 2, 32, 2, 32, 2).mean(axis=(3, 5))
    for ch in (0, 1):
        if ch == zeroed:
            assert not seen["prior"][:, ch].any()
        else:
            np.testing.assert_allclose(seen["prior"][:, ch], blocks[:, ch], atol=1e-5)
