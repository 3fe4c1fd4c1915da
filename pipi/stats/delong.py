"""DeLong's test for correlated AUCs, with Sun & Xu's fast midrank algorithm.

Notation (DeLong et al. 1988): positives X_1..X_m, negatives Y_1..Y_n, kernel
psi(x, y) = 1 if x > y, 1/2 if x == y, 0 otherwise. AUC = sum psi(X_i, Y_j) / (m n).
The structural components (placements) are V10(X_i) = mean_j psi(X_i, Y_j) and
V01(Y_j) = mean_i psi(X_i, Y_j); the DeLong covariance of AUCs computed from several
score sets on the same frames is S = S10 / m + S01 / n, with S10, S01 the sample
covariances (ddof = 1) of the components over positives and negatives.

Sun & Xu (2014) obtain all components from three midrankings in O(N log N):
V10(X_i) = (Tz(X_i) - Tx(X_i)) / n and V01(Y_j) = 1 - (Tz(Y_j) - Ty(Y_j)) / m, where Tz,
Tx, Ty are midranks in the pooled sample, among positives and among negatives.

A higher score always means "positive": the direction is fixed, so an AUC below 0.5 stays
below 0.5 (pROC's ``direction = "<"``).
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from pipi.errors import DataError
from pipi.stats._common import (
    binary_labels,
    check_alternative,
    check_level,
    class_labels_and_probs,
    scores_1d,
    warn_degenerate,
    z_pvalue,
)
from pipi.stats._results import (
    NAN_CI,
    AUCConfidenceResult,
    ConfidenceInterval,
    DeLongMacroResult,
    DeLongResult,
)

__all__ = ["delong_ci", "delong_macro_test", "delong_test", "placements"]

#: A variance below this is zero up to rounding of components that are O(1).
_ZERO_VARIANCE = 1e4 * np.finfo(float).eps ** 2

_NAN = float("nan")


def placements(
    positive: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AUCs and structural components of score sets by Sun & Xu's midrank algorithm.

    Parameters
    ----------
    positive : ndarray of bool, shape (N,)
        Which frames are positives (at least one positive and one negative).
    scores : ndarray, shape (r, N)
        r score sets on the same N frames (higher = more positive).

    Returns
    -------
    auc : ndarray, shape (r,)
    v10 : ndarray, shape (r, m)
        Components of the positives, in frame order.
    v01 : ndarray, shape (r, n)
        Components of the negatives, in frame order.

    References
    ----------
    .. [1] X. Sun and W. Xu, "Fast implementation of DeLong's algorithm for comparing the
       areas under correlated receiver operating characteristic curves", IEEE Signal
       Processing Letters 21(11):1389-1393, 2014.
    """
    x = scores[:, positive]  # (r, m)
    y = scores[:, ~positive]  # (r, n)
    m, n = x.shape[1], y.shape[1]
    tz = stats.rankdata(np.concatenate([x, y], axis=1), axis=1)  # (r, m + n) pooled midranks
    tx = stats.rankdata(x, axis=1)
    ty = stats.rankdata(y, axis=1)
    auc = (tz[:, :m].sum(axis=1) - m * (m + 1) / 2.0) / (m * n)
    v10 = (tz[:, :m] - tx) / n
    v01 = 1.0 - (tz[:, m:] - ty) / m
    return auc, v10, v01


def _delong_iv(y_true, scores_ref, scores_new, alternative, confidence_level):
    """Validate delong_test's input; return (positive mask, (2, N) scores, alternative, level)."""
    pos = binary_labels(y_true)
    ref = scores_1d(scores_ref, pos.shape[0], "scores_ref")
    new = scores_1d(scores_new, pos.shape[0], "scores_new")
    return pos, np.stack([ref, new]), check_alternative(alternative), check_level(confidence_level)


