"""Frozen result objects shared by every function of :mod:`pipi.stats`.

Field names are the same everywhere (scipy's shape): ``statistic``, ``pvalue`` and
``confidence_interval`` (a :class:`ConfidenceInterval`). Sign convention: every delta is
``new - reference`` and every z-score is positive when the new arm is better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class DegenerateDataWarning(RuntimeWarning):
    """The data do not define the statistic (one class, zero variance); NaN is returned."""


class ConfidenceInterval(NamedTuple):
    """A two-sided confidence interval."""

    low: float
    high: float


NAN_CI = ConfidenceInterval(float("nan"), float("nan"))


@dataclass(frozen=True)
class DeLongResult:
    """Paired DeLong test of two AUCs on the same frames (:func:`pipi.stats.delong_test`).

    ``statistic`` is z = delta / sqrt(variance_delta) with delta = auc_new - auc_ref;
    ``confidence_interval`` is the Wald interval of delta.
    """

    statistic: float
    pvalue: float
    auc_ref: float
    auc_new: float
    delta: float
    variance_ref: float
    variance_new: float
    covariance: float
    variance_delta: float
    confidence_interval: ConfidenceInterval
    n_positive: int
    n_negative: int
    alternative: str


@dataclass(frozen=True)
class AUCConfidenceResult:
    """DeLong confidence interval of one AUC (:func:`pipi.stats.delong_ci`).

    ``statistic`` is the AUC; the interval is clipped to [0, 1] as pROC does.
    """

    statistic: float
    variance: float
    standard_error: float
    confidence_interval: ConfidenceInterval
    confidence_level: float
    n_positive: int
    n_negative: int


@dataclass(frozen=True)
class DeLongMacroResult:
    """Paired DeLong test of two macro-AUCs over one-vs-rest classes (:func:`delong_macro_test`).

    ``statistic`` is z of the macro delta. Per-class arrays follow ``classes`` (the column
    indices actually evaluated); ``covariance`` is the (K, K) covariance matrix of the
    per-class AUC deltas, whose diagonal is each class's paired DeLong variance.
    """

    statistic: float
    pvalue: float
    macro_auc_ref: float
    macro_auc_new: float
    delta: float
    variance_delta: float
    confidence_interval: ConfidenceInterval
    classes: tuple[int, ...]
    skipped_classes: tuple[int, ...]
    auc_ref: np.ndarray  # (K,)
    auc_new: np.ndarray  # (K,)
    covariance: np.ndarray  # (K, K) covariance of per-class deltas
    per_class_statistic: np.ndarray  # (K,) per-class paired DeLong z
    per_class_pvalue: np.ndarray  # (K,)
    alternative: str


@dataclass(frozen=True)
class ClassStoufferResult:
    """The published code's macro paired z (:func:`pipi.stats.stouffer_over_classes`):
    per-class DeLong z combined over seeds, then over classes, both by Stouffer."""

    statistic: float
    pvalue: float
    per_class_statistic: np.ndarray  # (K,) Stouffer over seeds of each class's z
    n_seeds: np.ndarray              # (K,) seeds with a finite z per class
    n_classes: int                   # classes in the combination (finite per-class z)
    alternative: str
    #: What the p-value assumes; neither holds for classes and seeds of one test set.
    assumption: str = (
        "independent per-class z-scores and independent seeds. The classes share frames (a "
        "positive of one class is a negative of the others) and the seeds share the test set, "
        "so the z-scores are correlated and this p-value is anti-conservative; the per-seed "
        "macro DeLong z (delong_macro_test) carries the class covariance instead.")


@dataclass(frozen=True)
class StoufferResult:
    """Stouffer combination of per-seed z-scores (:func:`pipi.stats.stouffer_combine`)."""

    statistic: float
    pvalue: float
    n: int
    alternative: str
    #: The assumption the p-value rests on; it is violated when seeds share a test set.
    assumption: str = (
        "independent z-scores (independent seeds). Seeds evaluated on the same test frames "
        "give positively correlated z-scores, which makes this p-value anti-conservative; "
        "see sign_flip_test / macro_auc_delta_bootstrap for cross-seed alternatives."
    )


@dataclass(frozen=True)
class SignFlipResult:
    """Sign-flip permutation test of a mean of paired deltas (:func:`sign_flip_test`)."""

    statistic: float
    pvalue: float
    exact: bool
    n_resamples: int
    null_distribution: np.ndarray
    alternative: str


@dataclass(frozen=True)
class WilcoxonResult:
    """Wilcoxon signed-rank test of paired deltas (:func:`pipi.stats.paired_wilcoxon`)."""

    statistic: float
    pvalue: float
    n: int
    method: str
    alternative: str


@dataclass(frozen=True)
class McNemarResult:
    """McNemar test on per-frame correctness of two classifiers (:func:`mcnemar_test`).

    ``ref_only`` counts frames only the reference gets right, ``new_only`` frames only the
    new arm gets right. ``statistic`` is ``new_only`` for the exact binomial test and the
    continuity-corrected chi-square statistic otherwise; ``delta`` = accuracy(new) -
    accuracy(ref).
    """

    statistic: float
    pvalue: float
    method: str
    ref_only: int
    new_only: int
    delta: float
    n: int


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap confidence intervals (:func:`pipi.stats.bootstrap_ci`).

    ``confidence_interval`` is the interval of ``method``; both the percentile and the BCa
    intervals are always given, with BCa's bias correction ``z0`` and acceleration ``a``.
    """

    statistic: float
    confidence_interval: ConfidenceInterval
    percentile_interval: ConfidenceInterval
    bca_interval: ConfidenceInterval
    bias_correction: float  # z0
    acceleration: float  # a
    standard_error: float
    bootstrap_distribution: np.ndarray  # (n_resamples,)
    jackknife_values: np.ndarray  # (n_units,) leave-one-unit-out statistics
    confidence_level: float
    method: str
    unit: str
    n_resamples: int


