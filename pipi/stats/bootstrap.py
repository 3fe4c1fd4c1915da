"""Bootstrap confidence intervals (percentile and BCa) over seeds, frames or videos.

``scipy.stats.bootstrap`` is not wrapped here because it can neither stratify (keep the
per-class frame counts) nor resample clusters (whole videos), and it does not expose the
BCa constants z0 and a that the paper reports. The BCa formulas are those of Efron &
Tibshirani (1993), ch. 14, with the tie-aware z0 and linear-interpolation percentiles that
scipy uses, so that both agree on unclustered data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from pipi.errors import ConfigError, DataError
from pipi.stats._common import as_rng, check_level, warn_degenerate
from pipi.stats._results import NAN_CI, BootstrapResult, ConfidenceInterval

__all__ = ["METHODS", "UNITS", "ResamplePlan", "bca_constants", "bootstrap_ci",
           "bootstrap_intervals", "resample_plan"]

#: What one bootstrap draw resamples (with replacement).
UNITS = ("seeds", "frames", "videos")
#: Which interval ``confidence_interval`` holds (both are always computed).
METHODS = ("percentile", "BCa")


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