def delong_test(
    y_true,
    scores_ref,
    scores_new,
    *,
    alternative: str = "two-sided",
    confidence_level: float = 0.95,
) -> DeLongResult:
    """Paired DeLong test of two AUCs computed on the same frames.

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
        1 (True) marks a positive frame.
    scores_ref, scores_new : array_like, shape (N,)
        Scores of the reference and the new arm; a higher score means "positive".
    alternative : {"two-sided", "greater", "less"}, optional
        "greater": the new arm's AUC is larger.
    confidence_level : float, optional
        Level of the Wald interval of delta = AUC_new - AUC_ref.

    Returns
    -------
    DeLongResult
        ``statistic`` z = (AUC_new - AUC_ref) / sqrt(var_ref + var_new - 2 cov), ``pvalue``
        from the standard normal, both AUCs, the DeLong variances and covariance and the
        interval of the delta. With one class present, fewer than two frames of a class
        or zero variance of the delta, the undefined fields are NaN and a
        ``DegenerateDataWarning`` is emitted.

    Notes
    -----
    Ties count 1/2 (Mann-Whitney kernel). The direction is fixed: an AUC below 0.5 stays
    below 0.5. The z-score and p-value equal those of
    ``pROC::roc.test(roc_new, roc_ref, method = "delong", paired = TRUE)`` with
    ``direction = "<"``.

    References
    ----------
    .. [1] E. R. DeLong, D. M. DeLong and D. L. Clarke-Pearson, "Comparing the areas under
       two or more correlated receiver operating characteristic curves: a nonparametric
       approach", Biometrics 44(3):837-845, 1988.
    .. [2] X. Sun and W. Xu, "Fast implementation of DeLong's algorithm for comparing the
       areas under correlated receiver operating characteristic curves", IEEE Signal
       Processing Letters 21(11):1389-1393, 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import delong_test
    >>> y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    >>> ref = np.array([0.1, 0.4, 0.35, 0.8, 0.3, 0.5, 0.7, 0.6])
    >>> new = np.array([0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.4, 0.9])
    >>> res = delong_test(y, ref, new)
    >>> round(res.auc_ref, 4), round(res.auc_new, 4), round(res.delta, 4)
    (0.625, 0.9375, 0.3125)
    >>> bool(res.statistic > 0)
    True
    """
    pos, s, alternative, level = _delong_iv(
        y_true, scores_ref, scores_new, alternative, confidence_level
    )
    m, n = int(pos.sum()), int((~pos).sum())
    if m == 0 or n == 0:
        warn_degenerate(f"DeLong test needs both classes; got {m} positives and {n} negatives")
        return DeLongResult(
            _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, NAN_CI, m, n, alternative
        )
    auc, v10, v01 = placements(pos, s)
    delta = float(auc[1] - auc[0])
    if m < 2 or n < 2:
        warn_degenerate(
            f"DeLong variance needs at least 2 positives and 2 negatives; got {m} and {n}"
        )
        return DeLongResult(
            _NAN,
            _NAN,
            float(auc[0]),
            float(auc[1]),
            delta,
            _NAN,
            _NAN,
            _NAN,
            _NAN,
            NAN_CI,
            m,
            n,
            alternative,
        )
    cov = np.cov(v10) / m + np.cov(v01) / n  # (2, 2), ddof = 1
    var_delta = float(cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1])
    if var_delta <= _ZERO_VARIANCE:
        warn_degenerate("the DeLong variance of the AUC difference is zero; z is undefined")
        z, p, ci = _NAN, _NAN, NAN_CI
    else:
        se = np.sqrt(var_delta)
        z = delta / se
        p = z_pvalue(z, alternative)
        q = special.ndtri(0.5 + level / 2.0)
        ci = ConfidenceInterval(float(delta - q * se), float(delta + q * se))
    return DeLongResult(
        statistic=float(z),
        pvalue=p,
        auc_ref=float(auc[0]),
        auc_new=float(auc[1]),
        delta=delta,
        variance_ref=float(cov[0, 0]),
        variance_new=float(cov[1, 1]),
        covariance=float(cov[0, 1]),
        variance_delta=var_delta,
        confidence_interval=ci,
        n_positive=m,
        n_negative=n,
        alternative=alternative,
    )


