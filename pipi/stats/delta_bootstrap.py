"""The bootstrap of many paired AUC deltas at once (``aggregate``'s intervals).

Every (model, class) AUC column is bootstrapped under one shared sequence of resamples, so
deltas stay paired and seeds evaluated on the same frames are not treated as independent.
Three resampling schemes, each drawn exactly as :func:`pipi.stats.macro_auc_delta_bootstrap`
draws it with the same ``rng`` (so both agree resample by resample):

* ``videos``: as many test videos as there are, with replacement (clustered); AUCs under video
  weights come from per-video Mann-Whitney pair counts (:func:`pair_counts`), O(V^2) per column
  and resample; the BCa jackknife leaves out one video;
* ``frames``: frames with replacement (the published code's frame-level resampling);
* ``frames (stratified by class)``: each class's frames resampled to their own count, so no
  class is ever lost; used where the videos cannot carry an interval (see below).

The class set of a statistic is fixed: a resample that loses every positive (or negative)
frame of one of its classes is drawn again, and the redraws are counted (``n_redrawn``).
With ``resample="video"``, a statistic gets the video bootstrap only when each of its classes
has positives in enough test videos (:data:`MIN_VIDEOS_MACRO` for a mean over classes, so
that leaving any video out keeps every class; :data:`MIN_VIDEOS_CLASS` for one class), and
the class-stratified frame bootstrap otherwise; :attr:`DeltaCI.unit` says which.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipi.errors import ConfigError
from pipi.stats._results import NAN_CI, ConfidenceInterval
from pipi.stats.bootstrap import (
    MAX_DRAWS_FACTOR,
    WeightedAUC,
    bootstrap_intervals,
    resample_plan,
)
from pipi.stats.delong import placements

__all__ = ["MIN_VIDEOS_CLASS", "MIN_VIDEOS_MACRO", "RESAMPLE", "DeltaCI", "PairedAUCBootstrap",
           "pair_counts"]

#: ``resample`` options: test videos (clustered, the paper) or frames (the published code).
RESAMPLE = ("video", "frame")
#: Test videos with positives a class needs for a video-level interval of its own AUC delta.
MIN_VIDEOS_CLASS = 3
#: ... and for a mean over several classes (the jackknife must keep every class).
MIN_VIDEOS_MACRO = 2

VIDEOS, FRAMES, STRATA = "videos", "frames", "frames (stratified by class)"


@dataclass(frozen=True)
class DeltaCI:
    """Bootstrap of a cross-seed mean AUC delta: percentile and BCa intervals, z0 and a.

    ``unit`` is the resampling scheme (``videos``, ``frames`` or ``frames (stratified by
    class)``); ``n_redrawn`` counts resamples drawn again because they lost a class.
    """

    statistic: float
    pvalue: float                      # two-sided percentile-bootstrap p of delta = 0
    percentile: ConfidenceInterval
    bca: ConfidenceInterval
    z0: float
    acceleration: float
    unit: str
    n_units: int
    n_resamples: int
    n_redrawn: int = 0


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


def _video_auc(c: np.ndarray, kmat, pmat, qmat, chunk: int = 256) -> np.ndarray:
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


def _loo_auc(scores: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """(N,) AUC of one column without each frame, from DeLong placements (analytic)."""
    auc, v10, v01 = placements(positive, scores[None])
    m, nn = v10.shape[1], v01.shape[1]
    out = np.empty(scores.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[positive] = (m * auc[0] - v10[0]) / (m - 1) if m > 1 else np.nan
        out[~positive] = (nn * auc[0] - v01[0]) / (nn - 1) if nn > 1 else np.nan
    return out


class _Scheme:
    """One resampling scheme: its draws (extended on demand) and the AUCs of every column
    under them, per class, computed when a class is first needed."""

    def __init__(self, owner: PairedAUCBootstrap, unit: str):
        self.o, self.unit = owner, unit
        o = owner
        if unit == VIDEOS:
            self.plan, self.n_units = None, o.n_videos
        else:
            self.plan = resample_plan(o.labels.size, "frames",
                                      strata=o.labels if unit == STRATA else None)
            self.n_units = o.labels.size
        self.gen = np.random.default_rng(o.rng)
        self.weights: list[np.ndarray] = []       # per draw: video (V,) or frame (N,) counts
        self.present: list[np.ndarray] = []       # per draw: (C,) class keeps pos and neg
        self.auc: dict[int, np.ndarray] = {}      # class -> (draws, keys)
        self.auc_hat: dict[int, np.ndarray] = {}  # class -> (keys,)
        self.jack: dict[int, np.ndarray] = {}     # class -> (units, keys)

    def _draw(self, count: int) -> None:
        o = self.o
        for _ in range(count):
            if self.unit == VIDEOS:
                w = np.bincount(self.gen.integers(0, o.n_videos, o.n_videos),
                                minlength=o.n_videos).astype(float)
                pos = w @ o.video_pos
                neg = w @ o.video_neg
            else:
                w = np.bincount(self.plan.draw(self.gen), minlength=o.labels.size)
                w = w.astype(np.float32)
                pos = w @ o.onehot
                neg = w.sum() - pos
            self.weights.append(w)
            self.present.append((pos > 0) & (neg > 0))
        for k in list(self.auc):
            self.auc[k] = self._auc(k, self.auc[k].shape[0])

    def _auc(self, k: int, start: int = 0) -> np.ndarray:
        """AUC of every key for class k under draws [start:], appended to what exists."""
        o, done = self.o, self.auc.get(k)
        w = self.weights[start:]
        if not w:
            return done
        if self.unit == VIDEOS:
            kmat, pmat, qmat = o.video_counts(k)
            new = _video_auc(np.stack(w), kmat, pmat, qmat)
        else:
            wauc = o.weighted_auc(k)
            new = np.stack([wauc(x.astype(float)) for x in w])
        return new if done is None else np.concatenate([done, new])

    def columns(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(AUC on the data (keys,), under every draw (draws, keys), jackknife (units, keys))."""
        if k not in self.auc:
            o = self.o
            self.auc[k] = self._auc(k)
            if self.unit == VIDEOS:
                kmat, pmat, qmat = o.video_counts(k)
                v = o.n_videos
                self.auc_hat[k] = _video_auc(np.ones((1, v)), kmat, pmat, qmat)[0]
                self.jack[k] = _video_auc(1.0 - np.eye(v), kmat, pmat, qmat)
            else:
                pos = o.labels == k
                self.auc_hat[k] = o.weighted_auc(k)(np.ones(o.labels.size))
                self.jack[k] = np.stack([_loo_auc(o.probs(key)[:, k], pos)
                                         for key in o.keys], axis=1)
        return self.auc_hat[k], self.auc[k], self.jack[k]

    def valid_draws(self, classes: Sequence[int], n: int) -> tuple[np.ndarray, int]:
        """Indices of the first n draws that keep every class, and how many were skipped."""
        cols = [self.o.class_index[k] for k in classes]
        limit = MAX_DRAWS_FACTOR * n
        while True:
            ok = np.flatnonzero(np.stack(self.present)[:, cols].all(axis=1)) \
                if self.present else np.zeros(0, int)
            if ok.size >= n or len(self.weights) >= limit:
                break
            self._draw(min(max(n - ok.size, n // 4, 1), limit - len(self.weights)))
        take = ok[:n]
        used = int(take[-1]) + 1 if take.size == n else len(self.weights)
        return take, used - take.size


class PairedAUCBootstrap:
    """Bootstrap of paired AUC deltas over many model columns under shared resamples.

    Parameters
    ----------
    labels : ndarray, shape (N,)
        Class index of every test frame.
    videos : ndarray, shape (N,)
        Video (patient) id of every frame.
    columns : mapping of key -> ndarray, shape (N, C)
        Class probabilities of one model on the frames (e.g. key = (backbone, cell, seed)).
    classes : sequence of int
        The fixed class set of a macro delta (the headline classes).
    resample : {"video", "frame"}
        Test videos (clustered, with the class-stratified frame fallback described in the
        module docstring) or frames (unstratified).
    n_resamples, confidence_level, rng
        As in :func:`pipi.stats.bootstrap_ci`; every scheme starts its own generator from
        ``rng``, so results do not depend on which deltas were computed before.

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 14.
    .. [2] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their Application", 1997,
       sec. 3.8 (clustered data).
    """

    def __init__(self, labels: np.ndarray, videos: np.ndarray,
                 columns: Mapping[Hashable, np.ndarray], classes: Sequence[int], *,
                 resample: str = "video", n_resamples: int = 1000,
                 confidence_level: float = 0.95, rng: int = 0):
        if resample not in RESAMPLE:
            raise ConfigError(f"resample must be one of {RESAMPLE}, got {resample!r}")
        self.labels = np.asarray(labels)
        self._columns = columns
        self.keys = list(columns)
        self.classes = tuple(int(k) for k in classes)
        self.resample = resample
        self.n_resamples = int(n_resamples)
        self.level = confidence_level
        self.rng = rng
        vids, self._video = np.unique(np.asarray(videos), return_inverse=True)
        self.n_videos = len(vids)
        all_classes = sorted(set(self.classes) | set(np.unique(self.labels).tolist()))
        self.class_index = {k: i for i, k in enumerate(all_classes)}
        self.onehot = (self.labels[:, None] == np.array(all_classes)[None, :]).astype(np.float32)
        v = max(self.n_videos, 1)
        self.video_pos = np.stack([np.bincount(self._video[self.labels == k], minlength=v)
                                   for k in all_classes], axis=1).astype(float)     # (V, C)
        self.video_neg = np.bincount(self._video, minlength=v)[:, None] - self.video_pos
        self._schemes: dict[str, _Scheme] = {}
        self._video_counts: dict[int, tuple] = {}
        self._weighted: dict[int, WeightedAUC] = {}

    # ----------------------------------------------------------------- per-class caches
    def probs(self, key: Hashable) -> np.ndarray:
        return self._columns[key]

    def video_counts(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pair counts of class k for every key: (keys, V, V), (keys, V), (keys, V)."""
        if k not in self._video_counts:
            pos = self.labels == k
            got = [pair_counts(self.probs(key)[:, k].astype(np.float64), pos, self._video,
                               self.n_videos) for key in self.keys]
            self._video_counts[k] = tuple(np.stack(x) for x in zip(*got, strict=True))
        return self._video_counts[k]

    def weighted_auc(self, k: int) -> WeightedAUC:
        """Frame-weighted AUC of class k for every key (sorted once)."""
        if k not in self._weighted:
            scores = np.stack([self.probs(key)[:, k].astype(np.float64) for key in self.keys])
            self._weighted[k] = WeightedAUC(scores, np.tile(self.labels == k, (len(self.keys), 1)))
        return self._weighted[k]

    def videos_with(self, k: int) -> int:
        """Number of test videos with a positive frame of class k."""
        return int((self.video_pos[:, self.class_index[k]] > 0).sum())

    # ----------------------------------------------------------------- the statistic
    def unit_for(self, classes: Sequence[int]) -> str:
        """The resampling scheme of a delta over ``classes`` (see the module docstring)."""
        if self.resample == "frame":
            return FRAMES
        need = MIN_VIDEOS_CLASS if len(classes) == 1 else MIN_VIDEOS_MACRO
        if self.n_videos < 2 or any(self.videos_with(k) < need for k in classes):
            return STRATA
        return VIDEOS

    def _draws(self, cls: tuple[int, ...]):
        """(unit, scheme, kept draws, redrawn, AUC on the data, per draw, per jackknife)."""
        unit = self.unit_for(cls)
        scheme = self._schemes.get(unit) or self._schemes.setdefault(unit, _Scheme(self, unit))
        take, redrawn = scheme.valid_draws(cls, self.n_resamples)
        cols = [scheme.columns(k) for k in cls]
        # (rows, keys, K) -> (rows, S, K) -> mean over (S, K), the layout of
        # macro_auc_delta_bootstrap, so that both agree to the last bit (BCa counts ties)
        hat_a, star_a, jack_a = (np.stack(x, axis=-1) for x in zip(*cols, strict=True))
        return unit, scheme, take, redrawn, hat_a, star_a[take], jack_a

    def ratio(self, reference: Sequence[Hashable], numerator: Sequence[Hashable],
              denominator: Sequence[Hashable], *, classes: Sequence[int] | None = None
              ) -> DeltaCI:
        """Bootstrap of a retention: mean(AUC(numerator) - AUC(reference)) divided by
        mean(AUC(denominator) - AUC(reference)), means over pairs and classes, both deltas
        under the same draws (e.g. strip-and-serve: (zero_both - a) / (pi - a)).

        NaN intervals when the denominator is <= 0 on the data (no lift to retain); draws
        whose denominator is <= 0 make the BCa interval NaN (percentile kept).
        """
        cls = tuple(classes) if classes is not None else self.classes
        unit, scheme, take, redrawn, hat_a, star_a, jack_a = self._draws(cls)
        ri, nu, de = ([self.keys.index(key) for key in keys]
                      for keys in (reference, numerator, denominator))

        def stat(a: np.ndarray, mean=np.mean) -> np.ndarray:
            num = a[:, nu] - a[:, ri]
            den = a[:, de] - a[:, ri]
            num = mean(num.reshape(num.shape[0], -1), axis=1)
            den = mean(den.reshape(den.shape[0], -1), axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

        hat = float(stat(hat_a[None])[0])
        star = stat(star_a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            jack = stat(jack_a, np.nanmean)
        if take.size < self.n_resamples or not np.isfinite(hat):
            return DeltaCI(hat, float("nan"), NAN_CI, NAN_CI, float("nan"), float("nan"),
                           unit, scheme.n_units, int(take.size), redrawn)
        finite = star[np.isfinite(star)]
        alpha = (1.0 - self.level) / 2.0
        pct = (ConfidenceInterval(*map(float, np.percentile(finite, [100 * alpha,
                                                                    100 * (1 - alpha)])))
               if finite.size else NAN_CI)
        bca, z0, a = NAN_CI, float("nan"), float("nan")
        if finite.size == star.size:
            _, bca, z0, a = bootstrap_intervals(hat, star, jack, self.level, warn=False)
        return DeltaCI(hat, float("nan"), pct, bca, z0, a, unit, scheme.n_units, star.size,
                       redrawn)

    def delta(self, reference: Sequence[Hashable], new: Sequence[Hashable], *,
              classes: Sequence[int] | None = None) -> DeltaCI:
        """Bootstrap of the mean over pairs and classes of AUC(new[i]) - AUC(reference[i]).

        ``reference`` and ``new`` list column keys pairwise (one pair per seed); ``classes``
        defaults to the fixed class set.
        """
        cls = tuple(classes) if classes is not None else self.classes
        unit, scheme, take, redrawn, hat_a, star_a, jack_a = self._draws(cls)
        ri = [self.keys.index(key) for key in reference]
        ni = [self.keys.index(key) for key in new]

        def stat(a: np.ndarray, mean=np.mean) -> np.ndarray:
            d = a[:, ni] - a[:, ri]
            return mean(d.reshape(d.shape[0], -1), axis=1)

        hat = float(stat(hat_a[None])[0])
        star = stat(star_a)
        with warnings.catch_warnings():
            # leaving out the only positive frame of a class: that class drops out of that
            # jackknife value (as in macro_auc_delta_bootstrap)
            warnings.simplefilter("ignore", RuntimeWarning)
            jack = stat(jack_a, np.nanmean)
        if take.size < self.n_resamples:  # too many draws lost a class: no interval
            return DeltaCI(hat, float("nan"), NAN_CI, NAN_CI, float("nan"), float("nan"),
                           unit, scheme.n_units, int(take.size), redrawn)
        pct, bca, z0, a = bootstrap_intervals(hat, star, jack, self.level, warn=False)
        below, above = int((star <= 0).sum()) + 1, int((star >= 0).sum()) + 1
        p = min(1.0, 2.0 * min(below, above) / (star.size + 1))
        return DeltaCI(hat, p, pct, bca, z0, a, unit, scheme.n_units, star.size, redrawn)
