"""Stage any labelled image dataset (class folders, or a label table) with its own classes
and sources: ``pipi stage images``. The layouts: :mod:`pipi.data.staging.images_scan`; the
groups and the split: :mod:`pipi.data.staging.images_split`. Output, under ``OUT``::

    OUT/{train,val,test}/<Class>/[<Source>/...]<file>
    OUT/frames.parquet   one row per (image, class): FRAME_COLUMNS
    OUT/manifest.json    classes (index order), sources, layout, split rule, grouping,
                         per class x split x source counts, content_sha256, data_digest
    OUT/counts.md, counts.csv   per class and split, then per source

``frames.parquet`` has the Kvasir stager's columns (``path`` relative to OUT, ``class``,
``class_index`` into ``manifest["classes"]``, ``video_id`` = the group, ``frame_number``,
``split``, ``multilabel``) plus ``source`` ("" where the dataset has none), ``image_path``
(exactly as the dataset wrote it: the Capsule Vision sheets' strings, the table's cell, or the
path relative to the root) and ``frame_id`` (one image, whatever its classes).

Classes: the data's names (folders or table values), sorted, unless ``classes`` fixes the
order; a ``class_map`` (JSON ``{"classes": [...] | "kvasir", "map": {"name": "target" |
null}}``, or a two-column CSV ``from,to``) maps them onto another set, null dropping a class.
An image with two classes is refused unless ``multilabel``.

Hashes, as for Kvasir: ``content_sha256`` = ``split_sha256({frame_id: split})``;
``data_digest`` = ``compute_data_digest(content_sha256, (path, class, sha256 of file))``.
An existing ``OUT`` is reused only when its manifest's data digest is the one computed now.
Everything is written to a temporary folder beside ``OUT`` and renamed into place at the end.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pandas as pd

from pipi.classes import CLASSES, slug
from pipi.data.progress import tqdm
from pipi.data.staging.common import (
    SPLITS,
    StageResult,
    check_link,
    compute_data_digest,
    hash_images,
    load_staged,
    place,
    split_sha256,
    staging_area,
    write_index,
)
from pipi.data.staging.images_scan import Scan, scan_folders, scan_table
from pipi.data.staging.images_split import (
    assign_groups,
    assign_splits,
    compile_patterns,
    frame_numbers,
)
from pipi.errors import DataError
from pipi.paths import UNKNOWN_SOURCE, inside, metric_keys, path_part, publish_dir, twins

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DATASET = "images"
FRAME_COLUMNS = ("path", "filename", "class", "class_index", "video_id", "frame_number",
                 "split", "multilabel", "source", "image_path", "frame_id")
#: The Capsule Vision 2024 challenge's classes, in its sheets' order.
CAPSULE_VISION_CLASSES = ("Angioectasia", "Bleeding", "Erosion", "Erythema", "Foreign Body",
                          "Lymphangiectasia", "Normal", "Polyp", "Ulcer", "Worms")
LAYOUTS = ("capsule-vision", "folder", "table")


@dataclass(frozen=True)
class ImageStageRequest:
    """What ``pipi stage images`` was asked (the CLI builds it once)."""

    root: Path
    out: Path | None       # None: the caller's default (``stage -P source=images``)
    labels: Path | None = None
    classes: tuple[str, ...] | None = None
    class_map: Path | None = None
    multilabel: bool = False
    group_patterns: tuple[str, ...] = ()
    seed: int = 42
    link: str = "hardlink"


# --------------------------------------------------------------------------- classes
def read_class_map(path: Path) -> tuple[dict[str, str | None], tuple[str, ...] | None]:
    """``{data class slug: target class or None}`` and the target order (None: sorted)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"--class-map {path}: file not found")
    target: tuple[str, ...] | None = None
    try:
        if path.suffix.lower() == ".json":
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("map", doc), dict):
                raise ValueError('expected {"classes": [...], "map": {"name": "target"}}')
            pairs = doc.get("map", doc)
            order = doc.get("classes")
            if order == "kvasir":
                target = CLASSES
            elif order is not None:
                target = tuple(str(c) for c in order)
            pairs = {k: v for k, v in pairs.items() if k != "classes"}
        else:
            with path.open(newline="", encoding="utf-8-sig") as fh:
                pairs = {r[0].strip(): (r[1].strip() or None) for r in csv.reader(fh)
                         if len(r) >= 2 and r[0].strip() and r[0].strip().lower() != "from"}
    except (ValueError, OSError) as exc:
        raise DataError(f"--class-map {path}: cannot read it ({exc})") from None
    mapping = {slug(k): (None if v is None else str(v)) for k, v in pairs.items()}
    if target is not None:
        known = {slug(t): t for t in target}
        bad = sorted({v for v in mapping.values() if v is not None and slug(v) not in known})
        if bad:
            raise DataError(f"--class-map {path}: target(s) {bad} are not in its classes "
                            f"{list(target)}")
        mapping = {k: (None if v is None else known[slug(v)]) for k, v in mapping.items()}
    return mapping, target


