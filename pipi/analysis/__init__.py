"""Analysis: arms, run selection, evidence loading and comparisons (pure; no mlflow).

    select_runs -> build_evidence -> tidy_metrics -> aggregate_over_seeds
                                  -> Analysis -> compare_cells / compare_pairs

Every number is recomputed from the runs' per-frame predictions; arms are paired by seed on
identical test frames; runs of different data digests or class lists are refused.
"""

from pipi.analysis.arms import (
    ABLATION_CELLS,
    BACKBONES,
    BREAKDOWN_PAIRS,
    CELL_LABELS,
    CHANNEL_FAMILIES,
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    CHANNEL_TRAIN_VS_RGB,
    CLASS_STOUFFER_LABEL,
    FIGURE_PAIR,
    FOCAL_CLASSES,
    HEADLINE_BACKBONE,
    OTHER_STUDIES,
    PAIRED_TESTS,
    PER_CLASS_PAPER,
    PER_CLASS_TABLES,
    PER_FRAME_CELLS,
    PI_TTA_ARMS,
    PI_TTA_PAPER,
    PR_FOCAL_CLASSES,
    STOUFFER_LABEL,
    cell_label,
    is_mechanism_arm,
)
from pipi.analysis.compare import (
    ADJUSTED_TESTS,
    Analysis,
    Comparison,
    adjust_comparisons,
    collect_warnings,
    compare_cells,
    compare_pairs,
    missing_notes,
    seeds_text,
)
from pipi.analysis.evidence import ArmEvidence, Evidence, build_evidence
from pipi.analysis.options import AggregateOptions
from pipi.analysis.recipes import check_recipes, recipe_signatures
from pipi.analysis.selection import (
    check_single_dataset,
    mark_imported,
    mixed_profile_note,
    reason_kind,
    select_runs,
)
from pipi.analysis.tidy import aggregate_over_seeds, tidy_metrics

__all__ = [
    "ABLATION_CELLS", "ADJUSTED_TESTS", "BACKBONES", "BREAKDOWN_PAIRS", "CELL_LABELS",
    "CHANNEL_FAMILIES", "CHANNEL_INFER_ARMS", "CHANNEL_TRAIN_ARMS", "CHANNEL_TRAIN_VS_RGB",
    "CLASS_STOUFFER_LABEL", "FIGURE_PAIR", "FOCAL_CLASSES",
    "HEADLINE_BACKBONE", "OTHER_STUDIES", "PAIRED_TESTS", "PER_CLASS_PAPER",
    "PER_CLASS_TABLES", "PER_FRAME_CELLS",
    "PI_TTA_ARMS", "PI_TTA_PAPER", "PR_FOCAL_CLASSES", "STOUFFER_LABEL", "AggregateOptions", "Analysis", "ArmEvidence",
    "Comparison", "Evidence", "adjust_comparisons", "aggregate_over_seeds", "build_evidence",
    "cell_label", "check_recipes", "is_mechanism_arm", "mark_imported", "check_single_dataset", "collect_warnings", "compare_cells", "compare_pairs",
    "missing_notes", "mixed_profile_note", "reason_kind", "recipe_signatures", "seeds_text",
    "select_runs", "tidy_metrics",
]
