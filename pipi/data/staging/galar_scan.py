"""Galar label files to staging candidates: every selected label file parsed, each row's
Kvasir-Capsule classes under the mapping, and the tallies the manifest records
(:func:`scan_labels`); the source label columns kept beside each staged frame
(:func:`source_labels`). A step of :func:`pipi.data.staging.galar.stage_galar`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.data.progress import tqdm
from pipi.data.staging.galar_labelfile import (
    HEADER_32,
    SECTION_COLUMNS,
    LabelTable,
    read_label_files,
)
from pipi.data.staging.galar_mapping import GalarMapping, assign_classes, column_roles

__all__ = ["LABEL_PREFIX", "LABEL_SOURCE", "LabelScan", "label_column", "scan_labels",
           "source_labels"]

#: frames.parquet column prefix of the source Galar labels: ``galar_active_bleeding`` ...
LABEL_PREFIX = "galar_"
LABEL_SOURCE = tuple(c for c in HEADER_32 if c not in ("index", "frame"))


def label_column(name: str) -> str:
    return LABEL_PREFIX + re.sub(r"[\s\-]+", "_", name.strip().lower())


@dataclass(frozen=True)
class LabelScan:
    """Every selected label file parsed, with the candidate (frame, class) rows and tallies."""

    tables: dict[int, LabelTable]
    cands: pd.DataFrame  # vid, row, frame_number, class, multilabel
    n_rows: int  # label rows read
    n_multi: int  # rows positive for several mapped classes
    n_unassigned: int  # rows with no mapped class that are not Normal either
    combos: dict[str, int]  # "Blood - fresh+Ulcer" -> rows
    unmapped: dict[str, int]  # unmapped (non-section) column -> positives
    per_column: list[dict]  # the mapping table with positives and n_videos of this copy


def scan_labels(
    sel: pd.DataFrame, labels_of: dict[int, Path], mapping: GalarMapping, multilabel: str,
    progress: bool,
) -> LabelScan:
    tables: dict[int, LabelTable] = {}
    parts, unmapped, combos = [], Counter(), Counter()
    n_rows = n_multi = n_unassigned = 0
    other = [c for c, r in column_roles(mapping).items() if r["role"] != "mapped"
             and c not in ("index", "frame", "section", *SECTION_COLUMNS)]
    vids = [int(v) for v in sel["video_id"]]
    with tqdm(total=len(vids), desc="read labels", unit="video", disable=not progress) as bar:
        read = read_label_files([labels_of[v] for v in vids], strict=mapping.used_columns,
                                on_file=bar.update)
    for vid, t in zip(vids, read):
        tables[vid] = t
        rows, cls, n_mapped = assign_classes(t, mapping, multilabel=multilabel)
        multi = np.nonzero(n_mapped > 1)[0]
        n_rows += t.frame.shape[0]
        n_multi += multi.size
        n_unassigned += int(t.frame.shape[0] - np.unique(rows).size) - (
            multi.size if multilabel == "exclude" else 0)
        if multi.size:
            pos = {k: np.zeros(t.frame.shape[0], bool) for k in mapping.priority}
            for g, k in mapping.table:
                v = t.column(g)
                if v is not None:
                    pos[k] |= v == 1
            combos.update("+".join(k for k in mapping.priority if pos[k][r]) for r in multi)
        for c in other:
            v = t.column(c)
            if v is not None:
                unmapped[c] += int((v == 1).sum())
        parts.append(pd.DataFrame({
            "vid": vid, "row": rows, "frame_number": t.frame[rows], "class": cls,
            "multilabel": n_mapped[rows] > 1, "anatomical_section": t.sections()[rows],
        }))
    per_column = []
    for g, k in mapping.table:
        pos = [int((c == 1).sum()) for c in (t.column(g) for t in tables.values()) if c is not None]
        per_column.append({"galar_column": g, "kvasir_class": k, "positives": sum(pos),
                           "n_videos": sum(1 for n in pos if n > 0)})
    return LabelScan(
        tables=tables, cands=pd.concat(parts, ignore_index=True), n_rows=n_rows,
        n_multi=n_multi, n_unassigned=n_unassigned, combos=dict(sorted(combos.items())),
        unmapped=dict(sorted(unmapped.items())), per_column=per_column,
    )


def source_labels(kept: pd.DataFrame, tables: dict[int, LabelTable]) -> dict[str, np.ndarray]:
    """The Galar label columns of every kept row (-1 where the file lacks the column)."""
    rows = kept["row"].to_numpy()
    out = {}
    groups = kept.groupby("vid").indices
    for src_col in LABEL_SOURCE:
        vals = np.full(len(kept), -1, np.int8)
        for vid, idx in groups.items():
            v = tables[vid].column(src_col)
            if v is not None:
                vals[idx] = v[rows[idx]]
        out[label_column(src_col)] = vals
    return out
