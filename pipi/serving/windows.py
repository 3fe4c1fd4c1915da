"""The temporal windows and z-scoring of sequence cells, shared by training and serving.

Frame ``t``'s window holds the ``window`` frames of its video nearest to ``t`` (ties towards
the earlier frame), shifted inwards near the video's ends, padded and masked when the video is
shorter (:func:`build_windows`). Features are z-scored with the population statistics of a
reference set (:func:`zscore`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipi.config import TrainConfig
from pipi.errors import ConfigError

__all__ = ["Windows", "build_windows", "c1_form", "zscore", "zscore_stats"]


@dataclass(frozen=True)
class Windows:
    """Temporal windows, one per staged row, indexing rows of the same frame table.

    ``index`` (M, W) int64 rows of ``frames`` (-1 at padding), ``mask`` (M, W) bool (True at
    padding), ``centre`` (M,) int64 position of the row's own frame inside its window.
    """

    index: np.ndarray
    mask: np.ndarray
    centre: np.ndarray


def _nearest_block(numbers: np.ndarray, i: int, size: int) -> tuple[int, int]:
    """[lo, hi) of the ``size`` positions of sorted ``numbers`` nearest to position ``i``."""
    lo, hi = i, i + 1
    n = len(numbers)
    while hi - lo < size:
        if lo == 0:
            hi += 1
        elif hi == n:
            lo -= 1
        elif numbers[i] - numbers[lo - 1] <= numbers[hi] - numbers[i]:
            lo -= 1  # ties go to the earlier frame
        else:
            hi += 1
    return lo, hi


def build_windows(frames: pd.DataFrame, *, window: int) -> Windows:
    """The window of every row of ``frames`` (see the module docstring for the rule)."""
    if window < 1:
        raise ConfigError(f"window must be >= 1, got {window}")
    n_rows = len(frames)
    index = np.full((n_rows, window), -1, dtype=np.int64)
    centre = np.zeros(n_rows, dtype=np.int64)
    key = frames[["split", "video_id"]].astype(str).agg("\x00".join, axis=1).to_numpy()
    numbers = frames["frame_number"].to_numpy(np.int64)
    order = np.lexsort((np.arange(n_rows), numbers, key))  # by (split, video), frame, row
    groups = np.split(order, np.flatnonzero(key[order][1:] != key[order][:-1]) + 1)
    for rows in groups:
        if not len(rows):
            continue
        nums = numbers[rows]
        first = np.concatenate([[True], nums[1:] != nums[:-1]])
        uniq_rows, uniq_nums = rows[first], nums[first]        # one row per distinct frame
        pos_of = np.cumsum(first) - 1                          # row -> its frame's position
        size = min(window, len(uniq_rows))
        for r, p in zip(rows, pos_of):
            lo, hi = _nearest_block(uniq_nums, int(p), size)
            index[r, :size] = uniq_rows[lo:hi]
            centre[r] = p - lo
    return Windows(index=index, mask=index < 0, centre=centre)


def zscore_stats(ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) per column of ``ref`` (population std; a constant column -> 1)."""
    mean = ref.mean(0, dtype=np.float64)
    std = ref.std(0, dtype=np.float64)
    std[~(std > 1e-12)] = 1.0
    return mean, std


def zscore(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``(x - mean(ref)) / std(ref)`` per column (population std; a constant column -> 1)."""
    mean, std = zscore_stats(ref)
    return ((x - mean) / std).astype(np.float32)


def c1_form(cfg: TrainConfig) -> int:
    """8 or 13 C1 scalars for the cell."""
    return 13 if cfg.cell_config.c1 == "c13" else 8
