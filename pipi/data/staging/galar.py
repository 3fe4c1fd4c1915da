"""Stage a Galar release for zero-shot evaluation of Kvasir-trained models.

Input: the real Galar layout (``reference/datasets.md``)::

    ROOT/metadata.csv             one row per video: File Name (integer id), Capsule System, ...
    ROOT/Labels/<id>.csv          one row per frame, 27 or 32 columns (pipi.data.staging.galar_labelfile)
    ROOT/Frames/<id>/frame_<frame:06d>.PNG   (folder ``1`` or zero-padded ``001``; PNG or JPEG)

Output, under ``OUT``: the layout of Kvasir staging (:mod:`pipi.data.staging.kvasir`), so that
``load_staged`` and the uint8 cache read it unchanged::

    OUT/test/<Kvasir class>/<video_id>_<frame>.png   every frame in "test" (zero-shot)
    OUT/frames.parquet   FRAME_COLUMNS + capsule_system, vendor_fold, galar_<column> labels
    OUT/manifest.json    dataset "galar", video_to_split, vendor folds, mapping, column
                         roles, multilabel rule and counts, content_sha256, data_digest
    OUT/counts.md, counts.csv   per-class table (Train | Val | Test), then per capsule system

Rules (each recorded in the manifest):

* **Classes** come from a Galar -> Kvasir mapping (:func:`pipi.data.staging.galar_mapping.load_mapping`;
  the paper's by default). Every Galar column is mapped, used by the Normal clean mucosa
  derivation, or dropped with a reason (``manifest["columns"]``); positives of unmapped
  pathology columns are counted (``unmapped_positives``). Reduced Mucosal View is not
  evaluable on Galar. Frames positive for several mapped classes follow ``multilabel``
  (default ``"priority"``: the first class of ``mapping.priority`` wins).
* **Sampling**: up to ``frames_per_class`` frames per class over the selected videos, drawn
  uniformly without replacement by a generator seeded with ``(seed, class index)``, so a
  class's draw does not depend on the other classes. Only the kept frames are read.
* **Vendor folds**: within each capsule system, the selected videos are shuffled with
  ``seed`` and cut into a ``calibration`` fold (``round(calibration_fraction * n)``, at least
  one video and at most n - 1; none when the system has one video or the fraction is 0) and
  an ``evaluation`` fold; ``calibrate`` tunes on the first. ``galar`` scores every staged
  video by default (the paper's zero-shot protocol), the second only when asked
  (``fold=evaluation``, the default with a calibrated prior).
* **Hashes**: ``content_sha256`` = ``split_sha256(video_to_split)`` as for Kvasir;
  ``data_digest`` = ``compute_data_digest(split_sha256({video: "test:<fold>"}), rows)``
  (the fold is part of the data identity), rows as for Kvasir.

Every error names the file and line (or the metadata line of a video) and leaves nothing
written: staging happens in a temporary folder beside ``OUT``, renamed into place at the end.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from pipi.classes import CLASSES, class_index
from pipi.data.progress import tqdm
from pipi.data.staging.common import (
    FRAME_COLUMNS,
    SCHEMA_VERSION,
    SPLITS,
    StageResult,
    check_link,
    check_out,
    compute_data_digest,
    count_table,
    format_count_table,
    hash_images,
    place,
    split_sha256,
    staging_area,
    write_index,
)
from pipi.data.staging.galar_labelfile import LabelTable, line_of_row
from pipi.data.staging.galar_mapping import (
    MULTILABEL_RULES,
    NOT_EVALUABLE,
    GalarMapping,
    column_roles,
    load_mapping,
)
from pipi.data.staging.galar_presets import (
    GALAR_PRESETS,
    SAMPLE_RULES,
    GalarPreset,
    resolve_preset,
    sample_frames,
)
from pipi.data.staging.galar_release import (
    FOLDS,
    label_files,
    parse_video_spec,
    read_galar_metadata,
    resolve_frames,
    resolve_subsets,
    select_videos,
    vendor_folds,
)
from pipi.data.staging.galar_scan import (
    LABEL_SOURCE,
    LabelScan,
    label_column,
    scan_labels,
    source_labels,
)
from pipi.errors import DataError
from pipi.paths import publish_dir

log = logging.getLogger(__name__)

__all__ = [
    "FOLDS",
    "GALAR_FRAME_COLUMNS",
    "GALAR_PRESETS",
    "SAMPLE_RULES",
    "GalarPreset",
    "format_vendor_table",
    "parse_video_spec",
    "read_galar_metadata",
    "stage_galar",
    "vendor_folds",
]

#: How counts.md counts a frame staged under several classes (``--multilabel duplicate``).
GALAR_PRIMARY_RULE = ("a frame staged under several classes counts once, toward the first of "
                      "them in the mapping's multilabel priority")
#: Columns of a staged Galar frames.parquet. Label columns hold 0/1, or -1 where the video's
#: label file has no such column (the image-quality columns of the 27-column variant).
#: ``anatomical_section``: the frame's section by name (LabelTable.sections; "" if unknown).
GALAR_FRAME_COLUMNS: tuple[str, ...] = FRAME_COLUMNS + (
    "capsule_system", "vendor_fold", "anatomical_section") + tuple(
    label_column(c) for c in LABEL_SOURCE
)


# --------------------------------------------------------------------------- staging
@dataclass(frozen=True)
class _Request:
    """``stage_galar``'s arguments, checked, with the preset applied and the mapping loaded."""

    root: Path
    out: Path
    mapping: GalarMapping
    pre: GalarPreset | None
    frames_per_class: int | None
    capsule_systems: str | Iterable[str] | None
    videos: str | Iterable[int] | None
    seed: int
    link: str
    multilabel: str
    calibration_fraction: float
    workers: int
    progress: bool
    sample: str
    preset: str | None