def resolve_classes(rows: pd.DataFrame, req: ImageStageRequest) -> tuple[pd.DataFrame, list[str],
                                                                          dict | None]:
    """Map and order the classes: rows with their final ``class``, the class list, and the
    class-map record for the manifest."""
    record = None
    order: tuple[str, ...] | None = None
    if req.class_map is not None:
        mapping, order = read_class_map(req.class_map)
        unmapped = sorted({c for c in rows["class"] if slug(c) not in mapping})
        if unmapped:
            raise DataError(f"--class-map {req.class_map}: no entry for the data's class(es) "
                            f"{unmapped} (map each, or to null to drop it)")
        mapped = rows["class"].map(lambda c: mapping[slug(c)])
        dropped = {str(k): int(v) for k, v in
                   rows.loc[mapped.isna(), "class"].value_counts().items()}
        record = {"file": str(req.class_map),
                  "map": {c: mapping[slug(c)] for c in sorted(set(rows["class"]))},
                  "dropped_rows": dropped}
        rows = rows.assign(**{"class": mapped})[mapped.notna()].reset_index(drop=True)
        if rows.empty:
            raise DataError(f"--class-map {req.class_map}: every image was dropped")
    present = sorted(set(rows["class"]))
    if req.classes:
        by = {slug(c): c for c in present}
        names = [by.get(slug(c), c) for c in req.classes]
        missing = [c for c in present if slug(c) not in {slug(n) for n in names}]
        if missing:
            raise DataError(f"--classes leaves out the data's class(es) {missing}; name every "
                            f"class (the data has {present})")
        if len({slug(n) for n in names}) != len(names):
            raise DataError(f"--classes names a class twice: {list(req.classes)}")
        classes = names
    elif order is not None:
        classes = list(order)
    else:
        classes = present
    if len(classes) < 2:
        raise DataError(f"the data has {len(classes)} class(es) {classes}; need at least two")
    _check_classes(rows, classes, req)
    return rows, classes, record


def _check_classes(rows: pd.DataFrame, classes: list[str], req: ImageStageRequest) -> None:
    """Every class is a safe folder name (:func:`pipi.paths.path_part`), no two differ only in
    case, and no two share a metric key; each refusal names where the name came from."""
    first = rows.drop_duplicates("class").set_index("class")["where"]

    def origin(c: str) -> str:
        if req.class_map is not None:
            return f"--class-map {req.class_map}: class"
        return f"{first[c]}: class" if c in first.index else "--classes: class"

    for c in classes:
        path_part(c, origin(c))
    pair = twins(classes)
    if pair:
        raise DataError(f"{origin(pair[1])} {pair[1]!r} and {pair[0]!r} differ only in case; "
                        "a case-insensitive disk cannot keep both: name them alike (or map "
                        "one onto the other with --class-map)")
    metric_keys(classes)


