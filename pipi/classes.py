"""The 14 Kvasir-Capsule classes: canonical names, index order, slugs, evaluable subset.

Class index order is the alphabetical order of the metadata.csv strings, as in the paper.
"""

from __future__ import annotations

import re

#: Canonical class names (the strings of Kvasir-Capsule's metadata.csv), index order.
CLASSES: tuple[str, ...] = (
    "Ampulla of Vater",
    "Angiectasia",
    "Blood - fresh",
    "Blood - hematin",
    "Erosion",
    "Erythema",
    "Foreign Body",
    "Ileocecal valve",
    "Lymphangiectasia",
    "Normal clean mucosa",
    "Polyp",
    "Pylorus",
    "Reduced Mucosal View",
    "Ulcer",
)
NUM_CLASSES = len(CLASSES)

#: Folder names inside the real labelled_images.zip (cased differently from metadata.csv).
RELEASE_FOLDERS: dict[str, str] = {c: c for c in CLASSES} | {
    "Ampulla of Vater": "Ampulla of vater",
    "Foreign Body": "Foreign body",
    "Reduced Mucosal View": "Reduced mucosal view",
}

#: Anatomical landmark classes (reported, not clinical screening targets).
ANATOMY = ("Ampulla of Vater", "Ileocecal valve", "Pylorus")

#: Classes in a single Kvasir-Capsule video: train-only in the paper's split.
PAPER_TRAIN_ONLY = ("Ampulla of Vater", "Blood - hematin", "Polyp")


def slug(name: str) -> str:
    """Lower case with spaces, hyphens and underscores removed: 'Blood - fresh' -> 'bloodfresh'."""
    return re.sub(r"[\s\-_]+", "", name.strip().lower())


#: The label strings of the release's official two-fold split files
#: (``official_splits/split_0.csv`` / ``split_1.csv``, columns ``filename,label``), accepted as
#: aliases wherever a Kvasir-Capsule label is read. ``Ileo-cecal valve`` already matches
#: ``Ileocecal valve`` by slug; it is listed so the table is complete.
OFFICIAL_SPLIT_LABELS: dict[str, str] = {
    "Blood": "Blood - fresh",
    "Erythematous": "Erythema",
    "Foreign Bodies": "Foreign Body",
    "Ileo-cecal valve": "Ileocecal valve",
    "Normal": "Normal clean mucosa",
}

_BY_SLUG = {slug(c): i for i, c in enumerate(CLASSES)} | {
    slug(a): CLASSES.index(c) for a, c in OFFICIAL_SPLIT_LABELS.items()
}


def class_index(name: str) -> int:
    """Index of a class given any casing/spacing of its name or of an official-split label
    (:data:`OFFICIAL_SPLIT_LABELS`); KeyError if unknown."""
    return _BY_SLUG[slug(name)]


def canonical(name: str) -> str:
    """Canonical class name for any casing/spacing; KeyError if unknown."""
    return CLASSES[class_index(name)]


def is_known(name: str) -> bool:
    return slug(name) in _BY_SLUG