def _request(root: Path, out: Path, mapping, **kw) -> _Request:
    """Check the arguments (one line each), apply the preset and load the mapping."""
    root, out = Path(root), Path(out)
    pre = resolve_preset(kw["preset"], kw["videos"], kw["frames_per_class"], kw["sample"])
    if pre is not None:
        kw.update(frames_per_class=pre.frames_per_class, sample=pre.sample)
    fpc = kw["frames_per_class"]
    if fpc is not None and (isinstance(fpc, bool) or not isinstance(fpc, int) or fpc < 1):
        raise DataError(f"frames_per_class must be an integer >= 1 or None, got {fpc!r}")
    check_link(kw["link"])
    if kw["multilabel"] not in MULTILABEL_RULES:
        raise DataError(f"multilabel must be one of {list(MULTILABEL_RULES)}, "
                        f"got {kw['multilabel']!r}")
    if not 0.0 <= kw["calibration_fraction"] < 1.0:
        raise DataError(f"calibration_fraction must be in [0, 1), "
                        f"got {kw['calibration_fraction']!r}")
    check_out(out)
    if kw["sample"] not in SAMPLE_RULES:
        raise DataError(f"sample must be one of {list(SAMPLE_RULES)}, got {kw['sample']!r}")
    if not root.is_dir():
        raise DataError(f"{root}: Galar release folder not found")
    if not isinstance(mapping, GalarMapping):
        mapping = load_mapping(mapping)
    if pre is not None and pre.claim == "table":  # the first mapped class in the table wins
        mapping = replace(mapping, priority=tuple(dict.fromkeys(k for _, k in mapping.table)))
    return _Request(root=root, out=out, mapping=mapping, pre=pre, **kw)


@dataclass(frozen=True)
class _Release:
    """The parts of a Galar release that staging reads, the videos selected."""

    meta_path: Path
    meta: pd.DataFrame  # video_id, capsule_system, line (metadata.csv)
    subsets: list  # the mapping's stratification subsets (SystemSubset)
    labels_of: dict[int, Path]  # video id -> label file
    sel: pd.DataFrame  # the selected rows of ``meta``
    frames_root: Path


