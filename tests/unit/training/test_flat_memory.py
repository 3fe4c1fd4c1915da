"""Training reads splits from the memory-mapped cache without copying them, and scores val
once per epoch (issue 31)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import pipi.training.frames as frames_mod
from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.data.cache import CacheRows, cache_path, split_rows

SIZE = 16


def _release(tmp_path, n: int, *, interleaved: bool):
    """A staged index and its decode cache (random uint8) written as the memmap build_cache
    reads; ``interleaved``: splits not in contiguous blocks (an index sorted otherwise)."""
    rng = np.random.default_rng(0)
    split = np.array(["train"] * (n // 2) + ["val"] * (n // 6) + ["test"] * (n - n // 2 - n // 6))
    if interleaved:
        split = rng.permutation(split)
    cls = np.arange(n) % 3
    frames = pd.DataFrame({"path": [f"x/{i}.jpg" for i in range(n)],
                           "filename": [f"{i}.jpg" for i in range(n)],
                           "class": [CLASSES[c] for c in cls], "class_index": cls,
                           "video_id": [f"v{i % 7}" for i in range(n)],
                           "frame_number": np.arange(n), "split": split, "multilabel": False})
    digest = f"bench{n}{int(interleaved)}" + "0" * 40
    path = cache_path(tmp_path / "cache", digest, SIZE)
    path.parent.mkdir(parents=True, exist_ok=True)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, 3, SIZE, SIZE))
    mm[:] = rng.integers(0, 256, mm.shape, dtype=np.uint8)
    mm.flush()
    return frames, {"data_digest": digest}


def _is_not_a_copy(images) -> bool:
    if isinstance(images, CacheRows):
        return isinstance(images.cache, np.memmap)
    return isinstance(images, np.memmap) or isinstance(getattr(images, "base", None), np.memmap)


def test_cache_rows_read_what_fancy_indexing_reads():
    cache = np.arange(10 * 3 * 2 * 2, dtype=np.uint8).reshape(10, 3, 2, 2)
    rows = np.array([7, 1, 4, 9])
    cr = CacheRows(cache, rows)
    assert len(cr) == 4 and cr.shape == (4, 3, 2, 2) and cr.dtype == np.uint8
    for key in (np.array([3, 0, 2]), slice(1, 3), 2):
        assert np.array_equal(cr[key], cache[rows][key])
    assert isinstance(split_rows(cache, np.arange(2, 6)), np.ndarray)
    assert np.shares_memory(split_rows(cache, np.arange(2, 6)), cache)


@pytest.mark.parametrize("interleaved", [False, True])
def test_splits_are_never_copied_and_val_is_scored_once_per_epoch(tmp_path, monkeypatch,
                                                                  interleaved):
    frames, manifest = _release(tmp_path, 96, interleaved=interleaved)
    n_val = int((frames["split"] == "val").sum())
    seen, val_calls = [], []
    real_train, real_predict = frames_mod.train_one_epoch, frames_mod.predict_probs

    def train_spy(model, images, *a, **k):
        seen.append(("train", images))
        return real_train(model, images, *a, **k)

    def predict_spy(model, images, *a, **k):
        seen.append(("predict", images))
        if len(images) == n_val:
            val_calls.append(1)
        return real_predict(model, images, *a, **k)

    monkeypatch.setattr(frames_mod, "train_one_epoch", train_spy)
    monkeypatch.setattr(frames_mod, "predict_probs", predict_spy)
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=SIZE, epochs=2, patience=5, batch_size=16, max_batches=2)
    out = frames_mod.run_frame_cell(cfg, data=tmp_path, staged=(frames, manifest),
                                    cache_dir=tmp_path / "cache", progress=False)
    assert seen and all(_is_not_a_copy(images) for _, images in seen), \
        [type(images) for _, images in seen]
    assert len(val_calls) == cfg.epochs  # no extra val pass at the end of the run
    # the reused val predictions are exactly what the returned (best) model predicts
    rows = np.flatnonzero(frames["split"].to_numpy() == "val")
    cache = np.load(cache_path(tmp_path / "cache", manifest["data_digest"], SIZE), mmap_mode="r")
    again = real_predict(out.model, cache[rows], frames_mod.FrameInputs(cfg, check=False),
                         device=torch.device("cpu"))
    got = out.predictions["val"][[f"prob_{i:02d}" for i in range(len(CLASSES))]].to_numpy()
    np.testing.assert_array_equal(got, again)
