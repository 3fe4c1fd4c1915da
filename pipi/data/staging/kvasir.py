"""Stage a Kvasir-Capsule release into a patient-disjoint train/val/test layout.

Input: the real release (``labelled_images`` class folders, or ``labelled_images.zip`` with
class folders or one ``.tar.gz`` per class inside) and its ``metadata.csv``. Output, under
``OUT``::

    OUT/{train,val,test}/<Canonical class>/<video_id>_<frame>.jpg
    OUT/frames.parquet   one row per (frame, class); see FRAME_COLUMNS
    OUT/manifest.json    video_to_split, counts, content_sha256, data_digest
    OUT/counts.md        the per-class, per-split table (paper Table 1 shape), see count_table

The split (``split``): an explicit ``split_manifest`` wins; otherwise ``"auto"`` (the default)
takes the paper's split (:mod:`pipi.data.staging.kvasir_paper`) when the staged videos are the
release's 43 labelled videos with the paper's 13 val/test ids among them, and the seeded
search (:func:`random_video_split`) for any other data; ``"paper"`` and ``"random"`` force one.

Everything is written into a temporary directory beside ``OUT`` and renamed into place at
the end, so a failure leaves nothing half-written. The frame index, its hashes
(``content_sha256``, ``data_digest``) and the count table are the staged format of
:mod:`pipi.data.staging.common`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.classes import ANATOMY, CLASSES, canonical, class_index, is_known
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
    read_metadata_text,
    split_sha256,
    staging_area,
    write_index,
)
from pipi.data.staging.kvasir_paper import paper_split, paper_split_applies, paper_video_split
from pipi.errors import DataError
from pipi.paths import publish_dir

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("filename", "video_id", "frame_number", "finding_class")
#: A class seen in fewer videos than this is train-only: the videos holding it are pinned to
#: train (the paper's three single-video classes). Every other class is evaluable.
MIN_VIDEOS_FOR_EVAL = 2
#: An evaluable class seen in at least this many videos must also have val positives (one in
#: 2 videos, Blood - fresh on the real release, can only be in train and test).
MIN_VIDEOS_FOR_VAL = 3
#: Seeded re-draws tried to find a split that meets :func:`coverage_gaps`.
SPLIT_ATTEMPTS = 2000
#: ``stage kvasir --split`` values (see the module docstring).
SPLIT_RULES = ("auto", "paper", "random")
#: How a frame with several classes is counted once (the paper's Table convention).
PRIMARY_RULE = ("a frame with several classes counts once, toward its primary class: a finding "
                "class over an anatomical landmark (Ampulla of Vater, Ileocecal valve, Pylorus), "
                "then the class of its first metadata.csv row")


# --------------------------------------------------------------------------- metadata
def read_metadata(path: Path) -> pd.DataFrame:
    """Read metadata.csv (delimiter sniffed) into unique (filename, class) rows.

    Returns columns filename, video_id, frame_number, class, row (1-based CSV line).
    """
    path = Path(path)
    text, delim = read_metadata_text(path, default=";", missing="metadata file not found")
    reader = csv.DictReader(io.StringIO(text), delimiter=delim)
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {cols} (delimiter {delim!r}). "
            "Expected the Kvasir-Capsule header "
            "filename;video_id;frame_number;finding_category;finding_class;x1;...;y4"
        )
    records = []
    for lineno, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        cls = row["finding_class"]
        if not is_known(cls):
            raise DataError(
                f"{path}, line {lineno}: unknown class {cls!r}. Known classes: {list(CLASSES)}"
            )
        fname, vid = row["filename"], row["video_id"]
        if not fname or not vid:
            raise DataError(f"{path}, line {lineno}: empty filename or video_id")
        try:
            frame = int(float(row["frame_number"]))
        except ValueError:
            raise DataError(
                f"{path}, line {lineno}: frame_number {row['frame_number']!r} is not an integer"
            ) from None
        records.append((fname, vid, frame, canonical(cls), lineno))
    if not records:
        raise DataError(f"{path}: no data rows")
    df = pd.DataFrame(records, columns=["filename", "video_id", "frame_number", "class", "row"])
    df = df.drop_duplicates(subset=["filename", "class"], keep="first").reset_index(drop=True)
    return df


# --------------------------------------------------------------------------- images
def _extract_archive(src: Path, dest: Path) -> Path:
    """Extract a release zip (and any per-class .tar.gz inside it) under ``dest``."""
    try:
        with zipfile.ZipFile(src) as zf:
            zf.extractall(dest)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{src}: not a readable zip archive ({exc})") from None
    for tgz in list(dest.rglob("*.tar.gz")) + list(dest.rglob("*.tgz")):
        try:
            with tarfile.open(tgz) as tf:
                tf.extractall(tgz.parent, filter="data")
        except tarfile.TarError as exc:
            raise DataError(f"{src}: member {tgz.name} is not a readable tar.gz ({exc})") from None
        tgz.unlink()
    return dest


def index_image_folders(root: Path) -> dict[tuple[str, str], Path]:
    """Map (canonical class, filename) -> image path for every class-named folder under root."""
    found: dict[tuple[str, str], Path] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        name = os.path.basename(dirpath)
        if not is_known(name):
            continue
        cls = canonical(name)
        for f in filenames:
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                found.setdefault((cls, f), Path(dirpath) / f)
    return found


# --------------------------------------------------------------------------- split
def load_split_manifest(path: Path) -> dict[str, str]:
    """Read a split manifest (``video_to_split``), checking its stated hash if present."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read split manifest ({exc})") from None
    v2s = doc.get("video_to_split") if isinstance(doc, dict) else None
    if not isinstance(v2s, dict) or not v2s:
        raise DataError(f"{path}: no 'video_to_split' mapping of video id -> train|val|test")
    bad = {v: s for v, s in v2s.items() if s not in SPLITS}
    if bad:
        raise DataError(f"{path}: split values must be train|val|test, got {bad}")
    stated = doc.get("content_sha256")
    if stated:
        actual = split_sha256(v2s)
        if not actual.startswith(str(stated).lower()):
            raise DataError(
                f"{path}: stated content_sha256 {stated} does not match its video_to_split "
                f"(computed {actual}); the manifest was edited or truncated"
            )
    return {str(k): str(v) for k, v in v2s.items()}