# --------------------------------------------------------------------------- images
def _frames(scan: Scan, rows: pd.DataFrame, shas: dict[str, str], multilabel: bool
            ) -> pd.DataFrame:
    """One row per (image, class) with its ``frame_id``; two classes for one image refused
    unless ``multilabel``."""
    rows = rows.copy()
    rows["filename"] = [PurePosixPath(Path(s).as_posix()).name for s in rows["src"]]
    if scan.layout == "folder":
        rows["key"] = [f"{g}|{s}|{f}|{shas[p]}" for g, s, f, p in
                       zip(rows["given_split"], rows["source"], rows["filename"], rows["src"])]
    rows = rows.drop_duplicates(subset=["key", "class"]).reset_index(drop=True)
    n = rows.groupby("key")["class"].transform("size")
    if not multilabel and (n > 1).any():
        k = rows.loc[n > 1, "key"].iloc[0]
        both = rows[rows["key"] == k]
        raise DataError(f"{both['where'].iloc[0]}: one image with two classes "
                        f"({', '.join(both['class'])}; also {both['where'].iloc[-1]}); pass "
                        "--multilabel to keep both")
    splits = rows.groupby("key")["given_split"].nunique()
    if (splits > 1).any():
        k = splits[splits > 1].index[0]
        raise DataError(f"{rows.loc[rows['key'] == k, 'where'].iloc[0]}: the same image is "
                        "given two splits")
    rows["multilabel"] = n > 1
    first = rows.groupby("key")["image_path"].transform("first")
    rows["frame_id"] = first
    if not first.groupby(first).transform("size").eq(n).all():   # distinct images, same path
        rows["frame_id"] = rows["key"]
    return rows


def _staged_paths(rows: pd.DataFrame, scan: Scan) -> list[str]:
    """``<split>/<Class>/<below the class folder>`` (folders) or ``<split>/<Class>/[<Source>/]
    <file>`` (tables), every part a safe name (:func:`pipi.paths.path_part`); a clash (case
    ignored: the disk may ignore it) gets the frame's short hash before the suffix."""
    out, seen = [], set()
    for r in rows.itertuples(index=False):
        if scan.layout == "folder":
            below = Path(r.src).relative_to(scan.root).parts
            parts = list(below[2:] if r.given_split else below[1:])
            if r.source and parts[0] != r.source:   # a source given for an image without one
                parts.insert(0, r.source)
        else:
            parts = [r.source, r.filename] if r.source else [r.filename]
        for part in parts:
            path_part(part, r.where)
        p = "/".join([r.split, r.cls, *parts])
        if p.casefold() in seen:
            stem, dot, suf = p.rpartition(".")
            p = f"{stem}-{split_sha256({'k': r.frame_id})[:8]}{dot}{suf}"
        seen.add(p.casefold())
        out.append(p)
    return out


def _capsule_vision(scan: Scan, classes: list[str]) -> bool:
    folders = {n.lower() for n in scan.split_folders}
    return (scan.layout == "folder" and {"training", "validation"} <= folders
            and [slug(c) for c in classes] == [slug(c) for c in CAPSULE_VISION_CLASSES])


# --------------------------------------------------------------------------- counts
def count_frames(frames: pd.DataFrame, classes: list[str], sources: list[str]) -> dict:
    """``{split: {class: {source: n}}}`` over (image, class) rows (source "" where none): every
    row counts, whatever its source."""
    srcs = list(sources) + sorted(set(frames["source"]) - set(sources))
    c = frames.groupby(["split", "class", "source"]).size()
    return {s: {k: {src: int(c.get((s, k, src), 0)) for src in srcs} for k in classes}
            for s in SPLITS}


def format_counts(counts: dict, classes: list[str], sources: list[str]) -> str:
    head = ["| Class | Train | Val | Test |", "|---|---:|---:|---:|"]
    lines = head + [f"| {k} | " + " | ".join(f"{sum(counts[s][k].values()):,}" for s in SPLITS)
                    + " |" for k in classes]
    if sources:
        lines += ["", "| Source | Class | Train | Val | Test |", "|---|---|---:|---:|---:|"]
        lines += [f"| {src} | {k} | " + " | ".join(f"{counts[s][k][src]:,}" for s in SPLITS)
                  + " |" for src in sources for k in classes
                  if any(counts[s][k][src] for s in SPLITS)]
    lines += ["", ("Counts are (image, class) rows: an image with several classes "
                   "(--multilabel) counts once in each.")]
    return "\n".join(lines) + "\n"


