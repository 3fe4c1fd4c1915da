"""The 14 Kvasir-Capsule classes: canonical names, index order, slugs, evaluable subset.

Class index order is the alphabetical order of the metadata.csv strings, as in the paper.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

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


# --------------------------------------------------------------------------- any class set
@dataclass(frozen=True)
class ClassSet:
    """A dataset's classes in index order (a staged manifest's ``classes``): what a model's
    head predicts, a predictions file's probability columns and a report's class names.
    Kvasir-Capsule's 14 (:data:`KVASIR`) unless the staged data says otherwise."""

    names: tuple[str, ...]

    def __post_init__(self):
        names = tuple(str(n) for n in self.names)
        object.__setattr__(self, "names", names)
        if len(names) < 2:
            raise ValueError(f"a class set needs at least two classes, got {list(names)}")
        if len(set(names)) != len(names):
            raise ValueError(f"class names repeat: {list(names)}")

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        return iter(self.names)

    def __getitem__(self, k: int) -> str:
        return self.names[k]

    @property
    def is_kvasir(self) -> bool:
        return self.names == CLASSES

    def index(self, name: str) -> int:
        """Index of a class by its exact name, else by slug (case, spaces, hyphens);
        Kvasir's set also knows the official-split aliases. KeyError if unknown."""
        if name in self.names:
            return self.names.index(name)
        if self.is_kvasir:
            return class_index(name)
        by_slug = {slug(n): i for i, n in enumerate(self.names)}
        return by_slug[slug(name)]


KVASIR = ClassSet(CLASSES)


def class_set_of(manifest: dict | None) -> ClassSet:
    """The class set of a staged manifest (its ``classes``); Kvasir's 14 when it names none."""
    names = (manifest or {}).get("classes")
    if not names:
        return KVASIR
    cs = ClassSet(tuple(names))
    return KVASIR if cs.is_kvasir else cs


def class_set_of_param(value: str | None) -> ClassSet:
    """The class set a run records in its ``classes`` param (a JSON list, written by
    :func:`pipi.config.run_params` for data with its own classes); Kvasir's 14 when absent."""
    names = json.loads(value) if value else None
    if not names:
        return KVASIR
    cs = ClassSet(tuple(names))
    return KVASIR if cs.is_kvasir else cs


#: How a dataset of another class set reaches what is defined on Kvasir's 14 (Galar, GalKva).
KVASIR_MAP_HINT = ("stage the data with `--class-map` onto `kvasir` (docs/your-own-dataset.md) "
                   "to train runs on Kvasir-Capsule's 14 classes")


def not_kvasir(what: str, classes: ClassSet, verb: str = "predicts") -> str:
    """``what`` (a run, runs, a predictions folder) ``verb`` its class set, not Kvasir's 14:
    the start of a refusal where Kvasir-Capsule's 14 classes are expected."""
    return (f"{what} {verb} {len(classes)} classes ({', '.join(classes.names)}), not "
            "Kvasir-Capsule's 14")