@dataclass(frozen=True)
class DeltaBootstrapResult(BootstrapResult):
    """Bootstrap of a paired AUC delta (or of a ratio of two deltas) under test-set resamples:
    :meth:`pipi.stats.PairedAUCBootstrap.delta` / ``ratio`` and its view
    :func:`pipi.stats.macro_auc_delta_bootstrap`.

    A :class:`BootstrapResult` whose ``unit`` is ``videos``, ``frames`` or ``frames
    (stratified by class)``; ``pvalue`` is the two-sided percentile-bootstrap p-value of
    delta = 0, ``min(1, 2 * min(#{d* <= 0} + 1, #{d* >= 0} + 1) / (B + 1))`` (NaN for a
    ratio); ``n_units`` counts the units resampled; ``n_redrawn`` the resamples drawn again
    because they lost every positive (or negative) frame of a class; ``classes`` is the
    fixed class set and ``n_seeds`` the number of seed pairs averaged.
    """

    pvalue: float = float("nan")
    n_units: int = 0
    n_redrawn: int = 0
    classes: tuple[int, ...] = ()
    n_seeds: int = 0


@dataclass(frozen=True)
class CalibrationResult:
    """A per-class calibration metric (ECE or Brier) and its mean over classes.

    ``statistic`` is the mean of ``per_class`` over ``classes``; ``multiclass`` is the
    multi-class Brier score (sum over all K columns, mean over frames) or NaN for ECE.
    """

    statistic: float
    per_class: np.ndarray  # (K,)
    classes: tuple[int, ...]
    multiclass: float
    n_bins: int | None


@dataclass(frozen=True)
class OperatingPoint:
    """One point of a ROC curve: predict positive when ``score >= threshold``."""

    threshold: float
    sensitivity: float
    fpr: float


@dataclass(frozen=True)
class OperatingPointsResult:
    """Per-class operating points (:func:`pipi.stats.operating_points`).

    ``sensitivity_at_fpr[k, j]`` is the sensitivity of class ``classes[k]`` at target
    ``fpr_targets[j]``; ``fpr_at_sensitivity[k]`` the smallest FPR reaching
    ``sensitivity_target``.
    """

    classes: tuple[int, ...]
    auc: np.ndarray  # (K,)
    average_precision: np.ndarray  # (K,)
    fpr_targets: tuple[float, ...]
    sensitivity_at_fpr: np.ndarray  # (K, len(fpr_targets))
    threshold_at_fpr: np.ndarray  # (K, len(fpr_targets))
    sensitivity_target: float
    fpr_at_sensitivity: np.ndarray  # (K,)
    threshold_at_sensitivity: np.ndarray  # (K,)
