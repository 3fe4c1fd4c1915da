"""Bootstrap confidence intervals (percentile and BCa) over seeds, frames or videos.

``scipy.stats.bootstrap`` is not wrapped here because it can neither stratify (keep the
per-class frame counts) nor resample clusters (whole videos), and it does not expose the
BCa constants z0 and a that the paper reports. The BCa formulas are those of Efron &
Tibshirani (1993), ch. 14, with the tie-aware z0 and linear-interpolation percentiles that
scipy uses, so that both agree on unclustered data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from pipi.errors import ConfigError, DataError
from pipi.stats._common import as_rng, check_level, class_labels_and_probs, warn_degenerate
from pipi.stats._results import (
    NAN_CI,
    BootstrapResult,
    ConfidenceInterval,
    DeltaBootstrapResult,
)
from pipi.stats.delong import placements

__all__ = ["MAX_DRAWS_FACTOR", "METHODS", "UNITS", "ResamplePlan", "WeightedAUC",
           "bca_constants", "bootstrap_ci", "bootstrap_intervals", "macro_auc_delta_bootstrap",
           "resample_plan"]

log = logging.getLogger(__name__)

#: What one bootstrap draw resamples (with replacement).
UNITS = ("seeds", "frames", "videos")
#: Which interval ``confidence_interval`` holds (both are always computed).
METHODS = ("percentile", "BCa")
#: A delta bootstrap draws at most this many times ``n_resamples`` resamples (redraws included).
MAX_DRAWS_FACTOR = 20


@dataclass(frozen=True)
class ResamplePlan:
    """How to draw one resample: n rows, optional strata or clusters (as index groups)."""

    n: int
    groups: tuple[np.ndarray, ...] | None  # strata members or cluster members
    clustered: bool

    @property
    def n_units(self) -> int:
        return len(self.groups) if self.clustered else self.n

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """Row indices of one resample."""
        if self.groups is None:
            return rng.integers(0, self.n, self.n)
        if self.clustered:  # whole clusters, as many as there are
            pick = rng.integers(0, len(self.groups), len(self.groups))
            return np.concatenate([self.groups[g] for g in pick])
        # stratified: each stratum resampled to its own size
        return np.concatenate([g[rng.integers(0, g.size, g.size)] for g in self.groups])

    def leave_out(self, u: int) -> np.ndarray:
        """Row indices of the jackknife sample without unit u (a row or a whole cluster)."""
        if self.clustered:
            return np.concatenate([g for i, g in enumerate(self.groups) if i != u])
        return np.delete(np.arange(self.n), u)


def _groups(labels: np.ndarray) -> tuple[np.ndarray, ...]:
    """Row indices of each distinct label, in sorted label order."""
    _, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse))[:-1]
    return tuple(np.split(order, bounds))


def resample_plan(n: int, unit: str, strata=None, clusters=None) -> ResamplePlan:
    """Validate the resampling unit and its strata/clusters; return the draw plan."""
    if unit not in UNITS:
        raise ConfigError(f"unit must be one of {UNITS}, got {unit!r}")
    if strata is not None and unit != "frames":
        raise ConfigError(f"strata (class labels) apply to unit='frames' only, got unit={unit!r}")
    if unit == "videos":
        if clusters is None:
            raise ConfigError("unit='videos' needs clusters= (the video id of every frame)")
        c = np.asarray(clusters)
        if c.shape != (n,):
            raise DataError(f"clusters must have one video id per row ({n}), got {c.shape}")
        groups = _groups(c)
        if len(groups) < 2:
            raise DataError("a video bootstrap needs at least 2 distinct clusters")
        return ResamplePlan(n, groups, clustered=True)
    if clusters is not None:
        raise ConfigError(f"clusters= needs unit='videos', got unit={unit!r}")
    if strata is not None:
        s = np.asarray(strata)
        if s.shape != (n,):
            raise DataError(f"strata must have one label per row ({n}), got {s.shape}")
        return ResamplePlan(n, _groups(s), clustered=False)
    return ResamplePlan(n, None, clustered=False)


def _bootstrap_iv(data, statistic, n_resamples, confidence_level, method, unit, strata, clusters):
    """Validate bootstrap_ci's input; return (arrays, plan, level)."""
    if isinstance(data, np.ndarray) or not isinstance(data, Sequence) or not data:
        raise ConfigError(
            "data must be a non-empty sequence of arrays, e.g. (x,) or (y, p_ref, p_new)"
        )
    arrays = tuple(np.asarray(d) for d in data)
    n = arrays[0].shape[0] if arrays[0].ndim else -1
    if n < 2 or any(a.ndim == 0 or a.shape[0] != n for a in arrays):
        raise DataError(
            f"every array of data needs the same first axis of length >= 2, got "
            f"{[a.shape for a in arrays]}"
        )
    if not callable(statistic):
        raise ConfigError("statistic must be a callable statistic(*arrays) -> float")
    if int(n_resamples) != n_resamples or n_resamples < 2:
        raise ConfigError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    return arrays, resample_plan(n, unit, strata, clusters), check_level(confidence_level)


