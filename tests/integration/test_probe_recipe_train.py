"""Issue 28, trained: the foundation probes as the authors ran them, features extracted once
and cached by digest and the linear head trained on them with the published scripts' recipes
(a ViT-B forward of every staged frame and several optimizer steps: the integration tier; the
recipes' defaults are tests/unit/training/test_probe_recipe.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD
from pipi.data.staging import load_staged
from pipi.training.frames import run_frame_cell

SMOKE = {"cell": "probe", "profile": "smoke", "weights": "none", "seed": 41}


def _published(staged, paths, size: int, name: str, stats) -> torch.Tensor:
    """The scripts' preprocessing, written here from their definitions: dinov2_linear_probe.py
    ``Resize(int(S * 1.14), BILINEAR), CenterCrop(S)``; open_clip's BiomedCLIP preprocess
    ``Resize(S, BICUBIC), CenterCrop(S)``; then ToTensor and the model's normalisation, on
    the file decoded whole (torchvision's ImageFolder loader)."""
    from PIL import Image
    from torchvision import transforms as T

    first = (T.Resize(int(size * 1.14), interpolation=T.InterpolationMode.BILINEAR)
             if name == "dinov2" else T.Resize(size, interpolation=T.InterpolationMode.BICUBIC))
    tf = T.Compose([first, T.CenterCrop(size), T.ToTensor(), T.Normalize(*stats)])
    out = []
    for p in paths:
        with Image.open(staged / p) as im:
            out.append(tf(im.convert("RGB")))
    return torch.stack(out)


def test_cached_probe_features_once_and_the_model_agrees(tiny_staged, tmp_path, monkeypatch):
    torch.manual_seed(0)
    cfg = make_config(backbone="dinov2_vitb14", **SMOKE)
    res = run_frame_cell(cfg, data=tiny_staged, device="cpu", progress=False,
                         cache_dir=tmp_path)
    path = res.features
    feats = np.load(path)
    frames, _ = load_staged(tiny_staged)
    model = res.model.eval()
    # independently: the script's Resize + CenterCrop of each staged file, ImageNet
    # normalisation, the frozen backbone (weights unchanged by training), then the trained
    # plain Linear head
    # a ViT-B forward of every frame is most of this test's time on a CPU: the test frames and
    # the first train and val frames are recomputed (every row of the features is a frame's)
    split = frames["split"].to_numpy()
    test = np.flatnonzero(split == "test")
    rows = np.r_[test, np.flatnonzero(split == "train")[:6], np.flatnonzero(split == "val")[:4]]
    assert feats.shape[0] == len(frames) and len(rows) > len(test) > 0
    x = _published(tiny_staged, frames["path"].to_numpy()[rows], cfg.image_size, "dinov2",
                   (IMAGENET_MEAN, IMAGENET_STD))
    with torch.no_grad():
        emb = model.backbone(x)
        probs = torch.softmax(model.head(emb[:len(test)]), 1).numpy()
        whole = torch.softmax(model(x[:2]), 1).numpy()   # eval mode: head(embed(x))
        emb = emb.numpy()
    np.testing.assert_allclose(whole, probs[:2], atol=1e-5)
    np.testing.assert_allclose(feats[rows], emb, atol=1e-4)
    got = res.predictions["test"].filter(like="prob_").to_numpy()
    np.testing.assert_allclose(got, probs, atol=1e-5)
    # a second seed reads the cache: the backbone is never run again
    from pipi.models.heads import FrameClassifier

    def boom(self, x):
        raise AssertionError("features recomputed")

    monkeypatch.setattr(FrameClassifier, "embed", boom)
    again = run_frame_cell(make_config(backbone="dinov2_vitb14", **{**SMOKE, "seed": 42}),
                           data=tiny_staged, device="cpu", progress=False, cache_dir=tmp_path)
    assert again.features == path


def test_the_biomedclip_probe_keeps_its_rate_selects_by_macro_f1_and_sees_bicubic(
        tiny_staged, tmp_path):
    """biomedclip_linear_probe.py: a constant learning rate, the epoch of the best val
    macro-F1 over the classes present in val (the first one on ties), open_clip's bicubic
    Resize + CenterCrop and CLIP's normalisation."""
    from sklearn.metrics import f1_score

    from pipi.models.timm_backbones import CLIP_STATS

    cfg = make_config(backbone="biomedclip_vitb16", **{**SMOKE, "epochs": 4, "patience": 4})
    res = run_frame_cell(cfg, data=tiny_staged, device="cpu", progress=False,
                         cache_dir=tmp_path)
    lrs = [h["lr"] for h in res.history]
    assert len(lrs) == 4 and lrs == [cfg.lr] * 4
    f1 = [h["val_macro_f1"] for h in res.history]
    assert res.metrics["best_epoch"] == int(np.argmax(f1))
    frames, _ = load_staged(tiny_staged)
    val = res.predictions["val"]
    y = val["label"].to_numpy()
    pred = val.filter(like="prob_").to_numpy().argmax(1)
    present = sorted(set(y.tolist()))
    assert max(f1) == pytest.approx(f1_score(y, pred, labels=present, average="macro",
                                             zero_division=0), abs=1e-12)
    feats = np.load(res.features)
    rows = np.flatnonzero(frames["split"].to_numpy() == "val")[:4]
    x = _published(tiny_staged, frames["path"].to_numpy()[rows], cfg.image_size, "biomedclip",
                   CLIP_STATS)
    with torch.no_grad():
        np.testing.assert_allclose(feats[rows], res.model.eval().backbone(x).numpy(),
                                   atol=1e-4)
