"""PI-TTA probes (`pipi.probes.tta`) and the `ablate` study `pi_tta`.

The batched per-image adaptation is checked against plain per-image loops (a deep copy of the
module and `torch.optim.SGD` for K steps); the study against the base run's own logged
predictions and metrics.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.prior import c1_features, prior_channels
from pipi.probes import tta
from pipi.sweeps import plan as ablate
from pipi.training.frames import PROB_COLUMNS, FrameInputs, build_frame_model, predict_probs
from pipi.workflows.ablate import run_ablation

SMOKE = {"profile": "smoke", "weights": "none", "progress": False}
CPU = torch.device("cpu")
FAST = tta.TTAConfig(fit_epochs=2, fit_batch_size=8, batch_size=4)


@pytest.fixture(scope="module")
def small():
    """An untrained RGB ResNet-18 classifier (eval) and random 32 x 32 uint8 frames."""
    cfg = make_config(cell="a", backbone="resnet18", seed=3, profile="smoke", weights="none")
    torch.manual_seed(0)
    model = build_frame_model(cfg).eval()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (22, 3, 32, 32), dtype=np.uint8)
    return cfg, model, images


def _x_and_prior(images, cfg):
    x01 = torch.from_numpy(images).float() / 255
    p = prior_channels(x01, alpha=cfg.prior.alpha, hb_index=cfg.prior.hb_index)[:, :1]
    return FrameInputs(cfg)(x01, train=False)[0], p


def _reference_head(probe, variant, fmap, emb, p, *, steps, lr):
    """Per-image loop: copy the probe, K steps of torch.optim.SGD on that image alone."""
    before, after = [], []
    for i in range(len(fmap)):
        m = copy.deepcopy(probe).eval()
        for q in m.parameters():
            q.requires_grad_(True)
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        if variant == "embed_mlp":
            inp, target = emb[i:i + 1], c1_features(p[i:i + 1], form=8)
        else:
            inp, target = fmap[i:i + 1], F.adaptive_avg_pool2d(p[i:i + 1], fmap.shape[-2:])

        def loss(m=m, inp=inp, target=target):
            out = m(inp)
            if variant == "aux_sgd":
                return F.binary_cross_entropy_with_logits(out, target)
            return F.mse_loss(out, target)

        for k in range(steps):
            value = loss()
            if k == 0:
                before.append(value.item())
            opt.zero_grad()
            value.backward()
            opt.step()
        with torch.no_grad():
            after.append(loss().item())
    return np.array(before), np.array(after)


@pytest.mark.parametrize("variant", tta.PAPER_VARIANTS)
def test_paper_probe_adapts_per_image_and_leaves_predictions(small, variant):
    cfg, model, images = small
    fitted = tta.fit_probe(model, variant, images, rows=np.arange(16), cfg=cfg, tta=FAST,
                           device=CPU)
    assert len(fitted.fit_losses) == 2 and fitted.fit_frames == 16
    test_rows = np.arange(16, 22)
    out = tta.adapt_predict(model, fitted, images, rows=test_rows, cfg=cfg, tta=FAST,
                            device=CPU)
    # the classifier's output is the frozen model's: identical to plain inference
    base = predict_probs(model, images[test_rows], FrameInputs(cfg), device=CPU)
    np.testing.assert_allclose(out.probs, base, atol=1e-6)
    assert not out.on_classifier_path
    # batched per-image copies == a loop over images with its own copy and torch.optim.SGD
    x, p = _x_and_prior(images[test_rows], cfg)
    with torch.no_grad():
        fmap = model.backbone.forward_features(x)
        emb = model.backbone.pool(fmap)
    ref_before, ref_after = _reference_head(fitted.module, variant, fmap, emb, p,
                                            steps=FAST.steps, lr=FAST.lr)
    np.testing.assert_allclose(out.loss_before, ref_before, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(out.loss_after, ref_after, rtol=1e-4, atol=1e-7)
    assert out.loss_after.mean() < out.loss_before.mean()
    assert (out.param_change > 0).all()
    # the fitted module itself is untouched by test-time adaptation (a copy per image)
    again = tta.adapt_predict(model, fitted, images, rows=test_rows, cfg=cfg, tta=FAST,
                              device=CPU)
    np.testing.assert_array_equal(again.loss_before, out.loss_before)


def test_bn_tent_equals_per_image_tent_loop(small):
    cfg, model, images = small
    fitted = tta.fit_probe(model, "bn_tent", images, rows=np.arange(16), cfg=cfg, tta=FAST,
                           device=CPU)
    rows = np.arange(16, 22)
    base = predict_probs(model, images[rows], FrameInputs(cfg), device=CPU)
    # K = 0: the per-sample-affine BatchNorm reproduces eval-mode BatchNorm exactly
    zero = tta.adapt_predict(model, fitted, images, rows=rows, cfg=cfg,
                             tta=tta.TTAConfig(steps=0, batch_size=4), device=CPU)
    np.testing.assert_allclose(zero.probs, base, atol=1e-6)
    lr = 0.05   # larger than the paper's 1e-3 so the effect stands far above float noise
    conf = tta.TTAConfig(lr=lr, batch_size=4)   # batches of 4 and 2 images
    out = tta.adapt_predict(model, fitted, images, rows=rows, cfg=cfg, tta=conf, device=CPU)
    assert out.on_classifier_path
    # reference: per image, a copy of the model in eval mode, SGD on BN weight/bias only
    x, p = _x_and_prior(images[rows], cfg)
    ref, ref_after = [], []
    for i in range(len(rows)):
        m = copy.deepcopy(model).eval()
        for q in m.parameters():
            q.requires_grad_(False)
        bn = [q for mod in m.backbone.modules() if isinstance(mod, torch.nn.BatchNorm2d)
              for q in (mod.weight, mod.bias)]
        for q in bn:
            q.requires_grad_(True)
        opt = torch.optim.SGD(bn, lr=lr)

        def loss(m=m, xi=x[i:i + 1], pi=p[i:i + 1]):
            fmap = m.backbone.forward_features(xi)
            target = F.adaptive_avg_pool2d(pi, fmap.shape[-2:])
            return F.binary_cross_entropy_with_logits(fitted.module(fmap), target)

        for _ in range(conf.steps):
            opt.zero_grad()
            loss().backward()
            opt.step()
        with torch.no_grad():
            ref.append(torch.softmax(m(x[i:i + 1]), 1)[0].numpy())
            ref_after.append(loss().item())
        assert all(mod.training is False for mod in m.modules())   # statistics stayed frozen
    np.testing.assert_allclose(out.probs, np.stack(ref), atol=1e-5)
    np.testing.assert_allclose(out.loss_after, ref_after, rtol=1e-4)
    assert np.abs(out.probs - base).max() > 1e-4         # on the classifier's path
    assert out.loss_after.mean() < out.loss_before.mean()


def test_validation():
    with pytest.raises(ConfigError, match="steps"):
        tta.TTAConfig(steps=-1)
    with pytest.raises(ConfigError, match="lr"):
        tta.TTAConfig(lr=0.0)
    with pytest.raises(ConfigError, match="Unknown TTA variant"):
        tta.build_probe("tent", feature_dim=8)
    assert "bn_tent" not in tta.variants_for("convnext_tiny")
    assert tta.variants_for("resnet18") == tta.VARIANTS
    with pytest.raises(ConfigError, match="pi_tta"):
        ablate.plan(ablate.get_study("pi_tta"), seeds=(1,), backbones=("resnet18",),
                    cells=("pi",), profile="smoke", weights="none", digest="x")


# --------------------------------------------------------------------------- the study
def _test_preds(run_id: str, dst: Path) -> pd.DataFrame:
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(dst))
    return pd.read_parquet(Path(folder) / "test.parquet")


def test_pi_tta_study(tracking, tiny_staged, tmp_path):
    from sklearn.metrics import roc_auc_score

    # ResNet-18 (an untrained EfficientNet in eval mode is nearly input-independent)
    kw = {"study": "pi_tta", "seeds": "13", "backbones": "resnet18", "data": str(tiny_staged),
          "experiment": "pi-tta", **SMOKE}
    res = run_ablation(**kw)
    a = [c for c in res.children if c.cell == "a"]
    kids = {c.cell: c for c in res.children if "@" in c.cell}
    assert len(a) == 1 and set(kids) == {f"a@tta_{v}" for v in tta.VARIANTS}
    assert {c.status for c in res.children} <= {"trained", "reused"}
    base_run = mlflow.get_run(a[0].run_id)
    base = _test_preds(a[0].run_id, tmp_path / "base")
    base_probs = base[list(PROB_COLUMNS)].to_numpy()
    diffs = {}
    for variant in tta.VARIANTS:
        cell = f"a@tta_{variant}"
        run = mlflow.get_run(kids[cell].run_id)
        tags, m = run.data.tags, run.data.metrics
        assert tags["pipi.cell"] == cell and tags["pipi.variant"] == f"tta_{variant}"
        assert tags["pipi.study"] == "pi_tta" and tags["pipi.base_run_id"] == a[0].run_id
        assert tags["mlflow.parentRunId"] == res.parent_run_id
        assert tags["pipi.paper_variant"] == str(variant != "bn_tent").lower()
        assert run.data.params["pi_tta.steps"] == "5" and run.data.params["pi_tta.lr"] == "0.001"
        preds = _test_preds(run.info.run_id, tmp_path / variant)
        assert list(preds["path"]) == list(base["path"])
        probs = preds[list(PROB_COLUMNS)].to_numpy()
        diffs[variant] = np.abs(probs - base_probs).max()
        assert math.isclose(m["tta/max_abs_prob_diff"], diffs[variant], abs_tol=1e-7)
        # test macro-AUC recomputed from the logged predictions (one-vs-rest, sklearn)
        y = preds["label"].to_numpy()
        classes = [CLASSES.index(n) for n in json.loads(tags["pipi.evaluable_classes"])]
        aucs = [roc_auc_score(y == k, probs[:, k]) for k in classes if 0 < (y == k).sum() < len(y)]
        assert math.isclose(m["test/macro_auc"], np.mean(aucs), abs_tol=1e-6)
        if variant in tta.PAPER_VARIANTS:
            assert "by construction" in tags["pipi.tta_note"]
            assert diffs[variant] <= 1e-6                                 # identical predictions
            assert abs(m["tta/delta_test_macro_auc"]) < 1e-6
            assert math.isclose(m["tta/baseline_test_macro_auc"],
                                base_run.data.metrics["test/macro_auc"])
            assert m["tta/loss_after"] < m["tta/loss_before"]             # the module adapted
        else:
            assert "non-paper" in tags["pipi.tta_note"]
    assert diffs["bn_tent"] > 1e-6 and diffs["bn_tent"] > 20 * max(
        diffs[v] for v in tta.PAPER_VARIANTS)
    summary = mlflow.artifacts.load_text(f"runs:/{res.parent_run_id}/summary/summary.md")
    assert "a@tta_aux_sgd" in summary

    n_runs = len(mlflow.search_runs(experiment_names=["pi-tta"]))
    again = run_ablation(**kw)
    assert {c.status for c in again.children} == {"reused"}          # nothing re-evaluated
    assert sorted(c.run_id for c in again.children) == sorted(c.run_id for c in res.children)
    assert len(mlflow.search_runs(experiment_names=["pi-tta"])) == n_runs + 1   # the parent
