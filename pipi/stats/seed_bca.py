"""Seed-level BCa interval of a cross-seed mean paired delta (the paper's intervals).

The paper's intervals on cross-seed paired deltas (e.g. the channel ablation's
"[+0.005, +0.029]") are BCa bootstraps over the per-seed deltas: the seeds are the units
resampled, the test set is held fixed. That answers "would another draw of training seeds
give the same mean delta?", where the video-clustered bootstrap
(:mod:`pipi.stats.delta_bootstrap`) answers "would another draw of test videos?". Both are
shown, each labelled with what it resamples.

Resamples are drawn exactly as ``scipy.stats.bootstrap`` draws them (one
``rng.integers(0, n, (n_resamples, n))``), and z0, a and the percentiles follow the same
formulas (:func:`pipi.stats.bootstrap.bootstrap_intervals`), so both agree to rounding for the
same generator state.

With n = 6 seeds the bootstrap distribution of the mean has at most C(11, 6) = 462 distinct
values and the jackknife six, so BCa can be unstable: :func:`seed_delta_bca` says so
(``unstable`` and ``reason``) where the BCa endpoint is pinned to the smallest or largest
per-seed delta, where fewer than ``MIN_TAIL`` resamples lie beyond an endpoint, or where BCa
is undefined (all deltas equal, or every resample on one side of the mean).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from pipi.errors import ConfigError, DataError
from pipi.stats._common import as_rng, check_level
from pipi.stats._results import NAN_CI, BootstrapResult, ConfidenceInterval
from pipi.stats.bootstrap import bootstrap_intervals

__all__ = ["MIN_TAIL", "SeedBCaResult", "seed_delta_bca"]

#: Fewer resamples than this beyond a BCa endpoint: the endpoint rests on a handful of draws.
MIN_TAIL = 10


@dataclass(frozen=True)
class SeedBCaResult(BootstrapResult):
    """BCa bootstrap of the mean of per-seed deltas: a :class:`BootstrapResult` with unit
    ``seeds`` and method ``BCa``, plus the BCa-adjusted ``tail_levels`` (0..1) and whether
    the interval is ``unstable`` (``reason``: why; "" when stable)."""

    tail_levels: tuple[float, float] = (float("nan"), float("nan"))
    n_seeds: int = 0
    unstable: bool = False
    reason: str = ""


def _seed_bca_iv(deltas, n_resamples, confidence_level) -> tuple[np.ndarray, float]:
    """Validate seed_delta_bca's input."""
    d = np.asarray(deltas, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise DataError(f"deltas must be a 1-D array of >= 2 per-seed deltas, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise DataError("deltas contain NaN or inf")
    if int(n_resamples) != n_resamples or n_resamples < 2:
        raise ConfigError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    return d, check_level(confidence_level)


def seed_delta_bca(deltas, *, n_resamples: int = 1000, confidence_level: float = 0.95,
                   rng: np.random.Generator | int | None = None) -> SeedBCaResult:
    """BCa interval of the mean per-seed paired delta, resampling seeds.

    Parameters
    ----------
    deltas : array_like, shape (S,)
        One paired delta per seed (new - reference), e.g. per-seed macro-AUC deltas.
    n_resamples : int, optional
        Bootstrap resamples (the paper: 1,000).
    confidence_level : float, optional
    rng : numpy.random.Generator, int or None, optional
        Source of the resamples; drawn as ``scipy.stats.bootstrap`` draws them.

    Returns
    -------
    SeedBCaResult
        ``statistic`` (mean delta), the BCa ``confidence_interval``, the percentile interval,
        z0, a, the BCa-adjusted tail levels and whether the interval is ``unstable`` (with the
        ``reason``). Undefined BCa (all deltas equal) gives a NaN interval, unstable.

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 14.
    .. [2] B. Efron, "Better bootstrap confidence intervals", JASA 82(397):171-185, 1987.

    Examples
    --------
    >>> from pipi.stats import seed_delta_bca
    >>> res = seed_delta_bca([0.02, 0.03, -0.01, 0.04, 0.025, 0.015], rng=0)
    >>> res.unit, res.n_seeds, bool(res.confidence_interval.low < 0.02 < res.confidence_interval.high)
    ('seeds', 6, True)
    """
    d, level = _seed_bca_iv(deltas, n_resamples, confidence_level)
    n = d.size
    gen = as_rng(rng)
    theta_hat = float(d.mean())
    idx = gen.integers(0, n, (int(n_resamples), n))  # scipy.stats.bootstrap's draw
    theta_star = d[idx].mean(axis=1)
    jack = (d.sum() - d) / (n - 1)  # leave-one-seed-out means
    pct, bca, z0, a = bootstrap_intervals(theta_hat, theta_star, jack, level, warn=False)
    alpha = (1.0 - level) / 2.0
    if np.isfinite(z0) and np.isfinite(a):
        z = special.ndtri(np.array([alpha, 1.0 - alpha]))
        levels = tuple(float(v) for v in special.ndtr(z0 + (z0 + z) / (1.0 - a * (z0 + z))))
    else:
        levels = (float("nan"), float("nan"))
    reason = _instability(d, theta_star, bca, levels)
    return SeedBCaResult(
        statistic=theta_hat, confidence_interval=bca, percentile_interval=pct,
        bca_interval=bca, bias_correction=z0, acceleration=a,
        standard_error=float(np.std(theta_star, ddof=1)), bootstrap_distribution=theta_star,
        jackknife_values=jack, confidence_level=level, method="BCa", unit="seeds",
        n_resamples=int(n_resamples), tail_levels=levels, n_seeds=n, unstable=bool(reason),
        reason=reason)


def _instability(d: np.ndarray, theta_star: np.ndarray, bca: ConfidenceInterval,
                 levels: tuple[float, float]) -> str:
    """Why a seed-level BCa interval should not be trusted ("" when nothing is wrong)."""
    if bca == NAN_CI or not np.isfinite(bca.low):
        return (f"BCa undefined with {d.size} seeds (all deltas equal or every resample on one "
                "side of the mean)")
    out = []
    if np.isclose(bca.low, d.min()) or np.isclose(bca.high, d.max()):
        out.append("an endpoint sits at the smallest/largest per-seed delta")
    b = theta_star.size
    tails = (levels[0] * b, (1.0 - levels[1]) * b)
    if min(tails) < MIN_TAIL:
        out.append(f"BCa-adjusted tail levels {levels[0]:.4f}/{levels[1]:.4f} leave fewer than "
                   f"{MIN_TAIL} of {b} resamples beyond an endpoint")
    if not out:
        return ""
    return f"unstable with n = {d.size} seeds: " + "; ".join(out)
