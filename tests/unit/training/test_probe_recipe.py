"""Issue 28: the foundation probes as the authors ran them: features extracted once and
cached by digest, the linear head trained on them with the published scripts' recipes; the
earlier through-the-model recipe as probe_recipe=end_to_end."""

from __future__ import annotations

import numpy as np
import torch

from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD
from pipi.data.staging import load_staged
from pipi.training.frames import run_frame_cell

SMOKE = {"cell": "probe", "profile": "smoke", "weights": "none", "seed": 41}


def test_the_published_probe_recipes_are_the_default():
    """dinov2_linear_probe.py: 40 epochs, batch 512, lr 1e-3, wd 1e-4, class weights;
    biomedclip_linear_probe.py: 80 epochs, batch 256, lr 5e-4, wd 1e-3, none; both without
    augmentation, best epoch of all."""
    d = make_config(cell="probe", backbone="dinov2_vitb14")
    b = make_config(cell="probe", backbone="biomedclip_vitb16")
    assert (d.epochs, d.batch_size, d.lr, d.weight_decay, d.class_weights, d.augment,
            d.patience, d.probe_recipe) == (40, 512, 1e-3, 1e-4, True, False, 40, "cached")
    assert (b.epochs, b.batch_size, b.lr, b.weight_decay, b.class_weights, b.augment,
            b.patience) == (80, 256, 5e-4, 1e-3, False, False, 80)
    e = make_config(cell="probe", backbone="biomedclip_vitb16", probe_recipe="end_to_end")
    assert (e.epochs, e.batch_size, e.lr, e.class_weights, e.augment) == (30, 32, 1e-3, True,
                                                                          True)
    w = make_config(cell="probe", backbone="dinov2_vitb14", weight_decay=0.05,
                    class_weights=False)
    assert (w.weight_decay, w.class_weights, w.epochs) == (0.05, False, 40)
    assert make_config(cell="a").class_weights and make_config(cell="a").augment


def test_cached_probe_features_once_and_the_model_agrees(tiny_staged, tmp_path, monkeypatch):
    torch.manual_seed(0)
    cfg = make_config(backbone="dinov2_vitb14", **SMOKE)
    res = run_frame_cell(cfg, data=tiny_staged, device="cpu", progress=False,
                         cache_dir=tmp_path)
    path = res.features
    feats = np.load(path)
    frames, _ = load_staged(tiny_staged)
    model = res.model.eval()
    # independently: the staged frames at the run's size, ImageNet normalisation, the frozen
    # backbone (weights unchanged by training), then the trained head
    from pipi.data.cache import build_cache
    imgs = build_cache(tiny_staged, frames, size=cfg.image_size,
                       digest=load_staged(tiny_staged)[1]["data_digest"], cache_dir=tmp_path,
                       progress=False)
    # a ViT-B forward of every frame is most of this test's time on a CPU: the test frames and
    # the first train and val frames are recomputed (every row of the cache is a frame's)
    split = frames["split"].to_numpy()
    test = np.flatnonzero(split == "test")
    rows = np.r_[test, np.flatnonzero(split == "train")[:6], np.flatnonzero(split == "val")[:4]]
    assert feats.shape[0] == len(frames) and len(rows) > len(test) > 0
    x = torch.from_numpy(np.array(imgs)[rows]).float() / 255
    x = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(
        1, 3, 1, 1)
    with torch.no_grad():
        emb = model.backbone(x)
        # the test frames' probabilities from those embeddings through the head (the model
        # in eval mode: head(dropout(embed(x))), checked whole on two frames), not a second
        # ViT-B forward of every test frame
        probs = torch.softmax(model.head(model.dropout(emb[:len(test)])), 1).numpy()
        whole = torch.softmax(model(x[:2]), 1).numpy()
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
