"""GalKva-2026: the paired Kvasir-Capsule / Galar cross-vendor benchmark of the paper.

Pure functions, no MLflow: validate a submission against the benchmark's released draft-07
schema (:func:`validate_submission`; pipi's own checks as warnings: :func:`check_submission`), score it from its self-reported numbers
(:func:`score_submission`), recompute every number from per-frame predictions and flag
self-reported numbers that disagree (:func:`recompute`, :func:`score_predictions`), and
write a submission whose numbers all come from predictions (:func:`build_submission`).
"""

from pipi.galkva.build import MethodInfo, Submitter, build_submission, write_submission
from pipi.galkva.recompute import (
    DatasetRecompute,
    DatasetRuns,
    PairedDeltas,
    Recomputed,
    SeedRun,
    compare_with_submission,
    load_prediction_dir,
    recompute,
    score_predictions,
)
from pipi.galkva.score import (
    BANDS,
    BENCHMARK_VERSION,
    LEADERBOARD_HEADER,
    SCORING_SETS,
    DatasetSummary,
    Discrepancy,
    InvalidSubmissionError,
    Retention,
    SubmissionScore,
    classify_retention,
    retention_band,
    score_submission,
)
from pipi.galkva.validate import (
    Violation,
    check_submission,
    load_submission,
    submission_schema,
    validate_submission,
)

__all__ = [
    "BANDS",
    "BENCHMARK_VERSION",
    "LEADERBOARD_HEADER",
    "SCORING_SETS",
    "DatasetRecompute",
    "DatasetRuns",
    "DatasetSummary",
    "Discrepancy",
    "InvalidSubmissionError",
    "MethodInfo",
    "PairedDeltas",
    "Recomputed",
    "Retention",
    "SeedRun",
    "SubmissionScore",
    "Submitter",
    "Violation",
    "build_submission",
    "check_submission",
    "classify_retention",
    "compare_with_submission",
    "load_prediction_dir",
    "load_submission",
    "recompute",
    "retention_band",
    "score_predictions",
    "score_submission",
    "submission_schema",
    "validate_submission",
    "write_submission",
]