def bca_constants(
    theta_hat: float, theta_star: np.ndarray, jackknife_values
) -> tuple[float, float]:
    """BCa bias correction z0 and acceleration a (Efron & Tibshirani 1993, eqs. 14.14-14.15).

    z0 = Phi^-1(share of bootstrap values below theta_hat, ties counted 1/2);
    a = sum(d^3) / (6 sum(d^2)^1.5) with d = mean(jackknife) - jackknife. A statistic of
    several independently resampled samples passes one jackknife array per sample (each
    leaving out one unit of that sample, the others whole); their influence values
    U_i = (n - 1) d_i are pooled as in Efron & Tibshirani sec. 14.3 (and scipy).
    """
    b = theta_star.size
    share = ((theta_star < theta_hat).sum() + (theta_star <= theta_hat).sum()) / (2.0 * b)
    z0 = float(special.ndtri(share))
    jacks = ([np.asarray(jackknife_values, dtype=float)]
             if isinstance(jackknife_values, np.ndarray) else
             [np.asarray(j, dtype=float) for j in jackknife_values])
    if len(jacks) == 1:
        d = jacks[0].mean() - jacks[0]
        den = 6.0 * (d**2).sum() ** 1.5
        a = float((d**3).sum() / den) if den > 0 else float("nan")
        return z0, a
    num = den = 0.0
    for j in jacks:
        n = float(j.size)
        u = (n - 1.0) * (j.mean() - j)
        num += float((u**3).sum()) / n**3
        den += float((u**2).sum()) / n**2
    a = num / (6.0 * den**1.5) if den > 0 else float("nan")
    return z0, a


def bootstrap_intervals(theta_hat, theta_star, jack, level, *, warn: bool = True):
    """(percentile CI, BCa CI, z0, a) from bootstrap and jackknife values (``jack``: one
    array, or one per independently resampled sample; see :func:`bca_constants`).

    NaN intervals (with a ``DegenerateDataWarning`` when ``warn``) where a value is not finite
    or the BCa constants are undefined.
    """
    alpha = (1.0 - level) / 2.0
    flat = (jack if isinstance(jack, np.ndarray) else
            np.concatenate([np.asarray(j, dtype=float).ravel() for j in jack]))
    if not (np.isfinite(theta_star).all() and np.isfinite(flat).all() and np.isfinite(theta_hat)):
        bad = int((~np.isfinite(theta_star)).sum())
        if warn:
            warn_degenerate(
                f"the statistic is NaN/inf on the data, its jackknife or {bad} of "
                f"{theta_star.size} resamples; intervals are NaN"
            )
        return NAN_CI, NAN_CI, float("nan"), float("nan")
    pct = ConfidenceInterval(
        *map(float, np.percentile(theta_star, [100 * alpha, 100 * (1 - alpha)]))
    )
    z0, a = bca_constants(theta_hat, theta_star, jack)
    if not (np.isfinite(z0) and np.isfinite(a)):
        if warn:
            warn_degenerate(
                f"BCa is undefined (z0 = {z0}, a = {a}): the statistic is constant "
                "over the jackknife or every resample lies on one side of it"
            )
        return pct, NAN_CI, z0, a
    z = special.ndtri(np.array([alpha, 1.0 - alpha]))
    adj = special.ndtr(z0 + (z0 + z) / (1.0 - a * (z0 + z)))
    bca = ConfidenceInterval(*map(float, np.percentile(theta_star, 100 * adj)))
    return pct, bca, z0, a


def _result(theta_hat, theta_star, jack, level, method, unit) -> BootstrapResult:
    """Assemble a BootstrapResult from the bootstrap and jackknife values."""
    pct, bca, z0, a = bootstrap_intervals(theta_hat, theta_star, jack, level)
    se = float(np.std(theta_star, ddof=1)) if np.isfinite(theta_star).all() else float("nan")
    return BootstrapResult(
        statistic=float(theta_hat),
        confidence_interval=bca if method == "BCa" else pct,
        percentile_interval=pct,
        bca_interval=bca,
        bias_correction=z0,
        acceleration=a,
        standard_error=se,
        bootstrap_distribution=theta_star,
        jackknife_values=jack,
        confidence_level=level,
        method=method,
        unit=unit,
        n_resamples=theta_star.size,
    )


