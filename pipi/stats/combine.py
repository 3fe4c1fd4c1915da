"""Stouffer's combination of per-seed z-scores, as the paper does across seeds."""

from __future__ import annotations

import numpy as np

from pipi.errors import DataError
from pipi.stats._common import check_alternative, warn_degenerate, z_pvalue
from pipi.stats._results import StoufferResult

__all__ = ["stouffer_combine"]


def _stouffer_iv(z_scores, alternative):
    """Validate stouffer_combine's input."""
    z = np.asarray(z_scores, dtype=float)
    if z.ndim != 1 or z.size < 1:
        raise DataError(f"z_scores must be a non-empty 1-D array (one z per seed), got {z.shape}")
    return z, check_alternative(alternative)


def stouffer_combine(z_scores, *, alternative: str = "two-sided") -> StoufferResult:
    """Combine per-seed z-scores by Stouffer's method: Z = sum(z) / sqrt(n).

    Parameters
    ----------
    z_scores : array_like, shape (n,)
        One z per seed, positive when the new arm is better (e.g. ``delong_test(...).statistic``).
    alternative : {"two-sided", "greater", "less"}, optional

    Returns
    -------
    StoufferResult
        ``statistic`` Z, ``pvalue`` from the standard normal, ``n`` and ``assumption``.
        A NaN z gives NaN with a ``DegenerateDataWarning``.

    Notes
    -----
    Z is standard normal under H0 only if the z-scores are **independent**. Seeds of one
    arm evaluated on the same test frames are not: each per-seed DeLong z shares the
    sampling error of the test set, so the z-scores are positively correlated, Var(Z) > 1
    and this p-value is anti-conservative. It is reported because the paper reports it;
    :func:`pipi.stats.sign_flip_test` over per-seed deltas and
    :func:`pipi.stats.macro_auc_delta_bootstrap` (one resample of the test videos applied
    to every seed) are the sound cross-seed alternatives.

    References
    ----------
    .. [1] S. A. Stouffer, E. A. Suchman, L. C. DeVinney, S. A. Star and R. M. Williams Jr.,
       "The American Soldier, Vol. 1: Adjustment during Army Life", Princeton University
       Press, 1949.
    .. [2] M. C. Whitlock, "Combining probability from independent tests: the weighted
       Z-method is superior to Fisher's approach", Journal of Evolutionary Biology
       18(5):1368-1373, 2005.

    Examples
    --------
    >>> from pipi.stats import stouffer_combine
    >>> res = stouffer_combine([1.0, 2.0, 1.5, 0.5])
    >>> res.statistic, round(res.pvalue, 4)
    (2.5, 0.0124)
    """
    z, alternative = _stouffer_iv(z_scores, alternative)
    if not np.isfinite(z).all():
        warn_degenerate("a per-seed z-score is NaN or inf; the Stouffer combination is NaN")
        return StoufferResult(float("nan"), float("nan"), int(z.size), alternative)
    stat = float(z.sum() / np.sqrt(z.size))
    return StoufferResult(stat, z_pvalue(stat, alternative), int(z.size), alternative)