def _split_sizes(n: int) -> tuple[int, int, int]:
    n_train = math.floor(0.70 * n)
    n_val = round(0.15 * n)
    return n_train, n_val, n - n_train - n_val


def required_coverage(meta: pd.DataFrame) -> list[tuple[str, str]]:
    """The (class, split) pairs a split must give positives to (the paper's split meets it).

    A class in at least ``MIN_VIDEOS_FOR_EVAL`` (2) videos is evaluable: it needs train and
    test positives, and val positives too when it lives in at least ``MIN_VIDEOS_FOR_VAL`` (3)
    videos. A class in a single video is train-only.
    """
    n = meta.groupby("class")["video_id"].nunique()
    need = []
    for c in (c for c in CLASSES if c in n.index and n[c] >= MIN_VIDEOS_FOR_EVAL):
        need += [(c, "train"), (c, "test")] + ([(c, "val")] if n[c] >= MIN_VIDEOS_FOR_VAL else [])
    return need


def coverage_gaps(meta: pd.DataFrame, video_to_split: dict[str, str]) -> list[tuple[str, str]]:
    """The pairs of :func:`required_coverage` that ``video_to_split`` leaves without positives."""
    have = set(zip(meta["class"], meta["video_id"].map(video_to_split)))
    return [p for p in required_coverage(meta) if p not in have]