def bootstrap_ci(
    data: Sequence,
    statistic: Callable[..., float],
    *,
    n_resamples: int = 1000,
    confidence_level: float = 0.95,
    method: str = "BCa",
    unit: str = "frames",
    strata=None,
    clusters=None,
    rng: np.random.Generator | int | None = None,
) -> BootstrapResult:
    """Percentile and BCa bootstrap confidence intervals of a statistic.

    Parameters
    ----------
    data : sequence of array_like
        Arrays sharing their first axis (one row per unit or frame), resampled together
        (paired): ``statistic(*[a[idx] for a in data])``.
    statistic : callable
        ``statistic(*arrays) -> float``.
    n_resamples : int, optional
        Number of bootstrap resamples (the paper uses 1000).
    confidence_level : float, optional
    method : {"BCa", "percentile"}, optional
        Which interval ``confidence_interval`` holds; both are always computed.
    unit : {"frames", "seeds", "videos"}, optional
        What is resampled with replacement: rows (frames or per-seed values) or, for
        "videos", whole clusters of rows. The jackknife for the BCa acceleration leaves out
        one unit: one row, or one whole cluster for "videos".
    strata : array_like, shape (n,), optional
        Unit "frames" only: labels (e.g. the class of each frame); each stratum is
        resampled to its own size, so per-class counts are kept.
    clusters : array_like, shape (n,), optional
        Unit "videos" (required there): the video id of every frame. A resample draws as
        many videos as there are, with replacement, and keeps all frames of each.
    rng : numpy.random.Generator, int or None, optional
        Source of the resamples.

    Returns
    -------
    BootstrapResult
        ``statistic`` on the data, ``confidence_interval`` (of `method`),
        ``percentile_interval``, ``bca_interval``, ``bias_correction`` z0,
        ``acceleration`` a, ``standard_error`` (sd of the bootstrap values, ddof = 1) and
        the bootstrap and jackknife values. If the statistic is NaN on any resample the
        intervals are NaN and a ``DegenerateDataWarning`` is emitted.

    Notes
    -----
    z0 = Phi^-1(#{theta* < theta_hat} / B), ties counted 1/2; a = sum d^3 / (6 (sum d^2)^1.5)
    with d_i = mean(theta_(.)) - theta_(i) over jackknife values; the BCa interval is the
    pair of bootstrap percentiles Phi(z0 + (z0 + z_q) / (1 - a (z0 + z_q))) for
    q = (1 -/+ confidence_level) / 2. Percentiles interpolate linearly (numpy's default).

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", Chapman &
       Hall, 1993, ch. 13-14.
    .. [2] B. Efron, "Better bootstrap confidence intervals", Journal of the American
       Statistical Association 82(397):171-185, 1987.
    .. [3] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their Application",
       Cambridge University Press, 1997, sec. 3.8 (clustered data).

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import bootstrap_ci
    >>> x = np.random.default_rng(0).exponential(size=50)
    >>> res = bootstrap_ci((x,), np.mean, n_resamples=2000, rng=1)
    >>> bool(res.confidence_interval.low < x.mean() < res.confidence_interval.high)
    True
    >>> res.method, res.unit
    ('BCa', 'frames')
    """
    arrays, plan, level = _bootstrap_iv(
        data, statistic, n_resamples, confidence_level, method, unit, strata, clusters
    )
    gen = as_rng(rng)
    theta_hat = float(statistic(*arrays))
    theta_star = np.empty(int(n_resamples))
    for b in range(theta_star.size):
        idx = plan.draw(gen)
        theta_star[b] = statistic(*(a[idx] for a in arrays))
    jack = np.empty(plan.n_units)
    for u in range(jack.size):
        keep = plan.leave_out(u)
        jack[u] = statistic(*(a[keep] for a in arrays))
    return _result(theta_hat, theta_star, jack, level, method, unit)


# --------------------------------------------------------------------------------------
# Macro-AUC delta with weights: one sort per column, O(N) per resample.


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


