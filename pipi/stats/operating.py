"""ROC operating points and average precision, per class one-vs-rest.

Convention: a frame is called positive when ``score >= threshold``. The ROC curve has one
point per distinct score (thresholds in decreasing order) plus the point (0, 0) at
threshold +inf; no intermediate point is dropped.
"""

from __future__ import annotations

import numpy as np

from pipi.errors import ConfigError
from pipi.stats._common import binary_labels, class_labels_and_probs, scores_1d, warn_degenerate
from pipi.stats._results import OperatingPoint, OperatingPointsResult
from pipi.stats.auc import per_class_auc

__all__ = [
    "average_precision",
    "fpr_at_sensitivity",
    "operating_points",
    "roc_points",
    "sensitivity_at_fpr",
]

_NAN_POINT = OperatingPoint(float("nan"), float("nan"), float("nan"))


def _counts(y_true, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Cumulative (tp, fp) at each distinct threshold, decreasing; plus (m, n)."""
    pos = binary_labels(y_true)
    s = scores_1d(scores, pos.size, "scores")
    order = np.argsort(-s, kind="stable")
    s_sorted, pos_sorted = s[order], pos[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), s_sorted.size - 1]  # end of tie groups
    tp = np.cumsum(pos_sorted)[last]
    fp = (last + 1) - tp
    return tp, fp, s_sorted[last], int(pos.sum()), int((~pos).sum())


def roc_points(y_true, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ROC point of a binary score (the empirical ROC curve).

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
    scores : array_like, shape (N,)

    Returns
    -------
    fpr, tpr, thresholds : ndarray, shape (T + 1,)
        One point per distinct score (decreasing thresholds), after the point (0, 0) at
        threshold +inf. NaN rates (with a ``DegenerateDataWarning``) when a class is absent.

    References
    ----------
    .. [1] T. Fawcett, "An introduction to ROC analysis", Pattern Recognition Letters
       27(8):861-874, 2006.

    Examples
    --------
    >>> from pipi.stats import roc_points
    >>> fpr, tpr, thr = roc_points([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    >>> fpr, tpr
    (array([0. , 0. , 0.5, 0.5, 1. ]), array([0. , 0.5, 0.5, 1. , 1. ]))
    """
    tp, fp, thr, m, n = _counts(y_true, scores)
    if m == 0 or n == 0:
        warn_degenerate(f"a ROC curve needs both classes; got {m} positives and {n} negatives")
    with np.errstate(invalid="ignore", divide="ignore"):
        fpr = np.r_[0.0, fp / n] if n else np.full(tp.size + 1, np.nan)
        tpr = np.r_[0.0, tp / m] if m else np.full(tp.size + 1, np.nan)
    return fpr, tpr, np.r_[np.inf, thr]


def _rate_iv(value: float, name: str) -> float:
    """A rate in [0, 1]."""
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
    return v


def sensitivity_at_fpr(y_true, scores, *, max_fpr: float) -> OperatingPoint:
    """Sensitivity at the ROC point with the largest FPR not above `max_fpr`.

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
    scores : array_like, shape (N,)
    max_fpr : float
        FPR budget, e.g. 0.05.

    Returns
    -------
    OperatingPoint
        ``threshold`` (+inf if even the highest score exceeds the budget), ``sensitivity``
        (TPR) and the achieved ``fpr`` <= max_fpr. Among points with that FPR, the one with
        the highest sensitivity (lowest threshold). NaN if a class is absent.

    References
    ----------
    .. [1] T. Fawcett, Pattern Recognition Letters 27(8):861-874, 2006.

    Examples
    --------
    >>> from pipi.stats import sensitivity_at_fpr
    >>> sensitivity_at_fpr([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], max_fpr=0.25)
    OperatingPoint(threshold=0.8, sensitivity=0.5, fpr=0.0)
    """
    budget = _rate_iv(max_fpr, "max_fpr")
    fpr, tpr, thr = roc_points(y_true, scores)
    if np.isnan(fpr).any() or np.isnan(tpr).any():
        return _NAN_POINT
    i = int(np.flatnonzero(fpr <= budget)[-1])  # fpr, tpr non-decreasing along the curve
    return OperatingPoint(float(thr[i]), float(tpr[i]), float(fpr[i]))


def fpr_at_sensitivity(y_true, scores, *, min_sensitivity: float = 0.9) -> OperatingPoint:
    """Smallest FPR of a ROC point whose sensitivity reaches `min_sensitivity`.

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
    scores : array_like, shape (N,)
    min_sensitivity : float, optional
        Target sensitivity (TPR), e.g. 0.9.

    Returns
    -------
    OperatingPoint
        The first point (highest threshold) with TPR >= target; NaN if a class is absent.

    References
    ----------
    .. [1] T. Fawcett, Pattern Recognition Letters 27(8):861-874, 2006.

    Examples
    --------
    >>> from pipi.stats import fpr_at_sensitivity
    >>> fpr_at_sensitivity([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], min_sensitivity=0.9)
    OperatingPoint(threshold=0.35, sensitivity=1.0, fpr=0.5)
    """
    target = _rate_iv(min_sensitivity, "min_sensitivity")
    fpr, tpr, thr = roc_points(y_true, scores)
    if np.isnan(fpr).any() or np.isnan(tpr).any():
        return _NAN_POINT
    i = int(np.flatnonzero(tpr >= target)[0])  # tpr reaches 1 at the last point
    return OperatingPoint(float(thr[i]), float(tpr[i]), float(fpr[i]))


def average_precision(y_true, scores) -> float:
    """Average precision: sum over thresholds of (R_t - R_{t-1}) P_t.

    Parameters
    ----------
    y_true : array_like of {0, 1} or bool, shape (N,)
    scores : array_like, shape (N,)

    Returns
    -------
    float
        Step-wise area under the precision-recall curve (no interpolation), with
        thresholds at the distinct scores in decreasing order and R_0 = 0. NaN with a
        ``DegenerateDataWarning`` when there is no positive frame.

    References
    ----------
    .. [1] M. Zhu, "Recall, precision and average precision", University of Waterloo
       Working Paper 09, 2004.

    Examples
    --------
    >>> from pipi.stats import average_precision
    >>> round(average_precision([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 4)
    0.8333
    """
    tp, fp, _, m, _ = _counts(y_true, scores)
    if m == 0:
        warn_degenerate("average precision needs at least one positive frame")
        return float("nan")
    recall = tp / m
    precision = tp / (tp + fp)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def operating_points(
    y_labels,
    probs,
    *,
    classes=None,
    fpr_targets: tuple[float, ...] = (0.05, 0.10),
    sensitivity_target: float = 0.90,
) -> OperatingPointsResult:
    """Per-class one-vs-rest operating points, AUC and average precision.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot (N, C)
    probs : array_like, shape (N, C)
    classes : sequence of int, optional
        Classes to evaluate (default all C).
    fpr_targets : tuple of float, optional
        FPR budgets of :func:`sensitivity_at_fpr` (the paper: 5 % and 10 %).
    sensitivity_target : float, optional
        Target of :func:`fpr_at_sensitivity` (the paper: 90 %).

    Returns
    -------
    OperatingPointsResult
        Per-class arrays (NaN, with a warning, for a class without positives or negatives).

    References
    ----------
    .. [1] T. Fawcett, Pattern Recognition Letters 27(8):861-874, 2006.

    Examples
    --------
    >>> from pipi.stats import operating_points
    >>> y, p = [0, 1, 1, 2], [[.5, .4, .1], [.2, .5, .3], [.5, .3, .2], [.1, .2, .7]]
    >>> res = operating_points(y, p)
    >>> res.sensitivity_at_fpr[:, 0], res.fpr_at_sensitivity
    (array([0. , 0.5, 1. ]), array([0.33333333, 0.5       , 0.        ]))
    """
    y, p, cls = class_labels_and_probs(y_labels, probs, classes)
    targets = tuple(_rate_iv(t, "fpr_targets") for t in fpr_targets)
    sens_target = _rate_iv(sensitivity_target, "sensitivity_target")
    k = len(cls)
    sens = np.full((k, len(targets)), np.nan)
    thr_f = np.full((k, len(targets)), np.nan)
    fpr_s = np.full(k, np.nan)
    thr_s = np.full(k, np.nan)
    ap = np.full(k, np.nan)
    auc = per_class_auc(y, p, classes=cls)  # warns once for degenerate classes
    for i, c in enumerate(cls):
        pos = y == c
        if pos.all() or not pos.any():
            continue
        for j, t in enumerate(targets):
            pt = sensitivity_at_fpr(pos, p[:, c], max_fpr=t)
            sens[i, j], thr_f[i, j] = pt.sensitivity, pt.threshold
        pt = fpr_at_sensitivity(pos, p[:, c], min_sensitivity=sens_target)
        fpr_s[i], thr_s[i] = pt.fpr, pt.threshold
        ap[i] = average_precision(pos, p[:, c])
    return OperatingPointsResult(cls, auc, ap, targets, sens, thr_f, sens_target, fpr_s, thr_s)