def _read_release(req: _Request) -> _Release:
    """Read metadata.csv, select the videos and check each has a label file."""
    root, mapping = req.root, req.mapping
    meta_path = root / mapping.metadata_csv_path
    meta = read_galar_metadata(meta_path, system_column=mapping.metadata_column)
    subsets = resolve_subsets(meta, mapping, meta_path)
    labels_of = label_files(root, meta)
    sel = select_videos(meta, mapping, req.videos, req.capsule_systems, meta_path)
    absent = [(v, ln) for v, ln in zip(sel["video_id"], sel["line"]) if v not in labels_of]
    if absent:
        v, ln = absent[0]
        raise DataError(
            f"{meta_path}, line {ln}: video {v} has no label file {root / 'Labels' / f'{v}.csv'}"
            f" ({len(absent)} selected video(s) lack one); pass --videos to leave them out"
        )
    frames_root = root / "Frames"
    if not frames_root.is_dir():
        raise DataError(f"{frames_root}: folder not found; a Galar release has ROOT/Frames/<id>/")
    return _Release(meta_path, meta, subsets, labels_of, sel, frames_root)


def _draw(req: _Request, rel: _Release, scan: LabelScan):
    """``(systems, fold, kept)``: each selected video's capsule system and vendor fold, and
    the candidate rows kept by the seeded draw."""
    if scan.cands.empty:
        raise DataError(
            f"{req.root}: no frame of the selected videos maps to a Kvasir-Capsule class under "
            f"{req.mapping.source}"
        )
    systems = dict(zip(rel.sel["video_id"].astype(int), rel.sel["capsule_system"]))
    fold = vendor_folds(systems, seed=req.seed, calibration_fraction=req.calibration_fraction)
    kept = sample_frames(scan.cands, req.frames_per_class, req.seed, req.sample).copy()
    kept["vid"] = kept["vid"].astype(int)
    kept = kept.sort_values(["vid", "frame_number", "class"]).reset_index(drop=True)
    return systems, fold, kept


def _place_frames(req: _Request, rel: _Release, scan: LabelScan, kept: pd.DataFrame, systems,
                  fold, stage_dir: Path):
    """Find, verify (full decode), hash and place the kept frames; ``(kept, shas)`` with the
    frame index's columns added to ``kept``."""
    kept["src"] = resolve_frames(kept, scan.tables, rel.frames_root, rel.meta, rel.meta_path)
    listed = {s: (v, r) for s, v, r in zip(kept["src"], kept["vid"], kept["row"])}

    def where(p: Path) -> str:
        v, r = listed[p]
        return f"listed in {scan.tables[v].path}, line {line_of_row(scan.tables[v], r)}"

    shas = hash_images(kept["src"], workers=req.workers, progress=req.progress, where=where)
    kept["video_id"] = kept["vid"].astype(str)
    kept["split"] = "test"
    kept["filename"] = [f"{v}_{f}{Path(s).suffix.lower()}"
                        for v, f, s in zip(kept["vid"], kept["frame_number"], kept["src"])]
    kept["path"] = [f"test/{c}/{f}" for c, f in zip(kept["class"], kept["filename"])]
    kept["class_index"] = [class_index(c) for c in kept["class"]]
    kept["capsule_system"] = kept["vid"].map(systems)
    kept["vendor_fold"] = kept["vid"].map(fold)
    kept = kept.assign(**source_labels(kept, scan.tables))
    for r in tqdm(kept.itertuples(index=False), total=len(kept), desc="stage", unit="img",
                  disable=not req.progress):
        place(r.src, stage_dir / r.path, req.link)
    return kept, shas