def random_video_split(meta: pd.DataFrame, *, seed: int) -> dict[str, str]:
    """Seeded patient-disjoint 70/15/15 video split.

    Rule: videos holding a class that lives in fewer than ``MIN_VIDEOS_FOR_EVAL`` videos are
    pinned to train (such classes cannot reach val and test, as in the paper). The other
    videos are shuffled with ``seed`` and cut so that the totals are floor(0.70 N) train,
    round(0.15 N) val and the rest test (43 videos -> 30/6/7). Up to ``SPLIT_ATTEMPTS``
    seeded re-shuffles are tried to find one that leaves no :func:`coverage_gaps` (every
    evaluable class in train and test, and in val where it lives in 3 or more videos);
    failing that, the one covering most of those (class, split) pairs is kept, with a warning.
    """
    videos = sorted(meta["video_id"].unique())
    vids_per_class = meta.groupby("class")["video_id"].agg(lambda s: set(s))
    rare = {c for c, vs in vids_per_class.items() if len(vs) < MIN_VIDEOS_FOR_EVAL}
    pinned = sorted(set().union(*(vids_per_class[c] for c in rare))) if rare else []
    free = [v for v in videos if v not in pinned]
    n_train, n_val, n_test = _split_sizes(len(videos))
    n_train_free = max(0, n_train - len(pinned))
    if n_val + n_test > len(free):
        raise DataError(
            f"only {len(free)} videos are free to split after pinning {len(pinned)} "
            f"rare-class videos to train; need {n_val + n_test} for val and test"
        )
    need = required_coverage(meta)
    classes_of = meta.groupby("video_id")["class"].agg(lambda s: set(s))
    pinned_classes = set().union(*(classes_of[v] for v in pinned)) if pinned else set()
    rng = np.random.default_rng(seed)
    best, best_cov = None, -1
    for _ in range(SPLIT_ATTEMPTS):
        order = list(rng.permutation(free))
        parts = {"train": order[:n_train_free], "val": order[n_train_free:n_train_free + n_val],
                 "test": order[n_train_free + n_val:]}
        cov = sum(
            (s == "train" and c in pinned_classes) or any(c in classes_of[v] for v in parts[s])
            for c, s in need
        )
        if cov > best_cov:
            best_cov, best = cov, (parts["train"], parts["val"], parts["test"])
        if cov == len(need):
            break
    if best_cov < len(need):
        log.warning("no split among %d draws gives every evaluable class train and test "
                    "positives (and val positives where it lives in %d+ videos)",
                    SPLIT_ATTEMPTS, MIN_VIDEOS_FOR_VAL)
    train, val, test = best
    out = {v: "train" for v in pinned + train}
    out.update({v: "val" for v in val})
    out.update({v: "test" for v in test})
    return dict(sorted(out.items()))


def _check_manifest_covers(v2s: dict[str, str], videos: set[str], source: str) -> None:
    unknown = sorted(set(v2s) - videos)
    if unknown:
        raise DataError(f"{source}: names video(s) not in the metadata: {unknown}")
    missing = sorted(videos - set(v2s))
    if missing:
        raise DataError(f"{source}: leaves out video(s) present in the metadata: {missing}")


# --------------------------------------------------------------------------- counts
def primary_rows(meta: pd.DataFrame) -> pd.Series:
    """True on the row of each frame's primary class (:data:`PRIMARY_RULE`); ``meta`` holds
    unique (filename, class) rows with their metadata.csv line in ``row``."""
    rank = meta["class"].isin(ANATOMY).astype("int64") * (1 << 40) + meta["row"].astype("int64")
    return rank == rank.groupby(meta["filename"]).transform("min")


# --------------------------------------------------------------------------- staging
def stage_kvasir(
    images: Path,
    metadata: Path,
    out: Path,
    *,
    split_manifest: Path | None = None,
    split: str = "auto",
    seed: int = 42,
    link: str = "hardlink",
    workers: int = 4,
    progress: bool = True,
) -> StageResult:
    """Stage a Kvasir-Capsule release; see the module docstring for the layout."""
    images, metadata, out = Path(images), Path(metadata), Path(out)
    check_link(link)
    if split not in SPLIT_RULES:
        raise DataError(f"split must be one of {list(SPLIT_RULES)}, got {split!r}")
    check_out(out)
    if not images.exists():
        raise DataError(f"{images}: image folder or zip not found")
    meta = read_metadata(metadata)
    with staging_area(out) as tmp:
        src_root = images
        if images.is_file():
            src_root = _extract_archive(images, tmp / "_source")
            if link == "symlink":
                link = "hardlink"  # the extracted copy is temporary
        meta["src"] = _find_images(meta, index_image_folders(src_root), images, metadata)
        v2s, split_record = _choose_split(meta, split_manifest, split, seed, metadata)
        _index_rows(meta, v2s)
        shas = hash_images(meta["src"], workers=workers, progress=progress)
        stage_dir = tmp / "staged"
        for r in tqdm(meta.itertuples(index=False), total=len(meta), desc="stage",
                      unit="img", disable=not progress):
            place(r.src, stage_dir / r.path, link)
        frames = (
            meta.sort_values(["split", "class_index", "video_id", "frame_number"])
            .reset_index(drop=True)[list(FRAME_COLUMNS)]
        )
        frames["frame_number"] = frames["frame_number"].astype("int64")
        counts = count_table(meta)
        manifest = _manifest(meta, v2s, split_record, shas, counts, seed)
        write_index(stage_dir, frames, manifest, counts, format_count_table(counts, PRIMARY_RULE))
        publish_dir(stage_dir, out)
    return StageResult(out=out, manifest=manifest, frames=frames, counts=counts)


