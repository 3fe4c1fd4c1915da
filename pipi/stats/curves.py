"""ROC and precision-recall curves and confusion matrices (the data of ``aggregate``'s figures).

Micro-averaged one-vs-rest curves pool the labels of every (frame, class) pair into one
binary problem and average the seeds' curves on a common grid; per-class curves pool the
frames of every seed (the paper's PR figure).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipi.stats.operating import average_precision, roc_points

__all__ = ["ROC_GRID", "confusion_matrix", "mean_pr", "mean_roc", "pooled_pr", "pr_points",
           "row_normalise"]

#: FPR (ROC) and recall (PR) grid of the averaged curves.
ROC_GRID = np.linspace(0.0, 1.0, 201)


def _micro(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int]):
    y = (labels[:, None] == np.asarray(classes)[None, :]).ravel()
    return y, probs[:, list(classes)].astype(np.float64).ravel()


def mean_roc(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int],
             grid: np.ndarray = ROC_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd over seeds of the micro-averaged one-vs-rest ROC (TPR on an FPR grid).

    ``probs`` (S, N, C). At each grid FPR x the step ROC's TPR is that of the last point with
    FPR <= x.
    """
    tprs = []
    for p in probs:
        fpr, tpr, _ = roc_points(*_micro(labels, p, classes))
        tprs.append(tpr[np.searchsorted(fpr, grid, side="right") - 1])
    t = np.stack(tprs)
    return t.mean(0), (t.std(0, ddof=1) if len(t) > 1 else np.zeros_like(grid))


def pr_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recall and precision at every distinct threshold (decreasing), starting at recall 0."""
    order = np.argsort(-s, kind="stable")
    ss, yy = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(ss) != 0), ss.size - 1]
    tp = np.cumsum(yy)[last]
    prec = tp / (last + 1)
    rec = tp / max(int(y.sum()), 1)
    return np.r_[0.0, rec], np.r_[prec[0] if prec.size else 1.0, prec]


def mean_pr(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int],
            grid: np.ndarray = ROC_GRID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and sd over seeds of the micro-averaged interpolated precision on a recall grid,
    and the per-seed micro average precision. Interpolated precision at recall r is the
    largest precision at any recall >= r."""
    precs, aps = [], []
    for p in probs:
        y, s = _micro(labels, p, classes)
        rec, prec = pr_points(y, s)
        interp = np.maximum.accumulate(prec[::-1])[::-1]
        idx = np.minimum(np.searchsorted(rec, grid, side="left"), rec.size - 1)
        precs.append(interp[idx])
        aps.append(average_precision(y, s))
    t = np.stack(precs)
    return t.mean(0), (t.std(0, ddof=1) if len(t) > 1 else np.zeros_like(grid)), np.array(aps)



def pooled_pr(labels: np.ndarray, probs: np.ndarray, k: int,
              grid: np.ndarray = ROC_GRID) -> tuple[np.ndarray, float]:
    """Precision-recall of class k with the frames of every seed pooled (the paper's figure).

    ``probs`` (S, N, C): the S seeds' frames are stacked into one one-vs-rest problem of
    S x N frames. Returns the interpolated precision (largest precision at recall >= r) on
    the recall ``grid`` and the average precision of the pooled frames.
    """
    s = np.asarray(probs)[:, :, k].astype(np.float64).ravel()
    y = np.tile(np.asarray(labels) == k, len(probs))
    rec, prec = pr_points(y, s)
    interp = np.maximum.accumulate(prec[::-1])[::-1]
    idx = np.minimum(np.searchsorted(rec, grid, side="left"), rec.size - 1)
    return interp[idx], float(average_precision(y, s))


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray,
                     classes: Sequence[int]) -> np.ndarray:
    """Counts (K, K + 1): rows true class, columns predicted class; the last column counts
    predictions outside ``classes``. Frames whose true class is outside ``classes`` are
    left out."""
    cls = [int(c) for c in classes]
    where = {c: i for i, c in enumerate(cls)}
    out = np.zeros((len(cls), len(cls) + 1), dtype=np.int64)
    for t, p in zip(np.asarray(labels).tolist(), np.asarray(predicted).tolist(), strict=True):
        if t in where:
            out[where[t], where.get(p, len(cls))] += 1
    return out


def row_normalise(counts: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (rows of zeros stay zero)."""
    tot = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, tot, out=np.zeros(counts.shape, dtype=float), where=tot > 0)
