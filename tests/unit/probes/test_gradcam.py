"""Tests of pipi.probes.gradcam: Grad-CAM through Captum, top-quintile masks, Dice, figures."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from pipi.errors import ConfigError
from pipi.models import ARCHS, DistillClassifier, FrameClassifier, build_backbone
from pipi.prior import prior_channels
from pipi.probes.gradcam import (
    CAM_LAYERS,
    dice,
    gradcam_layer,
    gradcam_maps,
    gradcam_prior_dice,
    image_grid,
    overlay_figure,
    top_quantile_mask,
)

NUM_CLASSES = 14


def _model(arch, in_channels=3, seed=0):
    torch.manual_seed(seed)
    return FrameClassifier(build_backbone(arch, weights=None, in_channels=in_channels),
                           NUM_CLASSES).eval()


def _brute_dice(a, b):
    """Dice from its set definition: 2 |A & B| / (|A| + |B|) over pixel coordinates."""
    sa = {idx for idx in itertools.product(*map(range, a.shape)) if a[idx]}
    sb = {idx for idx in itertools.product(*map(range, b.shape)) if b[idx]}
    return 2 * len(sa & sb) / (len(sa) + len(sb))


# --------------------------------------------------------------------------- masks and Dice
def test_dice_matches_the_set_definition():
    rng = np.random.default_rng(0)
    for p in (0.05, 0.2, 0.5, 0.9):
        a, b = rng.random((12, 13)) < p, rng.random((12, 13)) < 0.3
        assert dice(a, b) == pytest.approx(_brute_dice(a, b), abs=1e-12)
    a = rng.random((9, 9)) < 0.4
    assert dice(a, a) == 1.0
    assert dice(a, ~a) == 0.0
    assert dice(a, np.zeros_like(a)) == 0.0
    assert np.isnan(dice(np.zeros((3, 3), bool), np.zeros((3, 3), bool)))
    with pytest.raises(ValueError, match="shape"):
        dice(a, a[:, :3])


def test_top_quintile_mask_holds_a_fifth_of_the_pixels():
    maps = np.random.default_rng(1).random((5, 32, 40))
    mask = top_quantile_mask(maps)  # q = 0.8
    assert mask.shape == maps.shape and mask.dtype == bool
    frac = mask.reshape(5, -1).mean(axis=1)
    np.testing.assert_allclose(frac, 0.2, atol=1.0 / (32 * 40))
    # the kept pixels are the largest ones of their own frame
    for m, x in zip(mask, maps):
        assert x[m].min() > x[~m].max()
    assert top_quantile_mask(maps[0]).shape == (32, 40)  # a single map
    assert top_quantile_mask(torch.from_numpy(maps[:, None])).shape == maps.shape  # (N, 1, H, W)
    assert top_quantile_mask(maps, q=0.5).mean() == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ConfigError, match="top quintile"):
        top_quantile_mask(maps, q=80)


def test_top_quintile_mask_with_ties():
    x = np.zeros((16, 16))
    x[:2] = np.arange(32).reshape(2, 16) + 1.0  # 12.5 % positive, the rest a zero floor
    np.testing.assert_array_equal(top_quantile_mask(x), x > 0)  # the floor is never kept
    assert not top_quantile_mask(np.ones((8, 8))).any()  # a flat map has no top quintile


def test_gradcam_prior_dice_per_frame():
    rng = np.random.default_rng(2)
    rgb = torch.from_numpy(rng.random((4, 3, 24, 24))).float()
    p_blood = prior_channels(rgb)[:, :1]  # (N, 1, H, W)
    cam = rng.random((4, 24, 24))
    d = gradcam_prior_dice(cam, p_blood)
    assert d.shape == (4,)
    ref = [_brute_dice(top_quantile_mask(c), top_quantile_mask(p[0].numpy()))
           for c, p in zip(cam, p_blood)]
    np.testing.assert_allclose(d, ref, atol=1e-12)
    np.testing.assert_allclose(gradcam_prior_dice(p_blood[:, 0], p_blood), 1.0)
    # a dead Grad-CAM map (all zero) overlaps nothing
    assert gradcam_prior_dice(np.zeros((1, 24, 24)), p_blood[:1])[0] == 0.0
    with pytest.raises(ValueError, match="input size"):
        gradcam_prior_dice(cam[:, :12], p_blood)


# --------------------------------------------------------------------------- Grad-CAM
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("in_channels", [3, 5])
def test_gradcam_runs_on_every_backbone(arch, in_channels):
    model = _model(arch, in_channels)
    x = torch.randn(3, in_channels, 64, 64)
    cams = gradcam_maps(model, x, [0, 5, 13], batch_size=2)
    assert cams.shape == (3, 64, 64) and cams.dtype == np.float32
    assert np.isfinite(cams).all() and (cams >= 0).all()
    path = "backbone.body." + CAM_LAYERS[arch]
    assert gradcam_layer(model) is dict(model.named_modules())[path]


def test_gradcam_matches_the_definition():
    """Captum's maps equal Grad-CAM computed from its definition on the same layer."""
    model = _model("resnet18")
    x = torch.randn(2, 3, 64, 64)
    targets = [3, 7]
    cams = gradcam_maps(model, x, targets)
    feats = {}
    handle = model.backbone.body.layer4.register_forward_hook(
        lambda mod, inp, out: feats.__setitem__("a", out))
    logits = model(x)
    handle.remove()
    act = feats["a"]  # (N, 512, 2, 2)
    score = logits[torch.arange(2), torch.tensor(targets)].sum()
    grads = torch.autograd.grad(score, act)[0]
    weights = grads.mean(dim=(2, 3), keepdim=True)  # (N, 512, 1, 1)
    ref = F.relu((weights * act).sum(1, keepdim=True))
    ref = F.interpolate(ref, size=(64, 64), mode="bilinear")[:, 0].detach().numpy()
    assert ref.max() > 0
    np.testing.assert_allclose(cams, ref, rtol=1e-4, atol=1e-6 * ref.max())


def test_gradcam_handles_distill_frozen_and_train_mode():
    torch.manual_seed(0)
    model = DistillClassifier(build_backbone("resnet18", weights=None), NUM_CLASSES)
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 3, 64, 64)
    cams = gradcam_maps(model, x, 1, layer="backbone.body.layer3")
    assert cams.shape == (2, 64, 64)
    assert model.training  # mode restored
    with pytest.raises(ConfigError, match="named_modules"):
        gradcam_maps(model, x, 1, layer="backbone.body.layer9")
    with pytest.raises(ValueError, match="target_classes"):
        gradcam_maps(model, x, [1, 2, 3])


# --------------------------------------------------------------------------- figures
def test_overlay_figure_is_a_png():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    maps = [rng.random((2, 32, 32)) for _ in range(3)]
    png = overlay_figure(images, *maps, row_labels=["Angiectasia", "Erosion"],
                         dice_rgb=[0.1, 0.2], dice_pi=[0.3, 0.4], dpi=50)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(png)) as img:
        assert img.width > img.height > 0  # 4 columns, 2 rows
    with pytest.raises(ValueError, match="like the images"):
        overlay_figure(images, maps[0][:, :16], maps[1], maps[2])
    grid = image_grid([[images[0], maps[0][0]]], col_titles=["image", "P_blood"], dpi=50)
    assert grid[:4] == b"\x89PNG"