def _counts_csv(counts: dict) -> pd.DataFrame:
    recs = [(k, src, s, n) for s, per in counts.items() for k, by in per.items()
            for src, n in by.items()]
    t = pd.DataFrame(recs, columns=["class", "source", "split", "n"])
    return t.pivot_table(index=["class", "source"], columns="split", values="n",
                         aggfunc="sum", sort=False)[list(SPLITS)]


# --------------------------------------------------------------------------- stage
def _check_out(out: Path) -> dict | None:
    """The manifest of an existing staged ``out`` (None when ``out`` is absent or empty)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not out.is_dir():
        raise DataError(f"--out {out}: is a file; choose a folder")
    if not (out / "manifest.json").is_file():
        raise DataError(f"--out {out}: exists, is not empty and holds no staged dataset; "
                        "choose a new --out")
    return load_staged(out)[1]


def stage_images(req: ImageStageRequest, *, progress: bool = True) -> StageResult:
    """Stage the dataset of ``req``; see the module docstring."""
    check_link(req.link)
    if req.out is None:
        raise DataError("pass --out <the staged folder>")
    out = Path(req.out)
    _check_apart(Path(req.root), out)
    compile_patterns(req.group_patterns)   # a bad pattern before any image is read
    existing = _check_out(out)
    scan = (scan_table(req.labels, req.root, classes=req.classes) if req.labels
            else scan_folders(req.root))
    rows = _sources(scan.rows.copy())
    rows, classes, class_map = resolve_classes(rows, req)
    if "from_sheet" not in rows:
        rows["from_sheet"] = False
    listed = dict(zip(rows["src"], rows["where"]))   # a table's line, for the error
    shas = {str(p): sha for p, sha in hash_images(
        [Path(p) for p in rows["src"]], workers=4, progress=progress,
        where=(lambda p: f"listed at {listed[str(p)]}") if scan.layout == "table" else None,
    ).items()}
    rows = _frames(scan, rows, shas, req.multilabel)
    capsule = _capsule_vision(scan, classes)
    if capsule:   # the challenge's own form where no sheet gave it
        rows["image_path"] = [p if s else p.replace("/", "\\")
                              for p, s in zip(rows["image_path"], rows["from_sheet"])]
    layout = "capsule-vision" if capsule else scan.layout

    # one row per image for groups, frame numbers and the split
    index = {c: i for i, c in enumerate(classes)}
    rows["class_index"] = rows["class"].map(index)
    img = (rows.sort_values("class_index").drop_duplicates("frame_id")
           .set_index("frame_id", drop=False))
    img["key"] = img["frame_id"]
    groups, grouping = assign_groups(img, req.group_patterns, scan.group_column)
    img["video_id"] = groups
    img["frame_number"] = frame_numbers(img)
    split, rule = assign_splits(img["given_split"], img["class_index"], img["video_id"],
                                seed=req.seed, grouping=grouping, names=classes)
    log.info("split: %s (%s)", rule, grouping.describe())
    img["split"] = split
    for col in ("video_id", "frame_number", "split"):
        rows[col] = rows["frame_id"].map(img[col])
    rows = rows.sort_values(["split", "class_index", "video_id", "frame_number", "frame_id"],
                            kind="stable").reset_index(drop=True)
    rows["cls"] = rows["class"]
    rows["path"] = _staged_paths(rows, scan)
    sources = sorted(set(rows["source"]) - {""})
    content = split_sha256(dict(zip(img["frame_id"], img["split"])))
    digest = compute_data_digest(content, [(p, c, shas[s]) for p, c, s in
                                           zip(rows["path"], rows["class"], rows["src"])])
    if existing is not None:
        if existing.get("data_digest") == digest:
            print(f"{out}: already staged with data digest {digest[:12]}; reused", flush=True)
            frames, manifest = load_staged(out)
            return StageResult(out=out, manifest=manifest, frames=frames,
                               counts=_counts_csv(manifest["counts"]))
        raise DataError(f"--out {out}: holds other data (data digest "
                        f"{str(existing.get('data_digest'))[:12]}, this dataset gives "
                        f"{digest[:12]}); choose a new --out")

    frames = rows[list(FRAME_COLUMNS)].copy()
    frames["class_index"] = frames["class_index"].astype("int64")
    frames["frame_number"] = frames["frame_number"].astype("int64")
    frames["multilabel"] = frames["multilabel"].astype(bool)
    counts = count_frames(frames, classes, sources)
    per_image = img.assign(split=split)
    manifest = {
        "schema_version": SCHEMA_VERSION, "dataset": DATASET, "layout": layout,
        "root": str(Path(req.root).resolve()), "tables": list(scan.sheets),
        "classes": classes, "sources": sources,
        "class_map": class_map, "multilabel": req.multilabel,
        "image_path_form": ("the challenge's sheets' strings, else "
                            "<split folder>\\<Class>\\<Source>\\<file>") if capsule
        else scan.path_form,
        "split_folders": scan.split_folders,
        "split_rule": rule, "grouping": grouping.as_dict(), "seed": req.seed,
        "content_sha256": content, "data_digest": digest,
        "counts": counts,
        "counts_per_class": {s: {k: sum(counts[s][k].values()) for k in classes}
                             for s in SPLITS},
        "n_frames": {s: int((per_image["split"] == s).sum()) for s in SPLITS},
        "n_groups": {s: int(per_image.loc[per_image["split"] == s, "video_id"].nunique())
                     for s in SPLITS},
        "multilabel_frames": int(rows.loc[rows["multilabel"], "frame_id"].nunique()),
        "ignored": list(scan.ignored),
    }
    _write(out, rows, frames, manifest, counts, classes, sources, req.link, progress)
    return StageResult(out=out, manifest=manifest, frames=frames, counts=_counts_csv(counts))


def _check_apart(root: Path, out: Path) -> None:
    """Refuse an ``out`` inside ``root`` (the next staging of ``root`` would read the staged
    copy as a class) or a ``root`` inside ``out``."""
    if inside(out, root):
        raise DataError(f"--out {out}: is inside --root {root} (the next staging of it would "
                        "read the staged copy as data); choose a folder outside it")
    if inside(root, out):
        raise DataError(f"--root {root}: is inside --out {out}; choose an --out outside the data")


def _sources(rows: pd.DataFrame) -> pd.DataFrame:
    """Each row's source a safe folder name; where some images name a source and others none,
    those get :data:`pipi.paths.UNKNOWN_SOURCE`. Sources that differ only in case are refused."""
    named = rows["source"] != ""
    for src, where in rows.loc[named].drop_duplicates("source")[["source", "where"]].itertuples(
            index=False):
        path_part(src, f"{where}: source")
    pair = twins(sorted(set(rows.loc[named, "source"])))
    if pair:
        at = rows.loc[rows["source"] == pair[1], "where"].iloc[0]
        raise DataError(f"{at}: source {pair[1]!r} and {pair[0]!r} differ only in case; name "
                        "them alike")
    if named.any() and not named.all():
        log.warning("%d image(s) name no source: their source is %r", int((~named).sum()),
                    UNKNOWN_SOURCE)
        rows.loc[~named, "source"] = UNKNOWN_SOURCE
    return rows


def _write(out: Path, rows, frames, manifest, counts, classes, sources, link, progress) -> None:
    with staging_area(out) as tmp:
        stage_dir = tmp / "staged"
        placed: dict[str, str] = {}
        for src, path in tqdm(zip(rows["src"], rows["path"]), total=len(rows), desc="stage",
                              unit="img", disable=not progress):
            dst = stage_dir / path
            if not inside(dst, stage_dir):
                raise DataError(f"{src}: its staged path {path!r} leaves --out; nothing written")
            try:
                place(Path(src), dst, link)
            except FileExistsError:
                raise DataError(f"{src} and {placed.get(path.casefold(), 'another image')} land "
                                f"on the same staged path {path!r}; rename one") from None
            placed[path.casefold()] = str(src)
        write_index(stage_dir, frames, manifest, _counts_csv(counts),
                    format_counts(counts, classes, sources))
        publish_dir(stage_dir, out)
