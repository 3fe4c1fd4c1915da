"""The Capsule Vision 2024 challenge's metrics, as its evaluation script defines them.

The challenge (``misahub2023/Capsule-Vision-2024-Challenge``,
``Sample_codes_for_participants/Eval_metrics_gen_excel.py``, ``generate_metrics_report``)
scores a prediction sheet (one probability per class) against one-hot labels:

- per-class ROC AUC of the class's probability column against its one-hot column; a class
  whose labels are all equal cannot be scored and counts **0.0** (the script catches the
  ``ValueError`` scikit-learn raised for it when the challenge ran; recent scikit-learn
  (1.9) returns NaN with a warning instead, which would make the script's mean NaN: pipi keeps
  the challenge's 0.0); the mean AUC is the plain mean over **all** classes (zeros included);
- per-class specificity ``TN / (TN + FP)`` of "the arg-max is this class" (0 without negatives);
- per-class sensitivity (recall) and F1 of the arg-max prediction (``zero_division=0``);
- per-class PR-AUC: the trapezoidal area under ``precision_recall_curve`` (``auc(recall,
  precision)``, not average precision); 0.0 where the curve cannot be computed;
- balanced accuracy of the arg-max (scikit-learn's: the mean recall over the classes that
  have true frames);
- teams were ranked on the mean of the mean AUC and the balanced accuracy (``combined``).

The same scikit-learn functions the script calls compute them here, so the figures match
the challenge's to the last bit. The script gets its class list from the sheet's columns
(``labels`` are all classes here: it fails where a class is neither true nor predicted).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipi.paths import metric_key

__all__ = ["CV2024_CLASSES", "CV2024Report", "cv2024_metrics"]


def _skm():
    """scikit-learn's metrics, imported when a metric is computed (1.2 s on 2 cores): the
    modules that import this one (training, ``pipi predict``) do not all score the challenge."""
    import sklearn.metrics

    return sklearn.metrics

#: The challenge's ten classes in its sheet's column order.
CV2024_CLASSES = ("Angioectasia", "Bleeding", "Erosion", "Erythema", "Foreign Body",
                  "Lymphangiectasia", "Normal", "Polyp", "Ulcer", "Worms")


@dataclass(frozen=True)
class CV2024Report:
    """``generate_metrics_report``'s figures: per class (in class order) and their means."""

    classes: tuple[str, ...]
    auc: tuple[float, ...]
    specificity: tuple[float, ...]
    sensitivity: tuple[float, ...]
    f1: tuple[float, ...]
    pr_auc: tuple[float, ...]
    balanced_accuracy: float

    @property
    def mean_auc(self) -> float:
        return float(np.mean(self.auc))

    @property
    def mean_specificity(self) -> float:
        return float(np.mean(self.specificity))

    @property
    def mean_sensitivity(self) -> float:
        return float(np.mean(self.sensitivity))

    @property
    def mean_f1(self) -> float:
        return float(np.mean(self.f1))

    @property
    def mean_pr_auc(self) -> float:
        return float(np.mean(self.pr_auc))

    @property
    def combined(self) -> float:
        """The challenge's ranking score: the mean of mean AUC and balanced accuracy."""
        return float((self.mean_auc + self.balanced_accuracy) / 2)

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat metric names: ``<prefix>/cv2024_mean_auc``, ``..._balanced_accuracy``,
        ``..._combined``, the other means and per class ``<prefix>/cv2024/<metric>/<class>``."""
        out = {f"{prefix}/cv2024_mean_auc": self.mean_auc,
               f"{prefix}/cv2024_balanced_accuracy": float(self.balanced_accuracy),
               f"{prefix}/cv2024_combined": self.combined,
               f"{prefix}/cv2024_mean_specificity": self.mean_specificity,
               f"{prefix}/cv2024_mean_sensitivity": self.mean_sensitivity,
               f"{prefix}/cv2024_mean_f1": self.mean_f1,
               f"{prefix}/cv2024_mean_pr_auc": self.mean_pr_auc}
        for name in ("auc", "specificity", "sensitivity", "f1", "pr_auc"):
            for c, v in zip(self.classes, getattr(self, name), strict=True):
                out[f"{prefix}/cv2024/{name}/{metric_key(c)}"] = float(v)
        return out


def _score_or_zero(fn, *args) -> float:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(fn(*args))
    except ValueError:
        return 0.0


def _pr_auc(y: np.ndarray, s: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no positive frame: recall is set to one
        precision, recall, _ = _skm().precision_recall_curve(y, s)
        return float(_skm().auc(recall, precision))


def cv2024_metrics(labels, probs, classes: Sequence[str]) -> CV2024Report:
    """The challenge's report of ``probs`` (N, K) against true class indices ``labels`` (N,)
    (or one-hot (N, K), whose arg-max is the true class); ``classes`` name the K columns."""
    probs = np.asarray(probs, np.float64)
    labels = np.asarray(labels)
    k = len(classes)
    if probs.ndim != 2 or probs.shape[1] != k:
        raise ValueError(f"probs must be (N, {k}), got {probs.shape}")
    onehot = labels if labels.ndim == 2 else np.eye(k, dtype=np.int64)[labels.astype(np.int64)]
    y = onehot.argmax(1)
    pred = probs.argmax(1)
    aucs = tuple(_score_or_zero(_skm().roc_auc_score, onehot[:, i], probs[:, i])
                 if len(np.unique(onehot[:, i])) == 2 else 0.0 for i in range(k))
    spec = []
    for i in range(k):
        neg = onehot[:, i] == 0
        tn, fp = int(np.sum(neg & (pred != i))), int(np.sum(neg & (pred == i)))
        spec.append(tn / (tn + fp) if tn + fp > 0 else 0.0)
    every = list(range(k))
    sens = _skm().recall_score(y, pred, labels=every, average=None, zero_division=0)
    f1 = _skm().f1_score(y, pred, labels=every, average=None, zero_division=0)
    pr = tuple(_score_or_zero(_pr_auc, onehot[:, i], probs[:, i]) for i in range(k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # predicted classes absent from the labels
        bacc = float(_skm().balanced_accuracy_score(y, pred)) if len(y) else float("nan")
    return CV2024Report(tuple(classes), aucs, tuple(spec), tuple(float(v) for v in sens),
                        tuple(float(v) for v in f1), pr, bacc)