def _frame_index(kept: pd.DataFrame, mapping: GalarMapping) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(frames, counts)``: frames.parquet's rows and the count table."""
    frames = (
        kept.sort_values(["class_index", "vid", "frame_number"])
        .reset_index(drop=True)[list(GALAR_FRAME_COLUMNS)]
    )
    frames["frame_number"] = frames["frame_number"].astype("int64")
    prank = frames["class"].map({c: i for i, c in enumerate(mapping.priority)}).fillna(-1)
    counts = count_table(frames.assign(  # a duplicated frame counts toward its priority class
        primary=prank == prank.groupby(frames["filename"]).transform("min")))
    return frames, counts


def stage_galar(
    root: Path, out: Path, *, mapping: Path | GalarMapping | None = None,
    frames_per_class: int | None = None, capsule_systems: str | Iterable[str] | None = None,
    videos: str | Iterable[int] | None = None, seed: int = 0, link: str = "hardlink",
    multilabel: str = "priority", calibration_fraction: float = 0.5, workers: int = 4,
    progress: bool = True, sample: str = "random", preset: str | None = None,
) -> StageResult:
    """Stage a Galar release for zero-shot evaluation; see the module docstring.

    Parameters
    ----------
    root, out : Path
        The release (``metadata.csv``, ``Labels/``, ``Frames/``); the staged folder to create
        (must not exist or be empty).
    mapping : Path or GalarMapping, optional
        A ``class_mapping.json`` (GalKva-2026 release format); default the paper's mapping.
    frames_per_class, sample : int, optional; {"random", "first"}
        Keep at most this many frames per class (default all): a draw seeded by ``seed``, or
        the first ones of each class in video/frame order (the published staging script).
    capsule_systems, videos : str or list, optional
        Keep these ``Capsule System`` values ("PillCam SB3,Olympus") and video ids
        ("1-60,65"); default all, or the mapping's stratification subsets when it lists any.
    seed, calibration_fraction : int, float
        Seed of the frame draw and the vendor folds; share of each capsule system's videos in
        the calibration fold.
    link : {"hardlink", "symlink", "copy"}
        How images are placed (hardlinks fall back to copies across devices).
    multilabel : {"priority", "duplicate", "exclude"}
        Rule for a frame positive for several mapped classes
        (:func:`pipi.data.staging.galar_mapping.assign_classes`).
    preset : str, optional
        A :data:`GALAR_PRESETS` recipe (``"paper-subset"``): its frame cap, sampling and
        multi-label rule; ``videos`` must name its number of videos.
    workers, progress : int, bool
        Threads that verify images; show progress bars.

    Returns
    -------
    StageResult
        As :func:`pipi.data.staging.kvasir.stage_kvasir`; ``frames`` has
        :data:`GALAR_FRAME_COLUMNS`.
    """
    req = _request(root, out, mapping, frames_per_class=frames_per_class,
                   capsule_systems=capsule_systems, videos=videos, seed=seed, link=link,
                   multilabel=multilabel, calibration_fraction=calibration_fraction,
                   workers=workers, progress=progress, sample=sample, preset=preset)
    rel = _read_release(req)
    # 1. labels: columnar parse and classes (no image touched yet)
    scan = scan_labels(rel.sel, rel.labels_of, req.mapping, req.multilabel, req.progress)
    # 2. vendor folds and the seeded draw
    systems, fold, kept = _draw(req, rel, scan)
    with staging_area(req.out) as tmp:
        # 3. only the kept frames: find, verify, hash and place them
        stage_dir = tmp / "staged"
        kept, shas = _place_frames(req, rel, scan, kept, systems, fold, stage_dir)
        frames, counts = _frame_index(kept, req.mapping)
        manifest = _manifest(req, rel, scan, kept, shas, frames, counts, systems, fold)
        write_index(stage_dir, frames, manifest, counts, format_count_table(
            counts, GALAR_PRIMARY_RULE) + "\n" + format_vendor_table(frames))
        publish_dir(stage_dir, req.out)
    log.info("staged %d Galar frames of %d videos into %s", len(frames), len(systems), req.out)
    if req.pre is not None and len(frames) != req.pre.n_frames:
        log.warning("preset %s: %d frames staged, the paper reports %d (other videos than "
                    "the paper's?)", preset, len(frames), req.pre.n_frames)
    return StageResult(out=req.out, manifest=manifest, frames=frames, counts=counts)


