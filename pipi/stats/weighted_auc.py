"""AUCs of many score columns under resampling weights: the kernels of the paired bootstrap.

* :class:`WeightedAUC`: one-vs-rest AUCs under frame weights (a frame resample's counts);
* :func:`pair_counts` / :func:`video_auc`: AUCs under video weights (a video resample's
  counts) from per-video Mann-Whitney pair sums;
* :func:`loo_auc`: the AUC without each frame, from DeLong placements (the jackknife).

With integer weights every numerator and denominator is a sum of half-integers, so each AUC
is one correctly rounded division: the frame and the video kernels agree to the last bit.
"""

from __future__ import annotations

import numpy as np

from pipi.stats.delong import placements

__all__ = ["WeightedAUC", "loo_auc", "pair_counts", "video_auc"]


class WeightedAUC:
    """One-vs-rest AUCs of many score columns under frame weights (bootstrap counts).

    Sorting is done once. For a resample with per-frame counts w,
    AUC = sum_{pos i} w_i (W_neg(s < s_i) + W_neg(s == s_i) / 2) / (W_pos W_neg); the bracket
    is the mean of the cumulative weight of the column's negatives (in score order) before
    and through the end of i's tie group, so a resample costs one gather and one cumsum over
    the negatives per column. Integer weights (counts below 2^24) are summed in float32,
    exactly; other weights in float64.
    """

    def __init__(self, scores: np.ndarray, positive: np.ndarray):
        # scores (R, N) one row per column; positive (R, N) bool
        r = scores.shape[0]
        order = np.argsort(scores, axis=1, kind="stable")  # (R, N)
        s_sorted = np.take_along_axis(scores, order, axis=1)
        pos_sorted = np.take_along_axis(positive, order, axis=1)
        n_neg = (~pos_sorted).sum(axis=1)
        width = int(n_neg.max(initial=0))
        self.neg_frame = np.zeros((r, width), dtype=np.int64)  # frames of the negatives, sorted
        self.neg_mask = np.zeros((r, width), dtype=np.float32)  # 1 where a row has a negative
        lo, hi, frames, rows = [], [], [], []
        for i in range(r):
            neg = np.flatnonzero(~pos_sorted[i])
            self.neg_frame[i, :neg.size] = order[i, neg]
            self.neg_mask[i, :neg.size] = 1.0
            before = np.r_[0, np.cumsum(~pos_sorted[i])]  # negatives before each position
            p = np.flatnonzero(pos_sorted[i])
            first = np.searchsorted(s_sorted[i], s_sorted[i, p], side="left")  # tie group
            last = np.searchsorted(s_sorted[i], s_sorted[i, p], side="right")
            lo.append(i * (width + 1) + before[first])  # flat offsets into the padded cumsum
            hi.append(i * (width + 1) + before[last])
            frames.append(order[i, p])
            rows.append(np.full(p.size, i))
        self.lo, self.hi = np.concatenate(lo), np.concatenate(hi)
        self.pos_frame, self.pos_row = np.concatenate(frames), np.concatenate(rows)
        self.shape = (r, width)

    def __call__(self, w: np.ndarray) -> np.ndarray:
        """AUC of every column under frame weights w (N,); NaN where a side has no weight."""
        r, width = self.shape
        exact32 = bool(np.all(w == np.round(w))) and float(np.abs(w).sum()) < 2**24
        dtype = np.float32 if exact32 else np.float64
        cum = np.zeros((r, width + 1), dtype=dtype)
        np.cumsum(w.astype(dtype)[self.neg_frame] * self.neg_mask, axis=1, out=cum[:, 1:])
        flat = cum.ravel()
        wp = w[self.pos_frame]
        num = np.bincount(self.pos_row, wp * 0.5 * (flat[self.lo].astype(np.float64)
                                                    + flat[self.hi]), minlength=r)
        tot_p = np.bincount(self.pos_row, wp, minlength=r)
        tot_n = cum[:, -1].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((tot_p > 0) & (tot_n > 0), num / (tot_p * tot_n), np.nan)


def pair_counts(scores: np.ndarray, positive: np.ndarray, video: np.ndarray,
                n_videos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-video Mann-Whitney pair sums of one score column.

    Returns ``K`` (V, V) with K[u, v] = sum over positives i of video u and negatives j of
    video v of psi(s_i, s_j) (1 if s_i > s_j, 1/2 if equal), and the per-video positive and
    negative counts ``P`` (V,), ``Q`` (V,). Under video weights c (how often each video is
    drawn) the AUC is ``c K c / ((c P) (c Q))``. One sort, O(N V).
    """
    n = scores.size
    order = np.argsort(scores, kind="stable")
    s, pos, g = scores[order], positive[order], video[order]
    neg = np.zeros((n + 1, n_videos))
    neg[1:][~pos, g[~pos]] = 1.0
    cum = np.cumsum(neg, axis=0)             # (N + 1, V): negatives per video before position
    starts = np.r_[True, s[1:] != s[:-1]]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)           # first position of each tie group
    last = np.r_[first[1:], n] - 1           # last position of each tie group
    pi = np.flatnonzero(pos)
    contrib = 0.5 * (cum[first[group[pi]]] + cum[last[group[pi]] + 1])  # (m, V)
    onehot = np.zeros((n_videos, pi.size))
    onehot[g[pi], np.arange(pi.size)] = 1.0
    k = onehot @ contrib
    p = np.bincount(video[positive], minlength=n_videos).astype(float)
    q = np.bincount(video[~positive], minlength=n_videos).astype(float)
    return k, p, q


def video_auc(c: np.ndarray, kmat, pmat, qmat, chunk: int = 256) -> np.ndarray:
    """AUC of every column under each row of video weights c (B, V) -> (B, R)."""
    out = np.empty((c.shape[0], kmat.shape[0]))
    for lo in range(0, kmat.shape[0], chunk):
        k = kmat[lo:lo + chunk]
        kc = np.tensordot(c, k, axes=([1], [2]))            # (B, r, V): sum_v c_v K[u, v]
        num = np.einsum("bru,bu->br", kc, c)
        den = (c @ pmat[lo:lo + chunk].T) * (c @ qmat[lo:lo + chunk].T)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, lo:lo + chunk] = np.where(den > 0, num / den, np.nan)
    return out


def loo_auc(scores: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """(N,) AUC of one column without each frame, from DeLong placements (analytic)."""
    auc, v10, v01 = placements(positive, scores[None])
    m, nn = v10.shape[1], v01.shape[1]
    out = np.empty(scores.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[positive] = (m * auc[0] - v10[0]) / (m - 1) if m > 1 else np.nan
        out[~positive] = (nn * auc[0] - v01[0]) / (nn - 1) if nn > 1 else np.nan
    return out
