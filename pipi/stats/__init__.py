"""Statistics for comparing arms: DeLong, bootstrap (the video-clustered one of ``aggregate``
included), permutation, paired tests, corrections, calibration, operating points and curves.

numpy/scipy only, no I/O. Data first, options keyword-only, ``rng`` explicit; tests and
intervals return frozen results with ``statistic``, ``pvalue`` and ``confidence_interval``
(a :class:`ConfidenceInterval`). Sign convention everywhere: delta = new - reference and
z > 0 when the new arm is better. Degenerate input gives NaN and a
:class:`DegenerateDataWarning`.
"""

from pipi.stats._results import (
    AUCConfidenceResult,
    BootstrapResult,
    CalibrationResult,
    ClassStoufferResult,
    ConfidenceInterval,
    DegenerateDataWarning,
    DeLongMacroResult,
    DeLongResult,
    DeltaBootstrapResult,
    McNemarResult,
    OperatingPoint,
    OperatingPointsResult,
    SignFlipResult,
    StoufferResult,
    WilcoxonResult,
)
from pipi.stats.auc import macro_auc, per_class_auc
from pipi.stats.bootstrap import (
    METHODS,
    UNITS,
    bca_constants,
    bootstrap_ci,
    bootstrap_intervals,
)
from pipi.stats.calibration import brier_score, expected_calibration_error
from pipi.stats.combine import stouffer_combine, stouffer_over_classes
from pipi.stats.curves import (
    ROC_GRID,
    confusion_matrix,
    mean_pr,
    mean_roc,
    pooled_pr,
    pr_points,
    row_normalise,
)
from pipi.stats.delong import delong_ci, delong_macro_test, delong_test
from pipi.stats.delta_bootstrap import (
    MIN_VIDEOS_CLASS,
    MIN_VIDEOS_MACRO,
    RESAMPLE,
    PairedAUCBootstrap,
    macro_auc_delta_bootstrap,
    pair_counts,
)
from pipi.stats.multiple import (
    ADJUST_METHODS,
    AdjustedFamily,
    Family,
    adjust_families,
    adjust_pvalues,
    significance_marker,
)
from pipi.stats.operating import (
    average_precision,
    fpr_at_sensitivity,
    operating_points,
    roc_points,
    sensitivity_at_fpr,
)
from pipi.stats.paired_arms import (
    PVALUE_KINDS,
    ArmComparison,
    ClassDelta,
    PairedDeltas,
    RatioBootstrapResult,
    compare_arms,
    evaluable_classes,
    ratio_bootstrap,
)
from pipi.stats.permutation import sign_flip_test
from pipi.stats.seed_bca import SeedBCaResult, seed_delta_bca
from pipi.stats.tests_paired import MCNEMAR_EXACT_BELOW, mcnemar_test, paired_wilcoxon

__all__ = [
    "ADJUST_METHODS",
    "MCNEMAR_EXACT_BELOW",
    "METHODS",
    "MIN_VIDEOS_CLASS",
    "MIN_VIDEOS_MACRO",
    "PVALUE_KINDS",
    "RESAMPLE",
    "ROC_GRID",
    "UNITS",
    "AUCConfidenceResult",
    "AdjustedFamily",
    "ArmComparison",
    "BootstrapResult",
    "CalibrationResult",
    "ClassDelta",
    "ClassStoufferResult",
    "ConfidenceInterval",
    "DeLongMacroResult",
    "DeLongResult",
    "DegenerateDataWarning",
    "DeltaBootstrapResult",
    "Family",
    "McNemarResult",
    "OperatingPoint",
    "OperatingPointsResult",
    "PairedAUCBootstrap",
    "PairedDeltas",
    "RatioBootstrapResult",
    "SeedBCaResult",
    "SignFlipResult",
    "StoufferResult",
    "WilcoxonResult",
    "adjust_families",
    "adjust_pvalues",
    "average_precision",
    "bca_constants",
    "bootstrap_ci",
    "bootstrap_intervals",
    "brier_score",
    "compare_arms",
    "confusion_matrix",
    "delong_ci",
    "delong_macro_test",
    "delong_test",
    "evaluable_classes",
    "expected_calibration_error",
    "fpr_at_sensitivity",
    "macro_auc",
    "macro_auc_delta_bootstrap",
    "mcnemar_test",
    "mean_pr",
    "mean_roc",
    "operating_points",
    "pair_counts",
    "paired_wilcoxon",
    "per_class_auc",
    "pooled_pr",
    "pr_points",
    "ratio_bootstrap",
    "roc_points",
    "row_normalise",
    "seed_delta_bca",
    "sensitivity_at_fpr",
    "sign_flip_test",
    "significance_marker",
    "stouffer_combine",
    "stouffer_over_classes",
]
