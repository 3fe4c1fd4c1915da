"""Paired tests on two arms: Wilcoxon signed-rank (per-seed values) and McNemar (frames)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from pipi.errors import DataError
from pipi.stats._common import check_alternative, warn_degenerate
from pipi.stats._results import McNemarResult, WilcoxonResult

__all__ = ["MCNEMAR_EXACT_BELOW", "mcnemar_test", "paired_wilcoxon"]

#: McNemar uses the exact binomial test when fewer discordant pairs than this are seen
#: (the chi-square approximation is poor below ~25; Fagerland, Lydersen & Laake 2013).
MCNEMAR_EXACT_BELOW = 25


def _wilcoxon_iv(reference, new, alternative):
    """Validate paired_wilcoxon's input; return (deltas new - ref, alternative)."""
    ref = np.asarray(reference, dtype=float)
    nw = np.asarray(new, dtype=float)
    if ref.ndim != 1 or ref.shape != nw.shape or ref.size < 1:
        raise DataError(
            f"reference and new must be 1-D of equal length, got {ref.shape}, {nw.shape}"
        )
    if not (np.isfinite(ref).all() and np.isfinite(nw).all()):
        raise DataError("reference/new contain NaN or inf")
    return nw - ref, check_alternative(alternative)


def paired_wilcoxon(reference, new, *, alternative: str = "two-sided") -> WilcoxonResult:
    """Wilcoxon signed-rank test of paired values (e.g. per-seed macro-AUCs of two arms).

    Wraps ``scipy.stats.wilcoxon(new, reference, method="auto")``: differences are
    new - reference, zero differences are dropped (``zero_method="wilcox"``).

    Parameters
    ----------
    reference, new : array_like, shape (n,)
        Paired values of the reference and the new arm.
    alternative : {"two-sided", "greater", "less"}, optional
        "greater": the new arm's values are larger.

    Returns
    -------
    WilcoxonResult
        ``statistic`` (scipy's: for two-sided, the smaller of the signed-rank sums;
        otherwise the sum of positive ranks), ``pvalue``, ``n`` and ``method``:
        "exact" (n <= 50 and no ties or zeros; with 6 seeds the smallest two-sided p is
        2/64), "permutation" (ties or zeros and n <= 13: exact enumeration of signs) or
        "asymptotic" (normal approximation). With no non-zero difference the result is
        NaN with a ``DegenerateDataWarning``.

    References
    ----------
    .. [1] F. Wilcoxon, "Individual comparisons by ranking methods", Biometrics Bulletin
       1(6):80-83, 1945.

    Examples
    --------
    >>> from pipi.stats import paired_wilcoxon
    >>> res = paired_wilcoxon([.70, .71, .69, .72, .70, .68], [.73, .73, .74, .73, .76, .75])
    >>> res.method, res.pvalue
    ('exact', 0.03125)
    """
    d, alternative = _wilcoxon_iv(reference, new, alternative)
    nz = d[d != 0]
    if nz.size == 0:
        warn_degenerate("all paired differences are zero; the Wilcoxon test is undefined")
        return WilcoxonResult(float("nan"), float("nan"), int(d.size), "none", alternative)
    ties = np.unique(np.abs(nz)).size < nz.size
    if d.size > 50:
        method = "asymptotic"
    elif not ties and nz.size == d.size:
        method = "exact"
    elif d.size <= 13:
        method = "permutation"
    else:
        method = "asymptotic"
    res = stats.wilcoxon(d, alternative=alternative, method="auto", zero_method="wilcox")
    return WilcoxonResult(float(res.statistic), float(res.pvalue), int(d.size), method, alternative)


def _predictions(pred, n: int, name: str) -> np.ndarray:
    """Integer predictions from labels (N,) or scores (N, C) (argmax)."""
    p = np.asarray(pred)
    if p.ndim == 2:
        p = p.argmax(axis=1)  # argmax operating point
    if p.shape != (n,):
        raise DataError(f"{name} must be labels (N,) or scores (N, C) with N = {n}, got {p.shape}")
    return p


def _mcnemar_iv(y_true, pred_ref, pred_new):
    """Validate mcnemar_test's input; return (correct_ref, correct_new)."""
    y = np.asarray(y_true)
    if y.ndim != 1 or y.size == 0:
        raise DataError(f"y_true must be a non-empty 1-D array of labels, got {y.shape}")
    ref = _predictions(pred_ref, y.size, "pred_ref")
    new = _predictions(pred_new, y.size, "pred_new")
    return ref == y, new == y


def mcnemar_test(y_true, pred_ref, pred_new) -> McNemarResult:
    """McNemar's test of paired per-frame correctness of two classifiers.

    Parameters
    ----------
    y_true : array_like, shape (N,)
        True class of every frame.
    pred_ref, pred_new : array_like, shape (N,) or (N, C)
        Predicted classes, or class scores whose argmax is the prediction (the argmax
        operating point).

    Returns
    -------
    McNemarResult
        With b = ``ref_only`` (frames only the reference classifies correctly) and
        c = ``new_only``: if b + c < 25 (``MCNEMAR_EXACT_BELOW``) the exact two-sided
        binomial test of c ~ Binomial(b + c, 1/2) (``statistic`` = c, ``method`` =
        "exact"); otherwise the continuity-corrected chi-square
        (|b - c| - 1)^2 / (b + c) on 1 degree of freedom (``method`` = "chi2").
        ``delta`` = (c - b) / N is the accuracy difference new - reference. With no
        discordant pair the p-value is 1.

    References
    ----------
    .. [1] Q. McNemar, "Note on the sampling error of the difference between correlated
       proportions or percentages", Psychometrika 12(2):153-157, 1947.
    .. [2] A. L. Edwards, "Note on the correction for continuity in testing the significance
       of the difference between correlated proportions", Psychometrika 13(3):185-187, 1948.
    .. [3] M. W. Fagerland, S. Lydersen and P. Laake, "The McNemar test for binary
       matched-pairs data: mid-p and asymptotic are better than exact conditional",
       BMC Medical Research Methodology 13:91, 2013.

    Examples
    --------
    >>> from pipi.stats import mcnemar_test
    >>> res = mcnemar_test([0, 1, 2, 1, 0, 2], [0, 1, 0, 0, 0, 1], [0, 1, 2, 1, 0, 1])
    >>> res.method, res.ref_only, res.new_only, res.pvalue
    ('exact', 0, 2, 0.5)
    """
    ok_ref, ok_new = _mcnemar_iv(y_true, pred_ref, pred_new)
    b = int((ok_ref & ~ok_new).sum())
    c = int((~ok_ref & ok_new).sum())
    n = ok_ref.size
    delta = (c - b) / n
    if b + c < MCNEMAR_EXACT_BELOW:
        p = 1.0 if b + c == 0 else float(stats.binomtest(c, b + c, 0.5).pvalue)
        return McNemarResult(float(c), p, "exact", b, c, delta, n)
    chi2 = (abs(b - c) - 1.0) ** 2 / (b + c)
    return McNemarResult(float(chi2), float(stats.chi2.sf(chi2, 1)), "chi2", b, c, delta, n)
