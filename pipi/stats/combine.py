"""Stouffer's combination of per-seed z-scores, as the paper does across seeds, and the
published code's macro z (per-class z combined over seeds, then over classes)."""

from __future__ import annotations

import numpy as np

from pipi.errors import DataError
from pipi.stats._common import check_alternative, warn_degenerate, z_pvalue
from pipi.stats._results import ClassStoufferResult, StoufferResult

__all__ = ["stouffer_combine", "stouffer_over_classes"]


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


def _over_classes_iv(per_class_z, alternative):
    """Validate stouffer_over_classes' input."""
    z = np.asarray(per_class_z, dtype=float)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
        raise DataError("per_class_z must be a non-empty 2-D array (seeds x classes), got "
                        f"shape {z.shape}")
    return z, check_alternative(alternative)


def stouffer_over_classes(per_class_z, *, alternative: str = "two-sided"
                          ) -> ClassStoufferResult:
    """The published code's macro paired z: Stouffer over seeds per class, then over classes.

    For class k, Z_k = sum_s z_sk / sqrt(S_k) over the S_k seeds with a finite per-class
    DeLong z; the macro z is sum_k Z_k / sqrt(K) over the K classes with a finite Z_k (the
    authors' ``compute_paired_tests.py`` "macro-level z"). pipi's own macro z is the per-seed
    DeLong test of the macro-AUC with the covariance between classes
    (:func:`pipi.stats.delong_macro_test`), combined over seeds by
    :func:`stouffer_combine`.

    Parameters
    ----------
    per_class_z : array_like, shape (S, K)
        Per-seed, per-class paired DeLong z (``DeLongMacroResult.per_class_statistic`` of each
        seed), positive when the new arm is better. A NaN (a class whose variance is undefined
        in that seed) is left out of that class's combination, as the published code leaves
        out seeds without a z.
    alternative : {"two-sided", "greater", "less"}, optional

    Returns
    -------
    ClassStoufferResult
        ``statistic`` (the macro z), ``pvalue`` (standard normal), ``per_class_statistic``
        (Z_k), ``n_seeds`` per class and ``n_classes``; NaN with a ``DegenerateDataWarning``
        when no class has a finite z.

    Notes
    -----
    The z is standard normal under H0 only if the per-class z-scores are independent. The
    classes are scored on the same frames (one-vs-rest) and the seeds on one test set, so
    they are correlated and the p-value is anti-conservative; reported because the paper's
    paired-test table was computed this way.

    References
    ----------
    .. [1] S. A. Stouffer et al., "The American Soldier, Vol. 1", Princeton University Press,
       1949.
    .. [2] E. R. DeLong, D. M. DeLong and D. L. Clarke-Pearson, Biometrics 44(3):837-845, 1988.

    Examples
    --------
    >>> from pipi.stats import stouffer_over_classes
    >>> res = stouffer_over_classes([[1.0, 2.0], [3.0, 0.0]])
    >>> round(res.statistic, 4), res.n_classes
    (3.0, 2)
    """
    z, alternative = _over_classes_iv(per_class_z, alternative)
    ok = np.isfinite(z)
    n_seeds = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_class = np.where(n_seeds > 0, np.where(ok, z, 0.0).sum(axis=0) / np.sqrt(n_seeds),
                             np.nan)
    have = np.isfinite(per_class)
    if not have.any():
        warn_degenerate("no class has a finite per-class z; the macro z is NaN")
        return ClassStoufferResult(float("nan"), float("nan"), per_class, n_seeds, 0,
                                   alternative)
    stat = float(per_class[have].sum() / np.sqrt(have.sum()))
    return ClassStoufferResult(stat, z_pvalue(stat, alternative), per_class, n_seeds,
                               int(have.sum()), alternative)
