"""The video-clustered bootstrap of many paired AUC deltas at once (``aggregate``'s intervals).

Every (arm, seed, class) AUC column is bootstrapped from per-video Mann-Whitney pair counts
(:func:`pair_counts`), so one resample of the test videos costs O(V^2) per column instead of
O(N), and the same resample is applied to every arm and seed: deltas stay paired and seeds
are not treated as independent. Resample by resample it equals
:func:`pipi.stats.macro_auc_delta_bootstrap` with ``clusters`` and the same ``rng``.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipi.stats._results import ConfidenceInterval
from pipi.stats.bootstrap import bootstrap_intervals, macro_auc_delta_bootstrap

__all__ = ["DeltaCI", "VideoBootstrap", "pair_counts"]


@dataclass(frozen=True)
class DeltaCI:
    """Bootstrap of a cross-seed mean AUC delta: percentile and BCa intervals, z0 and a."""

    statistic: float
    pvalue: float                      # two-sided percentile-bootstrap p of delta = 0
    percentile: ConfidenceInterval
    bca: ConfidenceInterval
    z0: float
    acceleration: float
    unit: str                          # videos | frames
    n_units: int
    n_resamples: int


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


class VideoBootstrap:
    """Video-clustered bootstrap of every (column, class) AUC at once.

    Parameters
    ----------
    labels : ndarray, shape (N,)
        Class index of every test frame.
    videos : ndarray, shape (N,)
        Video (patient) id of every frame.
    columns : mapping of key -> ndarray, shape (N, C)
        Class probabilities of one model on the frames (e.g. key = (backbone, cell, seed)).
    classes : sequence of int
        Classes of the macro mean.
    n_resamples, confidence_level, rng
        As in :func:`pipi.stats.bootstrap_ci`.

    A resample draws as many test videos as there are, with replacement (the draws of
    :func:`pipi.stats.macro_auc_delta_bootstrap` with ``clusters``, in the same rng order).
    The BCa jackknife leaves out one video. With fewer than two test videos it falls back to
    the class-stratified frame bootstrap of :func:`macro_auc_delta_bootstrap`.
    """

    def __init__(self, labels: np.ndarray, videos: np.ndarray,
                 columns: Mapping[Hashable, np.ndarray], classes: Sequence[int], *,
                 n_resamples: int = 1000, confidence_level: float = 0.95, rng: int = 0):
        self.labels = np.asarray(labels)
        self.columns = columns
        self.classes = tuple(classes)
        self.n_resamples = int(n_resamples)
        self.level = confidence_level
        self.rng = rng
        vids, g = np.unique(np.asarray(videos), return_inverse=True)
        self.n_videos = len(vids)
        self.unit = "videos" if self.n_videos >= 2 else "frames"
        self._row: dict[tuple[Hashable, int], int] = {}
        if self.unit == "videos":
            self._build(g)

    def _build(self, g: np.ndarray) -> None:
        v = self.n_videos
        ks, ps, qs = [], [], []
        positives = {k: self.labels == k for k in self.classes}
        for key, probs in self.columns.items():
            for k in self.classes:
                self._row[(key, k)] = len(ks)
                kk, p, q = pair_counts(probs[:, k].astype(np.float64), positives[k], g, v)
                ks.append(kk)
                ps.append(p)
                qs.append(q)
        kmat, pmat, qmat = np.stack(ks), np.stack(ps), np.stack(qs)  # (R,V,V), (R,V), (R,V)
        gen = np.random.default_rng(self.rng)
        counts = np.empty((self.n_resamples, v))
        for b in range(self.n_resamples):
            counts[b] = np.bincount(gen.integers(0, v, v), minlength=v)
        self.auc_hat = self._auc(np.ones((1, v)), kmat, pmat, qmat)[0]         # (R,)
        self.auc_star = self._auc(counts, kmat, pmat, qmat)                     # (B, R)
        self.auc_jack = self._auc(1.0 - np.eye(v), kmat, pmat, qmat)            # (V, R)

    @staticmethod
    def _auc(c: np.ndarray, kmat, pmat, qmat, chunk: int = 256) -> np.ndarray:
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

    def delta(self, reference: Sequence[Hashable], new: Sequence[Hashable], *,
              classes: Sequence[int] | None = None) -> DeltaCI:
        """Bootstrap of the mean over pairs and classes of AUC(new[i]) - AUC(reference[i]).

        ``reference`` and ``new`` list column keys pairwise (one pair per seed).
        """
        cls = tuple(classes) if classes is not None else self.classes
        if self.unit == "frames":
            return self._frames_delta(reference, new, cls)
        rows_ref = np.array([[self._row[(key, k)] for k in cls] for key in reference])
        rows_new = np.array([[self._row[(key, k)] for k in cls] for key in new])

        def stat(auc: np.ndarray) -> np.ndarray:  # (B, R) -> (B,)
            d = auc[:, rows_new] - auc[:, rows_ref]  # (B, S, K)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN resample -> NaN
                return np.nanmean(d.reshape(d.shape[0], -1), axis=1)

        theta_hat = float(stat(self.auc_hat[None])[0])
        star, jack = stat(self.auc_star), stat(self.auc_jack)
        pct, bca, z0, a = bootstrap_intervals(theta_hat, star, jack, self.level, warn=False)
        below, above = int((star <= 0).sum()) + 1, int((star >= 0).sum()) + 1
        p = min(1.0, 2.0 * min(below, above) / (star.size + 1))
        return DeltaCI(theta_hat, p, pct, bca, z0, a, "videos", self.n_videos, star.size)

    def _frames_delta(self, reference, new, cls) -> DeltaCI:
        ref = np.stack([self.columns[key] for key in reference]).astype(np.float64)
        nw = np.stack([self.columns[key] for key in new]).astype(np.float64)
        r = macro_auc_delta_bootstrap(self.labels, ref, nw, classes=cls, strata=self.labels,
                                      n_resamples=self.n_resamples,
                                      confidence_level=self.level, rng=self.rng)
        b = r.bootstrap
        return DeltaCI(r.statistic, r.pvalue, b.percentile_interval, b.bca_interval,
                       b.bias_correction, b.acceleration, "frames (stratified by class)",
                       self.labels.size, b.n_resamples)
