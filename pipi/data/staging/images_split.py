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
  at all a 70/15/15 split is made. :func:`carve` is seeded and stratified by class:
  group-disjoint when groups are known, a plain class-stratified split when every image is
  its own group (and the manifest says so).
  When the dataset gives only training and validation (the Capsule Vision challenge),
  validation is the reported split: pipi's ``test``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

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
    ``frame_number`` (the table's, or None). Vectorised: a dataset of single-image groups has
    tens of thousands of them."""
    vid = frames["video_id"]
    size = vid.map(vid.value_counts())

    def distinct(values: pd.Series) -> pd.Series:
        by = values.groupby(vid)
        return by.transform("count").eq(size) & by.transform("nunique").eq(size)

    given = pd.to_numeric(frames["frame_number"], errors="coerce")
    last = pd.to_numeric(frames["filename"].str.rsplit(".", n=1).str[0]
                         .str.extract(_LAST_INT, expand=False), errors="coerce")
    use_given, use_last = distinct(given), distinct(last)
    order = pd.DataFrame({"v": vid, "l": last.fillna(-1), "f": frames["filename"]})
    rank = order.sort_values(["v", "l", "f"]).groupby("v").cumcount().reindex(frames.index)
    out = rank.where(~use_last, last).where(~use_given, given)
    return out.astype("int64")


def carve(labels: np.ndarray, groups: np.ndarray, fraction: float, seed: int, what: str,
          names: Sequence[str] | None = None) -> np.ndarray:
    """A seeded, class-stratified, group-disjoint subset of about ``fraction`` of the rows
    (a boolean mask).

    Each group counts toward its most frequent class. Within a class, its groups are shuffled
    with ``seed`` and taken in that order while the rows taken so far are under ``fraction``
    of the class's rows, so at least one group is taken and never the class's last one (a
    class in a single group stays where it is). scikit-learn's ``StratifiedGroupKFold``
    does the same job with a Python loop over groups x folds: over two minutes for the
    challenge's 50,000 ungrouped images, this is under a second.
    """
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise DataError(f"cannot carve {what} out: the data has {n_groups} group(s); give "
                        "split folders or a split column, or more videos/patients")
    rows = pd.DataFrame({"g": groups, "y": labels})
    per = rows.groupby(["g", "y"], sort=True).size().rename("n").reset_index()
    size = per.groupby("g")["n"].sum()
    dom = per.sort_values(["n", "y"], ascending=[False, True], kind="stable") \
        .drop_duplicates("g").set_index("g")["y"]
    g = pd.DataFrame({"y": dom, "n": size.reindex(dom.index)})
    g["r"] = np.random.default_rng(seed).permutation(len(g))
    g = g.sort_values(["y", "r"])
    by = g.groupby("y")
    before = by["n"].cumsum() - g["n"]
    target = fraction * by["n"].transform("sum")
    last = by.cumcount() == by["n"].transform("size") - 1
    held = set(g.index[(before < target) & ~last])
    if not held:
        alone = [names[int(y)] if names is not None else str(y) for y in sorted(set(g["y"]))]
        raise DataError(
            f"cannot carve {what} out with whole groups: {len(g)} group(s) (videos/patients), "
            f"and each of the classes {alone} has a single group of its own (a group counts "
            "toward its most frequent class); give split folders or a split column, data with "
            "more groups, or a --group-pattern that finds smaller groups")
    return np.fromiter((x in held for x in groups), dtype=bool, count=len(groups))


def assign_splits(given: pd.Series, labels: pd.Series, groups: pd.Series, *, seed: int,
                  grouping: Grouping, names: Sequence[str] | None = None
                  ) -> tuple[pd.Series, str]:
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
        test = carve(lab[tr], grp[tr], TEST_FRACTION, seed, "test", names)
        split[tr] = np.where(test, "test", "train")
        test_carved = True
        notes.append(f"{'test carved out of training' if have else 'no split given: test carved out'}"
                     f" ({TEST_FRACTION:.0%}, {how})")
    if "val" in have and "test" in have:
        notes.append("train, val and test given: kept")
    else:
        tr = (split == "train").to_numpy()
        share = VAL_FRACTION / (1 - TEST_FRACTION) if test_carved else VAL_FRACTION
        val = carve(lab[tr], grp[tr], share, seed + 1, "val", names)
        split[tr] = np.where(val, "val", "train")
        notes.append(f"val carved out of training ({share:.1%} of it, {how})")
    leaks = _groups_across(split, groups)
    if leaks and grouping.by != "none":
        notes.append(f"{leaks} group(s) span the given splits")
    return split, "; ".join(notes) + f"; seed {seed}"


def _groups_across(split: pd.Series, groups: pd.Series) -> int:
    return int((pd.DataFrame({"s": split, "g": groups}).groupby("g")["s"].nunique() > 1).sum())
