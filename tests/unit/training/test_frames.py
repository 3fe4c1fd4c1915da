"""`train`: per-frame cells on three backbones, run contract, registry, failure behaviour."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from fakes import FakeTracker

from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.training.frames import (
    FrameInputs,
    TrainingDiverged,
    class_weights,
    train_one_epoch,
)


def test_class_weights_are_inverse_frequency():
    labels = np.array([0, 0, 0, 1, 9, 9])
    w = class_weights(labels).numpy()
    # w_c = N / (K * n_c) with K = 3 classes present
    np.testing.assert_allclose(w[[0, 1, 9]], [6 / (3 * 3), 6 / (3 * 1), 6 / (3 * 2)], rtol=1e-6)
    assert w[[2, 3, 13]].sum() == 0


def test_prior_channels_follow_the_cell():
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    pi, _ = FrameInputs(make_config(cell="pi", profile="smoke"))(x, train=False)
    pb, _ = FrameInputs(make_config(cell="pblood_only", profile="smoke"))(x, train=False)
    ph, _ = FrameInputs(make_config(cell="phi_only", profile="smoke"))(x, train=False)
    strip, _ = FrameInputs(make_config(cell="pi", profile="smoke"))(x, train=False, strip_prior=True)
    a, _ = FrameInputs(make_config(cell="a", profile="smoke"))(x, train=False)
    assert pi.shape[1] == 5 and a.shape[1] == 3
    assert torch.equal(pb[:, 3], pi[:, 3]) and pb[:, 4].abs().sum() == 0
    assert torch.equal(ph[:, 4], pi[:, 4]) and ph[:, 3].abs().sum() == 0
    assert strip[:, 3:].abs().sum() == 0 and torch.equal(strip[:, :3], a)
    # channel 4 is Phi = exp(-r / (0.25 * sqrt(H^2 + W^2))) (published): at 32 px the corner
    # pixel is sqrt(2) * 15.5 px from the centre, lambda_eff = 0.25 * sqrt(2) * 32
    assert abs(float(pi[0, 4, 0, 0]) - np.exp(-15.5 / 8)) < 1e-4 and pi[:, 4].max() > 0.9


def test_nan_loss_is_detected():
    from pipi.training.frames import build_frame_model

    cfg = make_config(cell="a", profile="smoke", weights="none")
    model = build_frame_model(cfg)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))  # the first conv's weights
    imgs = np.random.default_rng(0).integers(0, 255, (8, 3, 32, 32), dtype=np.uint8)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(TrainingDiverged, match="loss is nan at epoch 0, batch 0"):
        train_one_epoch(model, imgs, np.arange(8) % 3, FrameInputs(cfg), opt, None, cfg=cfg,
                        gen=torch.Generator().manual_seed(0), device=torch.device("cpu"),
                        epoch=0, progress=False)


def test_checkpoint_selection_metric():
    """paper: best validation macro-AUC; the published code: best validation macro-F1.

    Constructed so the two metrics peak at different epochs whatever torch does: the scripted
    validation predictions rank perfectly but argmax wrongly at epoch 0 (AUC 1.0, F1 0.33),
    and rank imperfectly but argmax mostly right at epoch 1 (AUC 0.75, F1 0.73).
    """
    from sklearn.metrics import f1_score, roc_auc_score

    from pipi.training.frames import fit_epochs

    val = pd.DataFrame({"path": [f"v/{i}.jpg" for i in range(4)], "video_id": ["v"] * 4,
                        "frame_number": range(4), "class_index": [0, 0, 1, 1],
                        "class": [CLASSES[0]] * 2 + [CLASSES[1]] * 2})
    scripted = []
    for p1 in ([0.1, 0.2, 0.3, 0.4], [0.45, 0.55, 0.52, 0.9]):
        probs = np.zeros((4, len(CLASSES)))
        probs[:, 1] = p1
        probs[:, 0] = 0.6 if p1[0] == 0.1 else 1 - np.array(p1)
        scripted.append(probs)
    y = val["class_index"].to_numpy()
    aucs = [np.mean([roc_auc_score(y == k, p[:, k]) for k in (0, 1)]) for p in scripted]
    f1s = [f1_score(y, p.argmax(1), labels=[0, 1], average="macro") for p in scripted]
    assert np.argmax(aucs) == 0 and np.argmax(f1s) == 1  # the construction holds
    best = {}
    for metric in ("macro_auc", "macro_f1"):
        cfg = make_config(cell="a", profile="smoke", weights="none", epochs=2, patience=5,
                          select_metric=metric)
        model, it = torch.nn.Linear(1, 1), iter(scripted)
        out = fit_epochs(model, cfg=cfg, gen=torch.Generator().manual_seed(0),
                         train_epoch=lambda epoch, opt: 0.0, predict_val=lambda: next(it),
                         val_frames=val, classes=[0, 1], tracker=FakeTracker())
        best[metric] = out["best"]["epoch"]
    assert best == {"macro_auc": 0, "macro_f1": 1}


@pytest.mark.parametrize("rotation", [0.0, 10.0])
def test_distill_target_is_the_prior_of_the_frame_not_of_the_jittered_input(rotation):
    """Issue 28: the distill cell's target is P_blood(x) of the frame itself (paper), moved with
    the input's flip/rotation but not its colour jitter; distill_target=augmented is the
    published code's prior of the augmented input. Both draw the same random numbers and feed
    the model the same input."""
    from dataclasses import asdict, replace

    from pipi.data.cache import AugmentConfig, augment
    from pipi.prior import prior_channels

    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    cfg = make_config(cell="distill", profile="smoke", hflip=1.0, rotation_deg=rotation)
    assert cfg.distill_target == "frame"
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    x_frame, target = FrameInputs(cfg)(x, train=True, gen=g1)
    aug_cfg = replace(cfg, distill_target="augmented")
    x_aug, target_aug = FrameInputs(aug_cfg)(x, train=True, gen=g2)
    assert torch.equal(x_frame, x_aug) and torch.equal(g1.get_state(), g2.get_state())
    if rotation == 0.0:   # the frame's own prior, mirrored like the input (Phi is radial)
        want = prior_channels(x, **asdict(cfg.prior))[:, :1].flip(-1)
    else:                 # the same flip/rotation of the frame, without colour jitter
        geo = augment(x, AugmentConfig(1.0, rotation, 0.0, 0.0, 0.0),
                      torch.Generator().manual_seed(7))
        want = prior_channels(geo, **asdict(cfg.prior))[:, :1]
    torch.testing.assert_close(target, want, atol=1e-5, rtol=0)
    jittered = augment(x, AugmentConfig(1.0, rotation, *cfg.jitter),
                       torch.Generator().manual_seed(7))
    torch.testing.assert_close(target_aug, prior_channels(jittered, **asdict(cfg.prior))[:, :1],
                               atol=1e-5, rtol=0)
    assert (target - target_aug).abs().max() > 1e-3   # colour jitter moves the prior


def test_distill_target_is_validated():
    from pipi.errors import ConfigError

    with pytest.raises(ConfigError, match="distill_target='jitter'"):
        make_config(cell="distill", distill_target="jitter")


def test_augment_false_trains_on_frames_as_evaluation_sees_them():
    """Issue 28: -P augment=false (the cached probe recipe's): a training batch is the frame
    normalised by hand, no flip, rotation or jitter, and no random number is drawn."""
    from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD

    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    cfg = make_config(cell="a", profile="smoke", augment=False, hflip=1.0)
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    got, _ = FrameInputs(cfg)(x, train=True, gen=g)
    want = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(
        IMAGENET_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert torch.equal(g.get_state(), state)
    aug, _ = FrameInputs(make_config(cell="a", profile="smoke", hflip=1.0))(
        x, train=True, gen=torch.Generator().manual_seed(5))
    assert (aug - want).abs().max() > 1e-2