# --------------------------------------------------------------------------- manifest
def _manifest(req: _Request, rel: _Release, scan: LabelScan, kept, shas, frames, counts,
              systems, fold) -> dict:
    """The staged Galar folder's manifest.json (module docstring: rules and hashes)."""
    mapping = req.mapping
    v2s = {str(v): "test" for v in sorted(systems)}
    fold_content = split_sha256({str(v): f"test:{f}" for v, f in fold.items()})
    digest = compute_data_digest(
        fold_content,
        [(p, c, shas[s]) for p, c, s in zip(kept["path"], kept["class"], kept["src"])],
    )
    n_excluded = scan.n_multi if req.multilabel == "exclude" else 0
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset": "galar",
        "video_to_split": v2s,
        "content_sha256": split_sha256(v2s),
        "data_digest": digest,
        "split_source": "galar zero-shot: every selected video in test",
        "seed": req.seed,
        "classes": list(CLASSES),
        "evaluable_classes": [c for c in CLASSES if counts.loc[c, "test_per_class"] > 0],
        "counts": {s: {c: int(counts.loc[c, s]) for c in CLASSES} for s in SPLITS},
        "counts_per_class": {s: {c: int(counts.loc[c, f"{s}_per_class"]) for c in CLASSES}
                             for s in SPLITS},
        "videos": {s: sorted(v for v, x in v2s.items() if x == s) for s in SPLITS},
        "n_frames": {s: int(counts.loc["Total", s]) for s in SPLITS},
        "multilabel_frames": sorted(frames.loc[frames["multilabel"], "filename"].unique()),
        "multilabel": {
            "rule": req.multilabel, "priority": list(mapping.priority),
            "frames_in_selection": scan.n_multi, "frames_excluded": n_excluded,
            "frames_staged": int(frames.loc[frames["multilabel"], "filename"].nunique()),
            "combinations": scan.combos,
        },
        **_fold_record(frames, systems, fold, req.calibration_fraction, req.seed, fold_content),
        "galar_official_split": {"train": [str(v) for v in sorted(systems) if v < 61],
                                 "test": [str(v) for v in sorted(systems) if v >= 61]},
        "header_variants": {
            str(k): [str(v) for v in sorted(systems) if scan.tables[v].header_variant == k]
            for k in (27, 32)
        },
        "selection": _selection_record(req, systems, len(frames)),
        "label_rows": scan.n_rows,
        "unstaged_rows": {
            "no_mapped_class_and_not_normal": scan.n_unassigned,
            "multilabel_excluded": n_excluded,
            "not_drawn": int(len(scan.cands) - len(kept)),
        },
        "mapping": mapping.as_dict(),
        "capsule_system_subsets": _subset_record(rel.subsets, rel.meta, mapping, rel.meta_path),
        "normal_clean_mucosa_rule": _normal_record(mapping),
        "label_files": _label_file_record(scan.tables, mapping),
        "mapping_table_counts": scan.per_column,
        "columns": column_roles(mapping),
        "unmapped_positives": scan.unmapped,
        "not_evaluable": dict(NOT_EVALUABLE),
    }


def _selection_record(req: _Request, systems, n_frames: int) -> dict:
    """Which videos, capsule systems and frames were asked for (and the preset's claim)."""
    pre = req.pre
    return {
        "videos": None if req.videos is None else list(parse_video_spec(req.videos)),
        "capsule_systems": None if req.capsule_systems is None
        else sorted(set(systems.values())),
        "frames_per_class": req.frames_per_class,
        "sample": req.sample,
        "preset": None if pre is None else {
            "name": req.preset, "note": pre.note, "n_videos": pre.n_videos,
            "paper_n_frames": pre.n_frames, "staged_n_frames": n_frames},
    }


