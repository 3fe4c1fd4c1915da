"""Calibration metrics: one-vs-rest expected calibration error and Brier scores."""

from __future__ import annotations

import numpy as np

from pipi.errors import ConfigError, DataError
from pipi.stats._common import class_labels_and_probs
from pipi.stats._results import CalibrationResult

__all__ = ["bin_edges", "brier_score", "expected_calibration_error"]


def bin_edges(n_bins: int) -> np.ndarray:
    """The n_bins + 1 equal-width edges b / n_bins on [0, 1].

    Computed as a division (correctly rounded), not as ``linspace``'s b * (1 / n_bins), so
    that a probability such as 0.3 falls in the bin [3/10, 4/10) it belongs to.
    """
    return np.arange(n_bins + 1) / n_bins


def _probs_iv(y_labels, probs, classes):
    """Validate labels/probabilities in [0, 1] for calibration metrics."""
    y, p, cls = class_labels_and_probs(y_labels, probs, classes)
    if ((p < 0) | (p > 1)).any():
        raise DataError("probs must be probabilities in [0, 1] (apply softmax to logits first)")
    if y.size == 0:
        raise DataError("no frames")
    return y, p, cls


def expected_calibration_error(
    y_labels, probs, *, n_bins: int = 15, classes=None
) -> CalibrationResult:
    """One-vs-rest expected calibration error per class, with equal-width bins.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot (N, C)
    probs : array_like, shape (N, C)
        Predicted class probabilities in [0, 1].
    n_bins : int, optional
        Number of equal-width bins on [0, 1] (the paper uses 15).
    classes : sequence of int, optional
        Classes to evaluate and average over (default all C).

    Returns
    -------
    CalibrationResult
        ``per_class[k]`` = ECE of class ``classes[k]``, ``statistic`` = their mean,
        ``multiclass`` = NaN.

    Notes
    -----
    For class k with confidences p_i = probs[i, k] and outcomes o_i = 1[y_i = k], frame i
    falls in bin b (0-based) when e_b <= p_i < e_{b+1}, e_b = b / n_bins, the last bin
    being closed (p = 1 falls in it). Then

        ECE_k = sum_b (|B_b| / N) |mean_{i in B_b} o_i - mean_{i in B_b} p_i|,

    empty bins contributing 0. Every frame counts in every class (one-vs-rest), so a
    class's ECE weighs its many confident negatives as well as its positives.

    References
    ----------
    .. [1] M. P. Naeini, G. F. Cooper and M. Hauskrecht, "Obtaining well calibrated
       probabilities using Bayesian binning", AAAI 2015.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On calibration of modern neural
       networks", ICML 2017.
    .. [3] J. Nixon et al., "Measuring calibration in deep learning", CVPR Workshops 2019
       (per-class calibration error).

    Examples
    --------
    >>> from pipi.stats import expected_calibration_error
    >>> res = expected_calibration_error([0, 1, 1, 0], [[.9, .1], [.2, .8], [.6, .4], [.7, .3]])
    >>> res.per_class.round(4)
    array([0.3, 0.3])
    """
    if int(n_bins) != n_bins or n_bins < 1:
        raise ConfigError(f"n_bins must be a positive integer, got {n_bins!r}")
    y, p, cls = _probs_iv(y_labels, probs, classes)
    edges = bin_edges(int(n_bins))
    n = y.size
    ece = np.empty(len(cls))
    for i, c in enumerate(cls):
        conf = p[:, c]
        outcome = (y == c).astype(float)
        b = np.digitize(conf, edges[1:-1], right=False)  # 0..n_bins-1, last bin closed
        gap = np.bincount(b, outcome - conf, minlength=n_bins)  # sum of (o - p) per bin
        ece[i] = np.abs(gap).sum() / n  # |B| * |mean gap| / N == |sum gap| / N
    return CalibrationResult(float(ece.mean()), ece, cls, float("nan"), int(n_bins))


def brier_score(y_labels, probs, *, classes=None) -> CalibrationResult:
    """One-vs-rest Brier score per class and the multi-class Brier score.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot (N, C)
    probs : array_like, shape (N, C)
        Predicted class probabilities in [0, 1].
    classes : sequence of int, optional
        Classes for ``per_class`` and its mean (default all C).

    Returns
    -------
    CalibrationResult
        ``per_class[k]`` = mean_i (probs[i, k] - 1[y_i = k])^2 (the binary Brier score of
        class ``classes[k]`` one-vs-rest), ``statistic`` = their mean, ``multiclass`` =
        mean_i sum_{j=1..C} (probs[i, j] - 1[y_i = j])^2 over all C columns (Brier's
        original definition, range [0, 2]).

    References
    ----------
    .. [1] G. W. Brier, "Verification of forecasts expressed in terms of probability",
       Monthly Weather Review 78(1):1-3, 1950.

    Examples
    --------
    >>> from pipi.stats import brier_score
    >>> res = brier_score([0, 1], [[.8, .2], [.4, .6]])
    >>> res.per_class.round(4), round(res.multiclass, 4)
    (array([0.1, 0.1]), 0.2)
    """
    y, p, cls = _probs_iv(y_labels, probs, classes)
    onehot = np.zeros_like(p)
    onehot[np.arange(y.size), y] = 1.0
    sq = (p - onehot) ** 2  # (N, C)
    per_class = sq[:, list(cls)].mean(axis=0)
    return CalibrationResult(
        float(per_class.mean()), per_class, cls, float(sq.sum(axis=1).mean()), None
    )
