"""Sequence-aware cells: windows, C1/C3 streams, base-run reuse and the run contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.models.sequence import SequenceModel
from pipi.training import sequence


# --------------------------------------------------------------------------- windows
def _frames(spec: dict[tuple[str, str], list[int]]) -> pd.DataFrame:
    rows = []
    for (split, video), numbers in spec.items():
        for n in numbers:
            rows.append({"split": split, "video_id": video, "frame_number": n})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)
    return df


def _reference_window(frames: pd.DataFrame, row: int, w: int) -> list[int]:
    """Brute force: frame numbers of the w nearest distinct frames, ties to the earlier."""
    r = frames.iloc[row]
    same = frames[(frames["split"] == r["split"]) & (frames["video_id"] == r["video_id"])]
    numbers = sorted(set(same["frame_number"]))
    nearest = sorted(numbers, key=lambda n: (abs(n - r["frame_number"]), n))[:w]
    return sorted(nearest)


def test_windows_match_a_brute_force_nearest_rule():
    frames = _frames({
        ("train", "v1"): list(range(100, 130)) + [200, 203, 204, 250],   # a run, then gaps
        ("train", "v2"): [5, 9],                                          # shorter than w
        ("test", "v3"): [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ("val", "v1"): [0, 1, 2],                                         # same id, other split
    })
    frames = pd.concat([frames, frames.iloc[[0, 3]]], ignore_index=True)  # multilabel rows
    w = 8
    win = sequence.build_windows(frames, window=w)
    nums = frames["frame_number"].to_numpy()
    for row in range(len(frames)):
        idx = win.index[row]
        valid = idx[~win.mask[row]]
        assert (idx[win.mask[row]] == -1).all()
        assert list(nums[valid]) == _reference_window(frames, row, w), row
        # same video and split only; the centre is the row's own frame
        assert set(frames.loc[valid, "video_id"]) == {frames.loc[row, "video_id"]}
        assert set(frames.loc[valid, "split"]) == {frames.loc[row, "split"]}
        assert nums[idx[win.centre[row]]] == nums[row]
        assert not win.mask[row, win.centre[row]]


def test_window_boundary_rule_examples():
    frames = _frames({("train", "v"): list(range(20)), ("train", "short"): [3, 7]})
    win = sequence.build_windows(frames, window=4)
    nums = frames["frame_number"].to_numpy()

    def at(video, number):
        row = int(np.flatnonzero((frames["video_id"] == video) & (nums == number))[0])
        idx = win.index[row]
        return [int(nums[i]) if i >= 0 else None for i in idx], int(win.centre[row])

    assert at("v", 10) == ([8, 9, 10, 11], 2)        # middle: w//2 before, the rest after
    assert at("v", 0) == ([0, 1, 2, 3], 0)           # start: shifted inwards
    assert at("v", 19) == ([16, 17, 18, 19], 3)      # end
    assert at("short", 7) == ([3, 7, None, None], 1)  # fewer frames than w: padded


# --------------------------------------------------------------------------- z-scores and heads
def test_zscore_train_and_per_patient():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (60, 8)).astype(np.float32)
    x[:, 5] = 1.0                                            # a constant feature
    train = np.arange(60) < 40
    z = sequence.zscore(x, x[train])
    np.testing.assert_allclose(z[train].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(np.delete(z[train].std(0), 5), 1, atol=1e-5)
    assert (z[:, 5] == 0).all()
    groups = np.repeat(["p1", "p2", "p3"], 20)
    zp = sequence.zscore_by_group(x, groups)
    for g in ("p1", "p2", "p3"):
        sel = groups == g
        ref = (x[sel] - x[sel].mean(0)) / np.where(x[sel].std(0) > 0, x[sel].std(0), 1)
        np.testing.assert_allclose(zp[sel], ref, atol=1e-5)


def test_head_width_is_the_concatenated_streams():
    # paper: C2 + C3 = 1280 + 192 for EfficientNet-B0
    m = SequenceModel(emb_dim=1280, window=16, temporal=True, c3_dim=192)
    assert m.head.in_dim == 1280 + 192
    m = SequenceModel(emb_dim=512, window=16, temporal=True, c1_dim=13)
    assert m.head.in_dim == 512 + 13
    out = m(torch.randn(3, 16, 512), torch.tensor([0, 8, 15]),
            torch.zeros(3, 16, dtype=torch.bool), c1=torch.randn(3, 13))
    assert out.shape == (3, len(CLASSES))


def test_base_config_takes_the_per_frame_recipe():
    seq = make_config(cell="e_plus", profile="smoke", seed=7, weights="none", alpha=3.0)
    base = sequence.base_config(seq)
    assert base == make_config(cell="pi", profile="smoke", seed=7, weights="none", alpha=3.0)
    demo = make_config(cell="b", profile="demo")
    assert demo.lr == 1e-4 and demo.batch_size == 64                   # temporal recipe
    assert sequence.base_config(demo).lr == 1e-3 and sequence.base_config(demo).batch_size == 32


def test_c1_streams_follow_the_cell(tiny_staged, tmp_path):
    frames, man = load_staged(tiny_staged)
    imgs = build_cache(tiny_staged, frames, size=32, digest=man["data_digest"],
                       cache_dir=tmp_path, progress=False)
    dev = torch.device("cpu")
    out = {}
    for cell in ("c", "c_prime", "c_dprime"):
        cfg = make_config(cell=cell, profile="smoke", weights="none")
        out[cell] = sequence.c1_stream(frames, imgs, cfg, cache_dir=tmp_path,
                                       digest=man["data_digest"], device=dev)
    train = frames["split"].to_numpy() == "train"
    assert out["c"].shape == (len(frames), 8) and out["c_dprime"].shape == (len(frames), 13)
    np.testing.assert_allclose(out["c"][train].mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(out["c_dprime"][:, :8], out["c"], atol=1e-5)
    for sel in frames.groupby("video_id").indices.values():
        np.testing.assert_allclose(out["c_prime"][sel].mean(0), 0, atol=1e-4)
    # independent route: the 8 scalars of the first frames from the prior of their images
    from pipi.prior import c1_features, prior_channels

    x = torch.from_numpy(np.asarray(imgs[:5])).float() / 255
    raw = c1_features(prior_channels(x)[:, 0], form=8).numpy()
    every = sequence.c1_raw(imgs, make_config(cell="c", profile="smoke"), form=8, device=dev)
    np.testing.assert_allclose(every[:5], raw, atol=1e-6)


# --------------------------------------------------------------------------- end to end


# --------------------------------------------------------------------------- Capsule Vision
def test_a_sequence_cell_logs_the_challenge_and_per_source_metrics_of_a_frame_cell(tmp_path):
    """On data staged from the Capsule Vision layout a sequence cell reports what a per-frame
    cell does (the same function makes both): ``<split>/cv2024_*`` as the challenge defines
    them, and ``<split>/source/<SRC>/*``; checked here against the challenge's definitions
    re-implemented in tests/capsule_vision.py and a per-source sklearn computation."""
    from capsule_vision import CLASSES as CV
    from capsule_vision import SOURCES, challenge_report, write_cv_staged
    from sklearn.metrics import roc_auc_score

    from pipi.classes import class_set_of

    root = write_cv_staged(tmp_path / "cv")
    frames, man = load_staged(root)
    cfg = make_config(cell="b", profile="smoke", weights="none").with_classes(class_set_of(man))
    rng = np.random.default_rng(0)
    # embeddings that carry the class, so the head learns something in two steps
    emb = (np.eye(len(CV))[frames["class_index"]] + rng.normal(0, 0.5, (len(frames), len(CV))))
    streams = sequence.Streams(embeddings=emb.astype(np.float32),
                               windows=sequence.build_windows(frames, window=cfg.window))
    out = sequence.fit_sequence(cfg, frames, streams, device=torch.device("cpu"), manifest=man)
    m = out.metrics
    for split in ("val", "test"):
        preds = out.predictions[split]
        y = preds["label"].to_numpy()
        probs = preds[[f"prob_{k:02d}" for k in range(len(CV))]].to_numpy(np.float64)
        want = challenge_report(np.eye(len(CV), dtype=int)[y], probs, CV)
        for key in ("mean_auc", "balanced_accuracy", "combined"):
            assert abs(m[f"{split}/cv2024_{key}"] - want[key]) < 1e-9, (split, key)
        for metric in ("auc", "specificity", "sensitivity", "f1", "pr_auc"):
            for c in CV:
                assert abs(m[f"{split}/cv2024/{metric}/{c}"] - want[metric][c]) < 1e-9
        src = preds["source"].to_numpy()
        for s in SOURCES:
            sel = src == s
            ks = [k for k in range(len(CV)) if 0 < (y[sel] == k).sum() < sel.sum()]
            ref = np.mean([roc_auc_score(y[sel] == k, probs[sel, k]) for k in ks])
            assert abs(m[f"{split}/source/{s}/macro_auc"] - ref) < 1e-9
            assert m[f"{split}/source/{s}/n_frames"] == sel.sum()
