"""One-vs-rest AUC metrics: per-class AUCs and their macro mean.

These are metrics, not tests: they return plain floats/arrays so that they can serve as
cheap bootstrap statistics.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from pipi.stats._common import class_labels_and_probs, warn_degenerate

__all__ = ["macro_auc", "per_class_auc"]


def per_class_auc(y_labels, probs, *, classes=None) -> np.ndarray:
    """One-vs-rest ROC-AUC of each class (Mann-Whitney, ties count 1/2).

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot array, shape (N, C)
        True class index (column of `probs`) of every frame.
    probs : array_like, shape (N, C)
        Class scores (higher = more likely that class).
    classes : sequence of int, optional
        Columns to evaluate, in output order (default: all C).

    Returns
    -------
    ndarray, shape (len(classes),)
        AUC of class k against all other frames; NaN (with a ``DegenerateDataWarning``) for
        a class with no positive or no negative frame.

    References
    ----------
    .. [1] J. A. Hanley and B. J. McNeil, "The meaning and use of the area under a receiver
       operating characteristic (ROC) curve", Radiology 143(1):29-36, 1982.

    Examples
    --------
    >>> from pipi.stats import per_class_auc
    >>> per_class_auc([0, 1, 1, 2], [[.5, .4, .1], [.2, .5, .3], [.5, .3, .2], [.1, .2, .7]])
    array([0.83333333, 0.75      , 1.        ])
    """
    y, p, cls = class_labels_and_probs(y_labels, probs, classes)
    out = np.full(len(cls), np.nan)
    ranks = stats.rankdata(p[:, list(cls)], axis=0)  # (N, K) midranks per column
    missing = []
    for i, c in enumerate(cls):
        pos = y == c
        m = int(pos.sum())
        n = y.shape[0] - m
        if m == 0 or n == 0:
            missing.append(c)
            continue
        out[i] = (ranks[pos, i].sum() - m * (m + 1) / 2.0) / (m * n)
    if missing:
        warn_degenerate(f"classes {missing} have no positive or no negative frame; AUC is NaN")
    return out


def macro_auc(y_labels, probs, *, classes=None) -> float:
    """Unweighted mean of the one-vs-rest AUCs of the classes that can be scored.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,), or one-hot array, shape (N, C)
    probs : array_like, shape (N, C)
    classes : sequence of int, optional
        Columns to average over (default: all C). Classes without positive or negative
        frames are left out of the mean with a ``DegenerateDataWarning``.

    Returns
    -------
    float
        The macro-AUC (NaN if no class can be scored).

    References
    ----------
    .. [1] J. A. Hanley and B. J. McNeil, Radiology 143(1):29-36, 1982.

    Examples
    --------
    >>> from pipi.stats import macro_auc
    >>> macro_auc([0, 1, 1, 2], [[.5, .4, .1], [.2, .5, .3], [.5, .3, .2], [.1, .2, .7]])
    0.8611111111111112
    """
    aucs = per_class_auc(y_labels, probs, classes=classes)
    if np.isnan(aucs).all():
        return float("nan")
    return float(np.nanmean(aucs))
