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


_BY_SLUG = {slug(c): i for i, c in enumerate(CLASSES)}


def class_index(name: str) -> int:
    """Index of a class given any casing/spacing of its name; KeyError if unknown."""
    return _BY_SLUG[slug(name)]


def canonical(name: str) -> str:
    """Canonical class name for any casing/spacing; KeyError if unknown."""
    return CLASSES[class_index(name)]


def is_known(name: str) -> bool:
    return slug(name) in _BY_SLUG