def _delong_ci_iv(y_true, scores, confidence_level):
    """Validate delong_ci's input; return (positive mask, (1, N) scores, level)."""
    pos = binary_labels(y_true)
    return pos, scores_1d(scores, pos.shape[0], "scores")[None, :], check_level(confidence_level)


def delong_ci(y_true, scores, *, confidence_level: float = 0.95) -> AUCConfidenceResult:
    """DeLong confidence interval of a single AUC.

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
        1 (True) marks a positive frame.
    scores : array_like, shape (N,)
        Higher means "positive" (fixed direction).
    confidence_level : float, optional

    Returns
    -------
    AUCConfidenceResult
        ``statistic`` (the AUC), DeLong ``variance`` S10/m + S01/n, ``standard_error`` and
        the normal interval AUC -/+ z * se clipped to [0, 1] (as pROC's ``ci.auc``). With
        one class present or fewer than two frames of a class the fields are NaN; with zero
        variance (perfect separation) the interval is the single point AUC, as in pROC.
        Both cases emit a ``DegenerateDataWarning``.

    References
    ----------
    .. [1] E. R. DeLong, D. M. DeLong and D. L. Clarke-Pearson, Biometrics 44(3):837-845, 1988.
    .. [2] X. Sun and W. Xu, IEEE Signal Processing Letters 21(11):1389-1393, 2014.

    Examples
    --------
    >>> from pipi.stats import delong_ci
    >>> res = delong_ci([0, 0, 0, 1, 1, 1], [0.1, 0.5, 0.3, 0.4, 0.8, 0.9])
    >>> round(res.statistic, 4), round(res.confidence_interval.high, 4)
    (0.8889, 1.0)
    """
    pos, s, level = _delong_ci_iv(y_true, scores, confidence_level)
    m, n = int(pos.sum()), int((~pos).sum())
    if m == 0 or n == 0:
        warn_degenerate(f"an AUC needs both classes; got {m} positives and {n} negatives")
        return AUCConfidenceResult(_NAN, _NAN, _NAN, NAN_CI, level, m, n)
    auc, v10, v01 = placements(pos, s)
    a = float(auc[0])
    if m < 2 or n < 2:
        warn_degenerate(f"DeLong variance needs at least 2 positives and 2 negatives; got {m}, {n}")
        return AUCConfidenceResult(a, _NAN, _NAN, NAN_CI, level, m, n)
    var = float(np.var(v10[0], ddof=1) / m + np.var(v01[0], ddof=1) / n)
    if var <= _ZERO_VARIANCE:
        warn_degenerate(f"the DeLong variance of the AUC is zero (AUC = {a}); the CI is a point")
        return AUCConfidenceResult(a, 0.0, 0.0, ConfidenceInterval(a, a), level, m, n)
    se = np.sqrt(var)
    q = special.ndtri(0.5 + level / 2.0)
    ci = ConfidenceInterval(float(np.clip(a - q * se, 0, 1)), float(np.clip(a + q * se, 0, 1)))
    return AUCConfidenceResult(a, var, float(se), ci, level, m, n)


def _delong_macro_iv(y_labels, probs_ref, probs_new, classes, alternative, confidence_level):
    """Validate delong_macro_test's input."""
    y, ref, cls = class_labels_and_probs(y_labels, probs_ref, classes, name="probs_ref")
    new = np.asarray(probs_new, dtype=float)
    if new.shape != ref.shape:
        raise DataError(f"probs_new has shape {new.shape}, probs_ref {ref.shape}; they must match")
    if not np.isfinite(new).all():
        raise DataError("probs_new contains NaN or inf")
    return y, ref, new, cls, check_alternative(alternative), check_level(confidence_level)


