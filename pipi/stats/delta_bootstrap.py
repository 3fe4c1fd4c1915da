"""The bootstrap of many paired AUC deltas at once (``aggregate``'s intervals).

Every (model, class) AUC column is bootstrapped under one shared sequence of resamples, so
deltas stay paired and seeds evaluated on the same frames are not treated as independent.
Three resampling schemes:

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
the class-stratified frame bootstrap otherwise; ``unit`` of the result says which.

:func:`macro_auc_delta_bootstrap` is a view over the same engine: the cross-seed mean
macro-AUC delta of two (S, N, C) score arrays, with the scheme chosen by the caller
(``clusters=``, ``strata=`` or neither), as a full :class:`~pipi.stats.DeltaBootstrapResult`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from pipi.errors import ConfigError, DataError
from pipi.stats._common import as_rng, check_level, class_labels_and_probs, warn_degenerate
from pipi.stats._results import NAN_CI, ConfidenceInterval, DeltaBootstrapResult
from pipi.stats.bootstrap import METHODS, bootstrap_intervals, resample_plan
from pipi.stats.weighted_auc import WeightedAUC, loo_auc, pair_counts, video_auc

__all__ = ["MAX_DRAWS_FACTOR", "MIN_VIDEOS_CLASS", "MIN_VIDEOS_MACRO", "RESAMPLE",
           "PairedAUCBootstrap", "macro_auc_delta_bootstrap", "pair_counts"]

log = logging.getLogger(__name__)

#: ``resample`` options: test videos (clustered, the paper) or frames (the published code).
RESAMPLE = ("video", "frame")
#: Test videos with positives a class needs for a video-level interval of its own AUC delta.
MIN_VIDEOS_CLASS = 3
#: ... and for a mean over several classes (the jackknife must keep every class).
MIN_VIDEOS_MACRO = 2
#: A delta bootstrap draws at most this many times ``n_resamples`` resamples (redraws included).
MAX_DRAWS_FACTOR = 20

VIDEOS, FRAMES, STRATA = "videos", "frames", "frames (stratified by class)"


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
                                      strata=o.strata if unit == STRATA else None)
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
            new = video_auc(np.stack(w), kmat, pmat, qmat)
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
                self.auc_hat[k] = video_auc(np.ones((1, v)), kmat, pmat, qmat)[0]
                self.jack[k] = video_auc(1.0 - np.eye(v), kmat, pmat, qmat)
            else:
                pos = o.labels == k
                self.auc_hat[k] = o.weighted_auc(k)(np.ones(o.labels.size))
                self.jack[k] = np.stack([loo_auc(o.probs(key)[:, k], pos)
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
            # exactly the missing count: a caller's generator ends where drawing one resample
            # at a time until the n-th that keeps every class would leave it
            self._draw(min(n - ok.size, limit - len(self.weights)))
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
        ``rng``, so results do not depend on which deltas were computed before (a Generator
        is shared, and advanced by exactly the draws used).
    strata : ndarray, shape (N,), optional
        Labels of the stratified frame scheme (default ``labels``).

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 14.
    .. [2] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their Application", 1997,
       sec. 3.8 (clustered data).
    """

    def __init__(self, labels: np.ndarray, videos: np.ndarray,
                 columns: Mapping[Hashable, np.ndarray], classes: Sequence[int], *,
                 resample: str = "video", n_resamples: int = 1000,
                 confidence_level: float = 0.95, rng: int | np.random.Generator = 0,
                 strata: np.ndarray | None = None):
        if resample not in RESAMPLE:
            raise ConfigError(f"resample must be one of {RESAMPLE}, got {resample!r}")
        self.labels = np.asarray(labels)
        self.strata = self.labels if strata is None else np.asarray(strata)
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

    def _draws(self, cls: tuple[int, ...], unit: str | None = None):
        """(unit, scheme, kept draws, redrawn, AUC on the data, per draw, per jackknife);
        ``unit`` defaults to :meth:`unit_for`."""
        unit = unit or self.unit_for(cls)
        scheme = self._schemes.get(unit) or self._schemes.setdefault(unit, _Scheme(self, unit))
        take, redrawn = scheme.valid_draws(cls, self.n_resamples)
        cols = [scheme.columns(k) for k in cls]
        # (rows, keys, K) -> (rows, S, K) -> mean over (S, K): the layout of a mean over a
        # contiguous (S, K) array, so every mean is summed in one order (BCa counts ties)
        hat_a, star_a, jack_a = (np.stack(x, axis=-1) for x in zip(*cols, strict=True))
        return unit, scheme, take, redrawn, hat_a, star_a[take], jack_a

    def _result(self, hat: float, star: np.ndarray, jack: np.ndarray, intervals: tuple,
                pvalue: float, unit: str, scheme: _Scheme, redrawn: int, cls: tuple[int, ...],
                n_seeds: int) -> DeltaBootstrapResult:
        pct, bca, z0, a = intervals
        se = float(np.std(star, ddof=1)) if star.size > 1 and np.isfinite(star).all() \
            else float("nan")
        return DeltaBootstrapResult(
            statistic=hat, confidence_interval=bca, percentile_interval=pct, bca_interval=bca,
            bias_correction=z0, acceleration=a, standard_error=se, bootstrap_distribution=star,
            jackknife_values=jack, confidence_level=self.level, method="BCa", unit=unit,
            n_resamples=int(star.size), pvalue=pvalue, n_units=scheme.n_units,
            n_redrawn=redrawn, classes=cls, n_seeds=n_seeds)

    def ratio(self, reference: Sequence[Hashable], numerator: Sequence[Hashable],
              denominator: Sequence[Hashable], *, classes: Sequence[int] | None = None,
              denominator_reference: Sequence[Hashable] | None = None
              ) -> DeltaBootstrapResult:
        """Bootstrap of a retention: mean(AUC(numerator) - AUC(reference)) divided by
        mean(AUC(denominator) - AUC(denominator_reference)) (default: ``reference``), means
        over pairs and classes, both deltas under the same draws (e.g. strip-and-serve:
        (zero_both - a) / (pi - a); leave-one-source-out: (pi - a held out) / (pi - a
        trained on every source), scored on the same frames).

        NaN intervals when the denominator is <= 0 on the data (no lift to retain); draws
        whose denominator is <= 0 make the BCa interval NaN (percentile kept). No p-value.
        """
        cls = tuple(classes) if classes is not None else self.classes
        unit, scheme, take, redrawn, hat_a, star_a, jack_a = self._draws(cls)
        dref = reference if denominator_reference is None else denominator_reference
        ri, nu, de, dr = ([self.keys.index(key) for key in keys]
                          for keys in (reference, numerator, denominator, dref))

        def stat(a: np.ndarray, mean=np.mean) -> np.ndarray:
            num = a[:, nu] - a[:, ri]
            den = a[:, de] - a[:, dr]
            num = mean(num.reshape(num.shape[0], -1), axis=1)
            den = mean(den.reshape(den.shape[0], -1), axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

        hat = float(stat(hat_a[None])[0])
        star = stat(star_a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            jack = stat(jack_a, np.nanmean)
        nan = float("nan")
        args = (unit, scheme, redrawn, cls, len(reference))
        if take.size < self.n_resamples or not np.isfinite(hat):
            return self._result(hat, star, jack, (NAN_CI, NAN_CI, nan, nan), nan, *args)
        finite = star[np.isfinite(star)]
        alpha = (1.0 - self.level) / 2.0
        pct = (ConfidenceInterval(*map(float, np.percentile(finite, [100 * alpha,
                                                                    100 * (1 - alpha)])))
               if finite.size else NAN_CI)
        intervals = (pct, NAN_CI, nan, nan)
        if finite.size == star.size:
            _, bca, z0, a = bootstrap_intervals(hat, star, jack, self.level, warn=False)
            intervals = (pct, bca, z0, a)
        return self._result(hat, star, jack, intervals, nan, *args)

    def delta(self, reference: Sequence[Hashable], new: Sequence[Hashable], *,
              classes: Sequence[int] | None = None) -> DeltaBootstrapResult:
        """Bootstrap of the mean over pairs and classes of AUC(new[i]) - AUC(reference[i]).

        ``reference`` and ``new`` list column keys pairwise (one pair per seed); ``classes``
        defaults to the fixed class set.
        """
        cls = tuple(classes) if classes is not None else self.classes
        unit, scheme, take, redrawn, hat_a, star_a, jack_a = self._draws(cls)
        hat, star, jack = self._pair_means(reference, new, hat_a, star_a, jack_a, np.nanmean)
        nan = float("nan")
        args = (unit, scheme, redrawn, cls, len(reference))
        if take.size < self.n_resamples:  # too many draws lost a class: no interval
            return self._result(hat, star, jack, (NAN_CI, NAN_CI, nan, nan), nan, *args)
        intervals = bootstrap_intervals(hat, star, jack, self.level, warn=False)
        return self._result(hat, star, jack, intervals, _bootstrap_p(star), *args)

    def _pair_means(self, reference, new, hat_a, star_a, jack_a, jack_mean):
        """The mean delta over pairs and classes on the data, per draw and per jackknife."""
        ri = [self.keys.index(key) for key in reference]
        ni = [self.keys.index(key) for key in new]

        def stat(a: np.ndarray, mean=np.mean) -> np.ndarray:
            d = a[:, ni] - a[:, ri]
            return mean(d.reshape(d.shape[0], -1), axis=1)

        with warnings.catch_warnings():
            # leaving out the only positive frame of a class: that class drops out of that
            # jackknife value (nanmean)
            warnings.simplefilter("ignore", RuntimeWarning)
            jack = stat(jack_a, jack_mean)
        return float(stat(hat_a[None])[0]), stat(star_a), jack


def _bootstrap_p(star: np.ndarray) -> float:
    """Two-sided percentile-bootstrap p-value of delta = 0."""
    below, above = int((star <= 0).sum()) + 1, int((star >= 0).sum()) + 1
    return min(1.0, 2.0 * min(below, above) / (star.size + 1))


# --------------------------------------------------------------------------- the macro view
def _stack_seeds(p, name: str) -> np.ndarray:
    """(S, N, C) float array from (N, C) or (S, N, C)."""
    a = np.asarray(p, dtype=float)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise DataError(
            f"{name} must be (frames, classes) or (seeds, frames, classes), got {a.shape}"
        )
    if not np.isfinite(a).all():
        raise DataError(f"{name} contains NaN or inf")
    return a


def _macro_iv(y_labels, probs_ref, probs_new, classes, clusters, strata, n_resamples,
              confidence_level, method):
    """Validate macro_auc_delta_bootstrap's input."""
    ref = _stack_seeds(probs_ref, "probs_ref")
    new = _stack_seeds(probs_new, "probs_new")
    if ref.shape != new.shape:
        raise DataError(f"probs_ref {ref.shape} and probs_new {new.shape} must have the same shape")
    y, _, cls = class_labels_and_probs(y_labels, ref[0], classes, name="probs_ref")
    if int(n_resamples) != n_resamples or n_resamples < 2:
        raise ConfigError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    if clusters is not None and strata is not None:
        raise ConfigError("give clusters= (video bootstrap) or strata= (frame bootstrap), not both")
    unit = "videos" if clusters is not None else "frames"
    resample_plan(y.shape[0], unit, strata, clusters)  # refuses bad clusters / strata
    return y, ref, new, cls, unit, check_level(confidence_level)


def macro_auc_delta_bootstrap(
    y_labels,
    probs_ref,
    probs_new,
    *,
    classes=None,
    clusters=None,
    strata=None,
    n_resamples: int = 1000,
    confidence_level: float = 0.95,
    method: str = "BCa",
    rng: np.random.Generator | int | None = None,
) -> DeltaBootstrapResult:
    """Bootstrap of the cross-seed mean macro-AUC delta, resampling videos or frames.

    A view over :class:`PairedAUCBootstrap` (seed s of ``probs_ref`` paired with seed s of
    ``probs_new``) with the scheme named by the caller. Every resample of the test frames is
    applied to all seeds at once, so the result accounts for test-set sampling without
    assuming that seeds evaluated on the same frames are independent (unlike Stouffer's
    combination of per-seed DeLong z-scores).

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot (N, C)
        True class of every test frame (shared by all seeds).
    probs_ref, probs_new : array_like, shape (N, C) or (S, N, C)
        Class scores of each seed; the statistic is
        mean_s [macro_auc(probs_new[s]) - macro_auc(probs_ref[s])].
    classes : sequence of int, optional
        Columns in the macro mean (default all); ``classes=[k]`` bootstraps one class.
        Classes with no positive or no negative frame in the data are dropped. The class
        set is fixed: a resample that loses every positive (or negative) of a class is
        drawn again (at most ``MAX_DRAWS_FACTOR * n_resamples`` draws in all; beyond that
        the intervals are NaN with a ``DegenerateDataWarning``).
    clusters : array_like, shape (N,), optional
        Video id of every frame: resample whole videos (unit "videos"); without it frames
        are resampled (unit "frames").
    strata : array_like, shape (N,), optional
        Frame bootstrap stratified by these labels (e.g. ``y_labels``).
    n_resamples, confidence_level, method, rng
        As in :func:`pipi.stats.bootstrap_ci`; a Generator is advanced by exactly the draws
        used (one per resample, redraws included).

    Returns
    -------
    DeltaBootstrapResult
        ``statistic`` (the mean delta), ``pvalue`` (two-sided percentile-bootstrap p of
        delta = 0), ``confidence_interval`` (of `method`), the percentile and BCa intervals,
        z0, a and the bootstrap and jackknife values. Identical, resample by resample, to
        ``bootstrap_ci`` with the same `rng` and unit where no resample loses a class.

    Notes
    -----
    The jackknife leaves out one video (a class that video alone holds makes it NaN, and
    with it BCa) or one frame (analytic: leaving out positive i gives
    (m AUC - V10_i) / (m - 1); a class it empties drops out of that value).

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 14, 16.
    .. [2] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their Application", 1997,
       sec. 3.8.

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import macro_auc_delta_bootstrap
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 240)
    >>> video = np.repeat(np.arange(12), 20)
    >>> ref = rng.normal(size=(2, 240, 3)) + np.eye(3)[y]
    >>> new = ref + 0.8 * np.eye(3)[y]
    >>> res = macro_auc_delta_bootstrap(y, ref, new, clusters=video, n_resamples=200, rng=0)
    >>> res.unit, bool(res.confidence_interval.low > 0)
    ('videos', True)
    """
    y, ref, new, cls, unit, level = _macro_iv(y_labels, probs_ref, probs_new, classes,
                                              clusters, strata, n_resamples,
                                              confidence_level, method)
    n, s = y.shape[0], ref.shape[0]
    present = tuple(c for c in cls if 0 < int((y == c).sum()) < n)
    if len(present) < len(cls):
        warn_degenerate(
            f"classes {sorted(set(cls) - set(present))} have no positive or no "
            "negative frame; left out"
        )
    if not present:
        raise DataError("no class has both positive and negative frames")
    reference, method_keys = [("ref", i) for i in range(s)], [("new", i) for i in range(s)]
    engine = PairedAUCBootstrap(
        y, np.zeros(n, int) if clusters is None else clusters,
        dict(zip(reference, ref, strict=True)) | dict(zip(method_keys, new, strict=True)),
        present, n_resamples=n_resamples, confidence_level=level, rng=as_rng(rng),
        strata=strata)
    scheme_unit = VIDEOS if clusters is not None else FRAMES if strata is None else STRATA
    _, scheme, take, redrawn, hat_a, star_a, jack_a = engine._draws(present, scheme_unit)
    # a video left out that holds a class's only positives makes its value NaN (np.mean); a
    # frame left out drops its class from that value (np.nanmean over seeds and classes)
    hat, star, jack = engine._pair_means(reference, method_keys, hat_a, star_a, jack_a,
                                         np.mean)
    if clusters is None:
        d = jack_a[:, s:] - jack_a[:, :s]                                  # (N, S, K)
        jack = np.nanmean(np.ascontiguousarray(d.transpose(1, 2, 0)), axis=(0, 1))
    theta_star = np.full(int(n_resamples), np.nan)
    theta_star[:take.size] = star
    if redrawn:
        log.info("%d of %d resamples lost every positive (or negative) of some class and were "
                 "drawn again", redrawn, take.size + redrawn)
    if take.size < theta_star.size:
        warn_degenerate(f"only {take.size} of {theta_star.size} resamples keep every class "
                        f"after {take.size + redrawn} draws; intervals are NaN")
    pct, bca, z0, a = bootstrap_intervals(hat, theta_star, jack, level)
    se = float(np.std(theta_star, ddof=1)) if np.isfinite(theta_star).all() else float("nan")
    return DeltaBootstrapResult(
        statistic=hat, confidence_interval=bca if method == "BCa" else pct,
        percentile_interval=pct, bca_interval=bca, bias_correction=z0, acceleration=a,
        standard_error=se, bootstrap_distribution=theta_star, jackknife_values=jack,
        confidence_level=level, method=method, unit=unit, n_resamples=theta_star.size,
        pvalue=_bootstrap_p(theta_star), n_units=scheme.n_units, n_redrawn=redrawn,
        classes=present, n_seeds=s)
