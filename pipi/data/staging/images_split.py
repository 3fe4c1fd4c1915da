"""Groups (videos, patients), frame numbers and the train/val/test split of an image dataset.

* **Groups**: a table's ``video_id|patient_id`` column; else (and for its blank cells) the
  first ``group_patterns`` regex whose named group ``group`` matches the file name (e.g.
  ``^(?P<group>[0-9a-f]{16})_`` for Kvasir frames, ``-P(?P<group>\\d+)-`` for KID), the id
  being ``<source>/<group>`` where the dataset has sources. An image no pattern matches is its
  own group.
* **Frame numbers**: the table's ``frame_number``; else, within a group, the last integer of
  the file name when those are distinct, the file's rank in the group otherwise.
* **Split** (:func:`assign_splits`): split folders or a ``split`` column are kept; a missing
  val (and test) is carved out of train, a missing test out of train too, and with no split
  at all a 70/15/15 split is made. Carving uses scikit-learn's ``StratifiedGroupKFold``
  (seeded, stratified by each image's first class): group-disjoint when groups are known, a
  plain class-stratified split when every image is its own group (and the manifest says so).
  When the dataset gives only training and validation (the Capsule Vision challenge),
  validation is the reported split: pipi's ``test``.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedGroupKFold

from pipi.errors import DataError

log = logging.getLogger(__name__)

#: Share of the data carved out for val, and for test, where the dataset does not give them.
VAL_FRACTION = 0.15
TEST_FRACTION = 0.15
_LAST_INT = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class Grouping:
    """How images were grouped for a group-disjoint split (recorded in the manifest)."""

    by: str                 # "column video_id" | "pattern" | "column video_id + pattern" | "none"
    patterns: tuple[str, ...]
    n_groups: int
    ungrouped_frames: int

    def describe(self) -> str:
        if self.by == "none":
            return "no group ids: every image is its own group (a class-stratified split)"
        extra = (f"; {self.ungrouped_frames} image(s) matched no pattern and are their own "
                 "groups") if self.ungrouped_frames else ""
        return f"{self.n_groups} groups by {self.by}{extra}"

    def as_dict(self) -> dict:
        return {"by": self.by, "patterns": list(self.patterns), "n_groups": self.n_groups,
                "ungrouped_frames": self.ungrouped_frames, "description": self.describe()}


def compile_patterns(patterns: tuple[str, ...]) -> list[re.Pattern]:
    out = []
    for p in patterns:
        try:
            rx = re.compile(p)
        except re.error as exc:
            raise DataError(f"--group-pattern {p!r}: not a regular expression ({exc})") from None
        if "group" not in rx.groupindex:
            raise DataError(f"--group-pattern {p!r}: needs a named group (?P<group>...), e.g. "
                            r"'^(?P<group>[0-9a-f]{16})_' or '-P(?P<group>\d+)-'")
        out.append(rx)
    return out


def assign_groups(frames: pd.DataFrame, patterns: tuple[str, ...], group_column: str
                  ) -> tuple[pd.Series, Grouping]:
    """The group id of each frame (rows of ``frames``: ``key``, ``filename``, ``source``,
    ``group`` = the table's id or "")."""
    rxs = compile_patterns(patterns)
    has_sources = bool((frames["source"] != "").any())
    ids, n_pattern, n_none = [], 0, 0
    for key, name, source, given in zip(frames["key"], frames["filename"], frames["source"],
                                        frames["group"]):
        if given:
            ids.append(given)
            continue
        m = next((m for m in (rx.search(name) for rx in rxs) if m and m["group"]), None)
        if m is not None:
            n_pattern += 1
            ids.append(f"{source}/{m['group']}" if has_sources and source else m["group"])
        else:
            n_none += 1
            ids.append(f"image:{key}")
    n_column = len(frames) - n_pattern - n_none
    parts = ([f"column {group_column}"] if n_column else []) + (["pattern"] if n_pattern else [])
    by = " + ".join(parts) if parts else "none"
    groups = pd.Series(ids, index=frames.index)
    return groups, Grouping(by=by, patterns=tuple(patterns), n_groups=int(groups.nunique()),
                            ungrouped_frames=n_none if parts else 0)


def frame_numbers(frames: pd.DataFrame) -> pd.Series:
    """Frame numbers (see the module docstring); ``frames`` has ``video_id``, ``filename`` and
    ``frame_number`` (the table's, or None)."""
    given = pd.to_numeric(frames["frame_number"], errors="coerce")
    out = pd.Series(0, index=frames.index, dtype="int64")
    for idx in frames.groupby("video_id", sort=False).groups.values():
        sub = frames.loc[idx]
        g = given.loc[idx]
        if g.notna().all() and g.is_unique:
            out.loc[idx] = g.astype("int64")
            continue
        last = [int(m.group(1)) if (m := _LAST_INT.search(n.rsplit(".", 1)[0])) else -1
                for n in sub["filename"]]
        if -1 not in last and len(set(last)) == len(last):
            out.loc[idx] = last
        else:
            order = sorted(range(len(sub)), key=lambda i: (last[i], sub["filename"].iloc[i]))
            ranks = np.empty(len(sub), dtype=np.int64)
            ranks[order] = np.arange(len(sub))
            out.loc[idx] = ranks
    return out


def carve(labels: np.ndarray, groups: np.ndarray, fraction: float, seed: int, what: str
          ) -> np.ndarray:
    """A seeded, class-stratified, group-disjoint subset of about ``fraction`` of the rows
    (a boolean mask), from scikit-learn's ``StratifiedGroupKFold``."""
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise DataError(f"cannot carve {what} out: the data has {n_groups} group(s); give "
                        "split folders or a split column, or more videos/patients")
    k = min(max(2, round(1 / fraction)), n_groups)
    sgkf = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "least populated class" is expected
        _, held = next(sgkf.split(np.zeros(len(labels)), labels, groups))
    mask = np.zeros(len(labels), dtype=bool)
    mask[held] = True
    return mask


def assign_splits(given: pd.Series, labels: pd.Series, groups: pd.Series, *, seed: int,
                  grouping: Grouping) -> tuple[pd.Series, str]:
    """pipi's split of each frame and a sentence saying how it was made (module docstring)."""
    have = set(given) - {""}
    if "" in set(given) and have:
        raise DataError("some images have a split and others none; give every image one")
    if have and "train" not in have:
        raise DataError(f"the data gives the split(s) {sorted(have)} but no training split")
    split = given.copy()
    how = "group-disjoint" if grouping.by != "none" else "class-stratified (no group ids)"
    lab, grp = labels.to_numpy(), groups.to_numpy()
    notes, test_carved = [], False
    if "test" not in have and "val" in have:
        split[split == "val"] = "test"
        notes.append("training and validation given: validation is the reported test split")
    elif "test" not in have:
        tr = (split == "train").to_numpy() if have else np.ones(len(split), dtype=bool)
        test = carve(lab[tr], grp[tr], TEST_FRACTION, seed, "test")
        split[tr] = np.where(test, "test", "train")
        test_carved = True
        notes.append(f"{'test carved out of training' if have else 'no split given: test carved out'}"
                     f" ({TEST_FRACTION:.0%}, {how})")
    if "val" in have and "test" in have:
        notes.append("train, val and test given: kept")
    else:
        tr = (split == "train").to_numpy()
        share = VAL_FRACTION / (1 - TEST_FRACTION) if test_carved else VAL_FRACTION
        val = carve(lab[tr], grp[tr], share, seed + 1, "val")
        split[tr] = np.where(val, "val", "train")
        notes.append(f"val carved out of training ({share:.1%} of it, {how})")
    leaks = _groups_across(split, groups)
    if leaks and grouping.by != "none":
        notes.append(f"{leaks} group(s) span the given splits")
    return split, "; ".join(notes) + f"; seed {seed}"


def _groups_across(split: pd.Series, groups: pd.Series) -> int:
    return int((pd.DataFrame({"s": split, "g": groups}).groupby("g")["s"].nunique() > 1).sum())