def _find_images(meta: pd.DataFrame, found: dict[tuple[str, str], Path], images: Path,
                 metadata: Path) -> list[Path]:
    """The image of every (frame, class) row, which must be in that class's folder."""
    paths = []
    for r in meta.itertuples(index=False):
        p = found.get((r[3], r.filename))
        if p is None:
            folder = [k for k in found if k[1] == r.filename]
            where = f" (found only under class folder(s) {[k[0] for k in folder]})" if folder else ""
            raise DataError(
                f"{metadata}, line {r.row}: listed image {r.filename!r} of class "
                f"{r[3]!r} is missing from {images}{where}"
            )
        paths.append(p)
    return paths


def _choose_split(meta: pd.DataFrame, split_manifest: Path | None, split: str, seed: int,
                  metadata: Path) -> tuple[dict[str, str], dict]:
    """``(video_to_split, the manifest's split fields)`` under the ``split`` rule."""
    videos = set(meta["video_id"])
    split_record: dict = {"split_rule": split}
    if split_manifest is not None:
        v2s = load_split_manifest(split_manifest)
        _check_manifest_covers(v2s, videos, str(split_manifest))
        source = str(split_manifest)
    elif split == "paper" or split == "auto" and paper_split_applies(videos):
        v2s = paper_video_split(videos, str(metadata))
        source = "paper"
        ps = paper_split()
        split_record["split_provenance"] = {"file": ps.source, "text": list(ps.provenance)}
    else:
        v2s = random_video_split(meta, seed=seed)
        source = f"random(seed={seed})"
    split_record["coverage_gaps"] = [list(p) for p in coverage_gaps(meta, v2s)]
    log.info("split: %s", source)
    return v2s, {"split_source": source, **split_record}


def _index_rows(meta: pd.DataFrame, v2s: dict[str, str]) -> None:
    """Add the frame index's columns to ``meta`` (in place)."""
    n_per_file = meta.groupby("filename")["class"].transform("size")
    meta["multilabel"] = n_per_file > 1
    meta["primary"] = primary_rows(meta)
    meta["split"] = meta["video_id"].map(v2s)
    meta["path"] = [f"{s}/{c}/{f}" for s, c, f in zip(meta["split"], meta["class"], meta["filename"])]
    meta["class_index"] = [class_index(c) for c in meta["class"]]


def _manifest(meta: pd.DataFrame, v2s: dict[str, str], split_record: dict,
              shas: dict[Path, str], counts: pd.DataFrame, seed: int) -> dict:
    content = split_sha256(v2s)
    digest = compute_data_digest(
        content, [(p, c, shas[s]) for p, c, s in zip(meta["path"], meta["class"], meta["src"])]
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset": "kvasir-capsule",
        "video_to_split": v2s,
        "content_sha256": content,
        "data_digest": digest,
        **split_record,
        "seed": seed,
        "classes": list(CLASSES),
        "counts": {s: {c: int(counts.loc[c, s]) for c in CLASSES} for s in SPLITS},
        "counts_per_class": {s: {c: int(counts.loc[c, f"{s}_per_class"]) for c in CLASSES}
                             for s in SPLITS},
        "count_rule": f"counts: {PRIMARY_RULE}; counts_per_class: once per (frame, class); "
                      "n_frames: frames",
        "videos": {s: sorted(v for v, x in v2s.items() if x == s) for s in SPLITS},
        # frames, not (frame, class) rows: a multilabel frame is one frame
        "n_frames": {s: int(meta.loc[meta["split"] == s, "filename"].nunique()) for s in SPLITS},
        "multilabel_frames": sorted(meta.loc[meta["multilabel"], "filename"].unique().tolist()),
    }