def class_influence(positive: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AUCs and per-frame influence values psi of r score sets for one binary split.

    psi(f) = (V10(f) - AUC) / sqrt(m (m - 1)) for a positive frame and
    (V01(f) - AUC) / sqrt(n (n - 1)) for a negative one, so that
    ``psi @ psi.T`` is exactly DeLong's covariance matrix S10 / m + S01 / n.

    Returns (auc (r,), psi (r, N)); needs m >= 2 and n >= 2.
    """
    auc, v10, v01 = placements(positive, scores)
    m, n = v10.shape[1], v01.shape[1]
    psi = np.empty_like(scores, dtype=float)  # (r, N)
    psi[:, positive] = (v10 - auc[:, None]) / np.sqrt(m * (m - 1.0))
    psi[:, ~positive] = (v01 - auc[:, None]) / np.sqrt(n * (n - 1.0))
    return auc, psi


def delong_macro_test(
    y_labels,
    probs_ref,
    probs_new,
    *,
    classes=None,
    alternative: str = "two-sided",
    confidence_level: float = 0.95,
) -> DeLongMacroResult:
    """Paired DeLong test of two one-vs-rest macro-AUCs on the same frames.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot array, shape (N, C)
        True class index (column of ``probs_*``) of every frame.
    probs_ref, probs_new : array_like, shape (N, C)
        Class scores of the reference and the new arm (softmax outputs, logits, ...).
    classes : sequence of int, optional
        Columns over which the macro-AUC is taken (default: all C). A class with no
        positive or no negative frame is skipped with a ``DegenerateDataWarning`` and
        listed in ``skipped_classes``.
    alternative : {"two-sided", "greater", "less"}, optional
        "greater": the new arm's macro-AUC is larger.
    confidence_level : float, optional
        Level of the Wald interval of the macro delta.

    Returns
    -------
    DeLongMacroResult
        ``statistic`` z of the macro delta, its ``pvalue`` and interval, both macro-AUCs,
        per-class AUCs, the (K, K) ``covariance`` of per-class deltas and per-class z and
        p-values (the paired DeLong test of each class, identical to :func:`delong_test`).

    Notes
    -----
    Class k is scored one-vs-rest: positives P_k are the frames of class k, negatives N_k
    all other frames, so the classes use different positive/negative splits of the same
    frames. The DeLong estimator has the influence-function form

        AUC_k - E[AUC_k] ~ sum_f psi_k(f),
        psi_k(f) = (V10_k(f) - AUC_k) / sqrt(m_k (m_k - 1))   if f in P_k,
        psi_k(f) = (V01_k(f) - AUC_k) / sqrt(n_k (n_k - 1))   if f in N_k,

    i.e. the Hoeffding projection of the two-sample U-statistic when frames are an i.i.d.
    sample of (label, scores) -- the sampling model under which DeLong's estimator pools
    all non-k frames as i.i.d. negatives. The square roots split DeLong's small-sample
    factors m/(m-1), n/(n-1) so that sum_f psi_k(f)^2 is exactly DeLong's variance (and
    psi_ref . psi_new exactly its paired covariance). With phi_k = psi_k,new - psi_k,ref,
    the covariance of the per-class deltas is C_kl = sum_f phi_k(f) phi_l(f) -- a frame that
    is a positive of k and a negative of l links the two classes -- and the macro delta
    D = mean_k delta_k has Var(D) = (1 / K^2) sum_{k, l} C_kl. For k != l, C_kl equals the
    infinitesimal-jackknife (sandwich) estimate up to terms of relative order 1/m_k.

    Frames are treated as independent: frames of the same video are not, which makes this
    variance too small; :func:`macro_auc_delta_bootstrap` with ``clusters`` resamples whole
    videos instead.

    References
    ----------
    .. [1] E. R. DeLong, D. M. DeLong and D. L. Clarke-Pearson, Biometrics 44(3):837-845, 1988.
    .. [2] X. Sun and W. Xu, IEEE Signal Processing Letters 21(11):1389-1393, 2014.
    .. [3] W. Hoeffding, "A class of statistics with asymptotically normal distribution",
       Annals of Mathematical Statistics 19(3):293-325, 1948.

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import delong_macro_test
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=300)
    >>> ref = rng.normal(size=(300, 3)) + np.eye(3)[y]
    >>> new = ref + 0.5 * np.eye(3)[y] + 0.3 * rng.normal(size=(300, 3))
    >>> res = delong_macro_test(y, ref, new)
    >>> res.classes, bool(res.delta > 0), bool(res.pvalue < 0.05)
    ((0, 1, 2), True, True)
    """
    y, ref, new, cls, alternative, level = _delong_macro_iv(
        y_labels, probs_ref, probs_new, classes, alternative, confidence_level
    )
    used, skipped, small = [], [], []
    for c in cls:
        m = int((y == c).sum())
        n = y.shape[0] - m
        if m == 0 or n == 0:
            skipped.append(c)
        else:
            used.append(c)
            if m < 2 or n < 2:
                small.append(c)
    if skipped:
        warn_degenerate(f"classes {skipped} have no positive or no negative frame; skipped")
    k = len(used)
    nan_k = np.full(k, np.nan)
    if k == 0:
        warn_degenerate("no class has both positive and negative frames; macro-AUC undefined")
        return DeLongMacroResult(
            _NAN,
            _NAN,
            _NAN,
            _NAN,
            _NAN,
            _NAN,
            NAN_CI,
            (),
            tuple(skipped),
            nan_k,
            nan_k,
            np.full((0, 0), np.nan),
            nan_k,
            nan_k,
            alternative,
        )
    auc = np.empty((2, k))  # (ref/new, K)
    phi = np.empty((k, y.shape[0]))  # (K, N) influence of each class's delta
    for i, c in enumerate(used):
        pos = y == c
        if c in small:
            auc[:, i] = placements(pos, np.stack([ref[:, c], new[:, c]]))[0]
            phi[i] = np.nan
        else:
            auc[:, i], psi = class_influence(pos, np.stack([ref[:, c], new[:, c]]))
            phi[i] = psi[1] - psi[0]
    if small:
        warn_degenerate(
            f"classes {small} have fewer than 2 positives or negatives; "
            "the DeLong variance is undefined"
        )
    cov = phi @ phi.T  # (K, K)
    deltas = auc[1] - auc[0]
    macro_ref, macro_new = float(auc[0].mean()), float(auc[1].mean())
    delta = macro_new - macro_ref
    var_delta = float(cov.sum() / k**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        diag = np.diag(cov)
        per_z = np.where(diag > _ZERO_VARIANCE, deltas / np.sqrt(diag), np.nan)
    per_p = np.array([z_pvalue(z, alternative) for z in per_z])
    if np.isfinite(var_delta) and var_delta > _ZERO_VARIANCE:
        se = np.sqrt(var_delta)
        z = delta / se
        p = z_pvalue(z, alternative)
        q = special.ndtri(0.5 + level / 2.0)
        ci = ConfidenceInterval(float(delta - q * se), float(delta + q * se))
    else:
        if np.isfinite(var_delta):
            warn_degenerate("the variance of the macro-AUC difference is zero; z is undefined")
        z, p, ci = _NAN, _NAN, NAN_CI
    return DeLongMacroResult(
        statistic=float(z),
        pvalue=p,
        macro_auc_ref=macro_ref,
        macro_auc_new=macro_new,
        delta=delta,
        variance_delta=var_delta,
        confidence_interval=ci,
        classes=tuple(used),
        skipped_classes=tuple(skipped),
        auc_ref=auc[0].copy(),
        auc_new=auc[1].copy(),
        covariance=cov,
        per_class_statistic=per_z,
        per_class_pvalue=per_p,
        alternative=alternative,
    )
