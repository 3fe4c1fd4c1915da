"""PI-TTA probes (`pipi.probes.tta`) and the `ablate` study `pi_tta`.

The batched per-image adaptation is checked against plain per-image loops (a deep copy of the
module and `torch.optim.SGD` for K steps); the study against the base run's own logged
predictions and metrics.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.prior import c1_features, prior_channels
from pipi.probes import tta
from pipi.sweeps import plan as ablate
from pipi.training.frames import FrameInputs, build_frame_model, predict_probs

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