def _subset_record(subsets, meta: pd.DataFrame, mapping: GalarMapping, meta_path: Path) -> dict:
    """The mapping's stratification subsets as names and videos, and the videos per system
    of the staged metadata.csv beside the counts the mapping states (``available_systems``)."""
    have = meta["capsule_system"].value_counts()
    stated = dict(mapping.available_systems)
    differ = {s: {"stated": n, "metadata": int(have.get(s, 0))} for s, n in stated.items()
              if int(have.get(s, 0)) != n}
    if differ:
        log.warning("%s: available_systems differs from %s: %s", mapping.source, meta_path, differ)
    return {
        "metadata_csv": str(meta_path),
        "metadata_column": mapping.metadata_column,
        "videos_per_system": {s: int(n) for s, n in sorted(have.items())},
        "available_systems_stated": stated,
        "available_systems_differ": differ,
        **{s.key: s.as_dict() for s in subsets},
    }


def _normal_record(mapping: GalarMapping) -> dict | None:
    """Which Normal clean mucosa rule was applied, and in which form the mapping wrote it."""
    n = mapping.normal
    if n is None:
        return None
    return {"form": n.form, "applied": n.describe(), "mapping_file": mapping.source,
            "written_as": {"section_column": n.written[0], "section_required_value": n.written[1]}
            if n.written else None}


def _label_file_record(tables: dict[int, LabelTable], mapping: GalarMapping) -> dict:
    """How the label files were read: the ``section`` column's form per video, the columns
    checked (0/1 in every row) and the values of unchecked columns that were not 0/1."""
    forms: dict[str, list[str]] = {}
    unchecked: Counter = Counter()
    for v in sorted(tables):
        forms.setdefault(tables[v].section_form, []).append(str(v))
        unchecked.update(tables[v].unchecked)
    return {
        "section_column": {
            "read_as": ", ".join(sorted(forms)),
            "videos": forms,
            "note": "'names': the section column names the frame's section (stomach, small "
                    "intestine, ...); '0/1': it holds numbers; 'empty': no value. The one-hot "
                    "section columns give the section where the section column does not.",
        },
        "checked_columns": list(mapping.used_columns),
        "unchecked_values_not_0_1": dict(sorted(unchecked.items())),
    }


def _fold_record(frames, systems, fold, calibration_fraction, seed, fold_content) -> dict:
    """Manifest entries of the capsule systems and vendor folds."""
    by_system = (frames.groupby(["capsule_system", "vendor_fold", "class"]).size()
                 .unstack("class", fill_value=0))
    return {
        "capsule_systems": {str(v): s for v, s in sorted(systems.items())},
        "video_to_fold": {str(v): f for v, f in fold.items()},
        "vendor_folds": {
            s: {f: [str(v) for v in sorted(fold) if fold[v] == f and systems[v] == s]
                for f in FOLDS}
            for s in sorted(set(systems.values()))
        },
        "fold_rule": {"calibration_fraction": calibration_fraction, "seed": seed,
                      "within": "capsule system"},
        "fold_sha256": fold_content,
        "counts_by_capsule_system": {
            s: {f: {c: int(by_system.loc[(s, f), c]) for c in by_system.columns}
                for f in FOLDS if (s, f) in by_system.index}
            for s in sorted(set(frames["capsule_system"]))
        },
    }


def format_vendor_table(frames: pd.DataFrame) -> str:
    """Markdown table of staged frames per capsule system and vendor fold."""
    t = frames.groupby(["capsule_system", "vendor_fold"]).agg(
        videos=("video_id", "nunique"), frames=("filename", "nunique"),
    )
    lines = ["| Capsule system | Fold | Videos | Frames |", "|---|---|---:|---:|"]
    for (s, f), row in t.iterrows():
        lines.append(f"| {s} | {f} | {row['videos']:,} | {row['frames']:,} |")
    return "\n".join(lines) + "\n"