def _delta_bootstrap_iv(
    y_labels, probs_ref, probs_new, classes, clusters, strata, n_resamples, confidence_level, method
):
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
    plan = resample_plan(y.shape[0], unit, strata, clusters)
    return y, ref, new, cls, plan, unit, check_level(confidence_level)


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

    Every resample of the test frames is applied to all seeds at once, so the result
    accounts for test-set sampling without assuming that seeds evaluated on the same
    frames are independent (unlike Stouffer's combination of per-seed DeLong z-scores).

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
        As in :func:`bootstrap_ci`.

    Returns
    -------
    DeltaBootstrapResult
        ``statistic`` (the mean delta), ``pvalue`` (two-sided percentile-bootstrap p of
        delta = 0), ``confidence_interval`` (of `method`) and the full ``bootstrap``
        result with percentile and BCa intervals and z0, a. Identical, resample by
        resample, to ``bootstrap_ci`` with the same `rng` and unit.

    Notes
    -----
    AUCs of a resample are computed from bootstrap counts on frames sorted once; the
    jackknife is analytic for frames (leaving out positive i gives
    (m AUC - V10_i) / (m - 1)) and recomputed per left-out video for clusters.

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
    >>> res.bootstrap.unit, bool(res.confidence_interval.low > 0)
    ('videos', True)
    """
    y, ref, new, cls, plan, unit, level = _delta_bootstrap_iv(
        y_labels,
        probs_ref,
        probs_new,
        classes,
        clusters,
        strata,
        n_resamples,
        confidence_level,
        method,
    )
    n = y.shape[0]
    present = [c for c in cls if 0 < int((y == c).sum()) < n]
    if len(present) < len(cls):
        warn_degenerate(
            f"classes {sorted(set(cls) - set(present))} have no positive or no "
            "negative frame; left out"
        )
    if not present:
        raise DataError("no class has both positive and negative frames")
    s, k = ref.shape[0], len(present)
    # columns: (seed, arm, class) flattened; scores (S*2*K, N)
    cols = np.stack([ref[:, :, present], new[:, :, present]], axis=1)  # (S, 2, N, K)
    scores = cols.transpose(0, 1, 3, 2).reshape(s * 2 * k, n)
    positive = np.tile(np.stack([y == c for c in present]), (s * 2, 1))  # (S*2*K, N)
    wauc = WeightedAUC(scores, positive)

    def stat_from_auc(auc: np.ndarray) -> float:
        a = auc.reshape(s, 2, k)
        return float(np.mean(a[:, 1] - a[:, 0]))  # (S, K): every class of the fixed set

    theta_hat = stat_from_auc(wauc(np.ones(n)))
    gen = as_rng(rng)
    theta_star = np.full(int(n_resamples), np.nan)
    drawn = redrawn = b = 0
    # a resample that loses every positive (or negative) of a class is drawn again, so that
    # every resample averages over the same classes (a conditional bootstrap); counted
    while b < theta_star.size and drawn < MAX_DRAWS_FACTOR * theta_star.size:
        auc = wauc(np.bincount(plan.draw(gen), minlength=n).astype(float))
        drawn += 1
        if np.isnan(auc).any():
            redrawn += 1
            continue
        theta_star[b] = stat_from_auc(auc)
        b += 1
    if redrawn:
        log.info("%d of %d resamples lost every positive (or negative) of some class and were "
                 "drawn again", redrawn, drawn)
    if b < theta_star.size:
        warn_degenerate(f"only {b} of {theta_star.size} resamples keep every class after "
                        f"{drawn} draws; intervals are NaN")
    if plan.clustered:
        jack = np.empty(plan.n_units)
        for u in range(jack.size):
            w = np.ones(n)
            w[plan.groups[u]] = 0.0
            jack[u] = stat_from_auc(wauc(w))
    else:
        jack = _analytic_jackknife(scores, positive, s, k)
    boot = _result(theta_hat, theta_star, jack, level, method, unit)
    below = int((theta_star <= 0).sum()) + 1
    above = int((theta_star >= 0).sum()) + 1
    p = min(1.0, 2.0 * min(below, above) / (theta_star.size + 1))
    return DeltaBootstrapResult(
        statistic=boot.statistic,
        pvalue=p,
        confidence_interval=boot.confidence_interval,
        bootstrap=boot,
        n_seeds=s,
        classes=tuple(present),
    )


def _analytic_jackknife(scores: np.ndarray, positive: np.ndarray, s: int, k: int) -> np.ndarray:
    """Leave-one-frame-out mean deltas from DeLong components, shape (N,)."""
    n = scores.shape[1]
    loo = np.empty(scores.shape)  # (S*2*K, N): AUC of each column without frame f
    for i in range(scores.shape[0]):
        pos = positive[i]
        auc, v10, v01 = placements(pos, scores[i][None])
        m, nn = v10.shape[1], v01.shape[1]
        with np.errstate(invalid="ignore", divide="ignore"):
            loo[i, pos] = (m * auc[0] - v10[0]) / (m - 1) if m > 1 else np.nan
            loo[i, ~pos] = (nn * auc[0] - v01[0]) / (nn - 1) if nn > 1 else np.nan
    d = loo.reshape(s, 2, k, n)
    d = d[:, 1] - d[:, 0]  # (S, K, N)
    return np.nanmean(d, axis=(0, 1))
