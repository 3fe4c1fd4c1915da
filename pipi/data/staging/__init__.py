"""Staging: a published release (Kvasir-Capsule, Galar) becomes a staged folder.

A staged folder holds the images under ``<split>/<class>/``, the frame index
``frames.parquet``, ``manifest.json`` (split, hashes, counts) and ``counts.md``/``counts.csv``;
:mod:`pipi.data.staging.common` defines that format and the steps every stager shares
(argument checks, metadata CSV reading, image checks, publishing the folder atomically).
One module per release: :mod:`~pipi.data.staging.kvasir` (with the paper's split in
``kvasir_paper``), :mod:`~pipi.data.staging.galar` (its label files, mapping, presets and
release layout in ``galar_*``) and :mod:`~pipi.data.staging.images` for any folder or table
of images with its own classes (the Capsule Vision 2024 layout included; its layouts in
``images_scan``, its groups and split in ``images_split``). What the rest of pipi uses is
importable from here.
"""

from pipi.data.staging.common import (
    FRAME_COLUMNS,
    SPLITS,
    StageResult,
    compute_data_digest,
    load_staged,
    split_sha256,
)
from pipi.data.staging.galar import GALAR_FRAME_COLUMNS, GALAR_PRESETS, stage_galar
from pipi.data.staging.galar_mapping import MULTILABEL_RULES
from pipi.data.staging.images import ImageStageRequest, stage_images
from pipi.data.staging.kvasir import SPLIT_RULES, stage_kvasir

__all__ = [
    "FRAME_COLUMNS",
    "GALAR_FRAME_COLUMNS",
    "GALAR_PRESETS",
    "ImageStageRequest",
    "MULTILABEL_RULES",
    "SPLITS",
    "SPLIT_RULES",
    "StageResult",
    "compute_data_digest",
    "load_staged",
    "split_sha256",
    "stage_galar",
    "stage_images",
    "stage_kvasir",
]
