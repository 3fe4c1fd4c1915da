"""Read an image dataset's layout (class folders, or a label table) into one row per
(image, class) for :mod:`pipi.data.staging.images`.

Folder layout::

    ROOT/[<split>/]<Class>/[<Source>/...]<file>

``<split>`` is one of :data:`SPLIT_ALIASES` (``training|train``, ``validation|val|valid``,
``test``) or absent; the class is the first folder under it, the source the next (optional).
A ROOT holding a single folder with the split folders in it (the challenge's ``Dataset/``) is
entered. The Capsule Vision 2024 sheets (``training_data.xlsx`` / ``validation_data.xlsx``,
inside their split folder or beside it) give each image's ``image_path`` exactly as the
challenge wrote it, and their labels are checked against the folders.

Table layout (``labels``): CSV, Parquet or Excel with an image path column
(:data:`PATH_COLUMNS`, ``\\`` separators accepted; relative to ROOT, else to the table's
folder or the folder above it, see :func:`locate`), a class column (:data:`CLASS_COLUMNS`) or one-hot class columns, and optional
``split``, ``video_id|patient_id``, ``source|dataset`` and ``frame_number`` columns; an
unnamed index column (``Unnamed: 0``) is never a class.

Every refusal is one line naming the folder, file or table line.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath

import pandas as pd

from pipi.classes import slug
from pipi.errors import DataError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
#: Split folder / ``split`` column names -> pipi's split.
SPLIT_ALIASES = {"training": "train", "train": "train", "validation": "val", "val": "val",
                 "valid": "val", "test": "test"}
PATH_COLUMNS = ("image_path", "path", "filename")
#: The forms a label table is read in (CSV with its delimiter sniffed, Parquet, Excel).
TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".gz", ".parquet", ".pq", ".xlsx", ".xlsm", ".xls")
CLASS_COLUMNS = ("class", "label", "class_name", "class_label", "finding_class")
GROUP_COLUMNS = ("video_id", "patient_id")
SOURCE_COLUMNS = ("source", "dataset")
#: The Capsule Vision 2024 sheet of a split folder: ``<folder>_data.xlsx``.
SHEET_NAME = "{}_data.xlsx"
#: Columns of :class:`Scan` ``rows``.
ROW_COLUMNS = ("src", "image_path", "class", "given_split", "source", "group", "frame_number",
               "where", "key")


@dataclass(frozen=True)
class Scan:
    """What a layout holds: one row per (image, raw class), see :data:`ROW_COLUMNS`.

    ``key`` identifies the image across rows ("" in the folder layout: the stager keys an
    image there by split, source, file name and bytes); ``group`` is the table's id column
    ("" where it has none); ``where`` locates the row for errors. The folder layout adds
    ``from_sheet``: whether ``image_path`` came from a Capsule Vision sheet.
    """

    root: Path
    layout: str                      # "folder" | "table"
    rows: pd.DataFrame = field(repr=False, compare=False)
    split_folders: dict[str, str] = field(default_factory=dict)   # folder name -> split
    sheets: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    group_column: str = ""
    path_form: str = "relative to the root, '/' separators"


def is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in ("__MACOSX", "__pycache__")


def _subdirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not _skipped(p.name))


def _split_dirs(folder: Path) -> list[Path]:
    return [d for d in _subdirs(folder) if d.name.lower() in SPLIT_ALIASES]


def dataset_root(root: Path) -> Path:
    """``root``, or the single folder inside it that holds the split folders (``Dataset/``)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"--root {root}: folder not found")
    subs = _subdirs(root)
    if not _split_dirs(root) and len(subs) == 1 and _split_dirs(subs[0]) \
            and not any(is_image(p.name) for p in root.iterdir() if p.is_file()):
        log.info("entering %s (it holds the split folders)", subs[0])
        return subs[0]
    return root


def _images_under(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not _skipped(d))
        found += [Path(dirpath) / f for f in sorted(filenames) if is_image(f) and not _skipped(f)]
    return found


# --------------------------------------------------------------------------- folders
def scan_folders(root: Path) -> Scan:
    """The folder layout under ``root`` (see the module docstring)."""
    root = dataset_root(root)
    splits = _split_dirs(root)
    ignored: list[str] = []
    if splits:
        seen: dict[str, Path] = {}
        for d in splits:
            s = SPLIT_ALIASES[d.name.lower()]
            if s in seen:
                raise DataError(f"{root}: split folders {seen[s].name!r} and {d.name!r} are "
                                f"both the {s} split; keep one")
            seen[s] = d
        ignored = [str(d) for d in _subdirs(root) if d not in splits]
        for path in ignored:
            log.warning("%s: not a split folder (%s); ignored", path, ", ".join(SPLIT_ALIASES))
        bases = [(d, SPLIT_ALIASES[d.name.lower()]) for d in splits]
    else:
        bases = [(root, "")]
    names: dict[str, str] = {}     # class slug -> the name first seen
    records = []
    for base, split in bases:
        stray = [p for p in base.iterdir() if p.is_file() and is_image(p.name)]
        if stray:
            raise DataError(f"{min(stray)}: image outside a class folder (expected "
                            f"{base}/<Class>/[<Source>/]<file>)")
        class_dirs = _subdirs(base)
        if not class_dirs:
            raise DataError(f"{base}: no class folders in it (expected <Class>/[<Source>/]<file>)")
        for cdir in class_dirs:
            files = _images_under(cdir)
            if not files:
                raise DataError(f"{cdir}: class folder has no images "
                                f"({', '.join(IMAGE_SUFFIXES)}); remove it or add its images")
            cls = names.setdefault(slug(cdir.name), cdir.name)
            for f in files:
                below = f.relative_to(cdir).parts
                rel = f.relative_to(root).as_posix()
                records.append((str(f), rel, cls, split, below[0] if len(below) > 1 else "",
                                "", None, str(f), ""))
    rows = pd.DataFrame(records, columns=list(ROW_COLUMNS))
    folders = {d.name: s for d, s in bases if s}
    rows, sheets = _apply_sheets(root, rows, folders)
    return Scan(root=root, layout="folder", rows=rows, split_folders=folders,
                sheets=tuple(sheets), ignored=tuple(ignored))


def _apply_sheets(root: Path, rows: pd.DataFrame, folders: dict[str, str]
                  ) -> tuple[pd.DataFrame, list[str]]:
    """Take ``image_path`` from the Capsule Vision sheets where they exist; a sheet row whose
    image is missing, or whose label disagrees with the image's folder, is refused."""
    used = []
    by_rel = {rel: i for i, rel in enumerate(rows["image_path"])}
    image_path = rows["image_path"].tolist()
    from_sheet = [False] * len(rows)
    for name, split in folders.items():
        for cand in (root / name / SHEET_NAME.format(name), root / SHEET_NAME.format(name)):
            if cand.is_file():
                break
        else:
            continue
        table = read_table(cand)
        t = _table_rows(cand, table, root, classes=None, must_exist=False)
        for r in t.itertuples(index=False):
            rel = normalise_path(r.image_path)
            i = by_rel.get(rel)
            if i is None:
                tail = _tail_from(rel, name)
                i = by_rel.get(tail) if tail else None
            if i is None:
                raise DataError(f"{r.where}: image {r.image_path!r} is not in the folders "
                                f"under {root}")
            if slug(r[2]) != slug(rows.at[i, "class"]):
                raise DataError(f"{r.where}: {r.image_path!r} is labelled {r[2]!r} but sits in "
                                f"the class folder {rows.at[i, 'class']!r}")
            image_path[i], from_sheet[i] = r.image_path, True
        used.append(str(cand))
        in_folder = rows["given_split"] == split
        unlisted = int((in_folder & ~pd.Series(from_sheet, index=rows.index)).sum())
        if unlisted:
            log.warning("%s: %d image(s) of %s/ are not listed; their image_path is the path "
                        "under %s", cand, unlisted, name, root)
        log.info("image paths as written in %s", cand)
    rows = rows.assign(image_path=image_path, from_sheet=from_sheet)
    return rows, used


def _tail_from(rel: str, folder: str) -> str | None:
    """``rel`` from the split folder ``folder`` on (a sheet path with a prefix before it)."""
    parts = rel.split("/")
    return "/".join(parts[parts.index(folder):]) if folder in parts else None


def locate(rel: str, bases: tuple[Path, ...]) -> Path:
    """The file a table's path names: itself where absolute and present, else under the first
    of ``bases`` that has it (the root, the table's folder, the folder above it: the
    challenge's sheets sit in their split folder and name paths from ``Dataset/``); a path
    from another machine (``E:/...``, ``/home/...``) by its tail under one of them. The
    first candidate where none exists."""
    p = Path(rel)
    if p.is_absolute() and p.is_file():
        return p
    parts = [x for x in rel.split("/") if x]
    foreign = p.is_absolute() or bool(re.match(r"^[A-Za-z]:", rel))
    tails = [parts[i:] for i in range(1, len(parts))] if foreign else []
    for cand in ([p] if not foreign else []) + [Path(*t) for t in tails]:
        for base in bases:
            if (base / cand).is_file():
                return base / cand
    return p if p.is_absolute() else bases[0] / rel


def normalise_path(raw: str) -> str:
    """A table's image path with ``/`` separators and no leading ``./``."""
    p = PureWindowsPath(str(raw).strip()).as_posix() if "\\" in str(raw) else str(raw).strip()
    while p.startswith("./"):
        p = p[2:]
    return p


# --------------------------------------------------------------------------- tables
def read_table(path: Path) -> pd.DataFrame:
    """A label table (CSV with its delimiter sniffed, Parquet, Excel) with string cells."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: label table not found")
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(f"{path}: a label table is CSV/TSV/TXT, Parquet or Excel "
                        f"({', '.join(TABLE_SUFFIXES)}), not {suffix or 'a file without a suffix'}"
                        "; save it in one of those forms (docs/your-own-dataset.md)")
    try:
        if suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        elif suffix in (".xlsx", ".xlsm", ".xls"):
            df = pd.read_excel(path, dtype=object)
        else:
            df = pd.read_csv(path, sep=None, engine="python", dtype=str, keep_default_na=False,
                             encoding="utf-8-sig")
    except ImportError as exc:
        raise DataError(f"{path}: reading {suffix} needs {exc.name} "
                        "(pip install openpyxl for Excel)") from None
    except Exception as exc:  # noqa: BLE001 - pandas' engines raise their own types
        raise DataError(f"{path}: cannot read the table ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _where(path: Path, i: int) -> str:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return f"{path}, row {i + 1}"
    return f"{path}, {'row' if suffix.startswith('.xls') else 'line'} {i + 2}"


def _column(df: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    lower = {c.lower(): c for c in df.columns}
    return next((lower[n] for n in names if n in lower), None)


def _cell(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip()


def _binary(v) -> float | None:
    s = _cell(v).lower()
    if s in ("1", "1.0", "true"):
        return 1.0
    if s in ("0", "0.0", "false", ""):
        return 0.0
    return None


def _onehot_columns(df: pd.DataFrame, taken: set[str], classes: tuple[str, ...] | None
                    ) -> list[str]:
    if classes:
        by = {slug(c): c for c in df.columns}
        return [by[slug(c)] for c in classes if slug(c) in by]
    return [c for c in df.columns if c not in taken and len(df) and not is_index_column(c)
            and all(_binary(v) is not None for v in df[c])]


def is_index_column(name: str) -> bool:
    """A table's unnamed index column (``Unnamed: 0`` from a sheet saved with its index)."""
    return bool(re.fullmatch(r"Unnamed: \d+", str(name)))


def _table_rows(path: Path, df: pd.DataFrame, root: Path, *,
                classes: tuple[str, ...] | None, must_exist: bool = True) -> pd.DataFrame:
    """One row per (image, class) of a label table; see the module docstring."""
    pcol = _column(df, PATH_COLUMNS)
    if pcol is None:
        raise DataError(f"{path}: no image path column ({' | '.join(PATH_COLUMNS)}); "
                        f"found {list(df.columns)}")
    ccol = _column(df, CLASS_COLUMNS)
    scol, gcol = _column(df, ("split",)), _column(df, GROUP_COLUMNS)
    srccol, fcol = _column(df, SOURCE_COLUMNS), _column(df, ("frame_number",))
    taken = {c for c in (pcol, ccol, scol, gcol, srccol, fcol) if c}
    onehot = [] if ccol else _onehot_columns(df, taken, classes)
    if not ccol and not onehot:
        raise DataError(f"{path}: no class column ({' | '.join(CLASS_COLUMNS)}) and no one-hot "
                        f"class columns (0/1 values); found {list(df.columns)}")
    records = []
    for i, row in enumerate(df.itertuples(index=False)):
        cells = dict(zip(df.columns, row))
        where = _where(path, i)
        raw = _cell(cells[pcol])
        if not raw:
            continue  # a blank row (the challenge's own loader drops them too)
        if ccol:
            names = [_cell(cells[ccol])]
            if not names[0]:
                raise DataError(f"{where}: empty class in column {ccol!r}")
        else:
            names = [c for c in onehot if _binary(cells[c]) == 1.0]
            if not names:
                raise DataError(f"{where}: no class: every one-hot column ({', '.join(onehot)}) "
                                "is 0")
        split = ""
        if scol:
            given = _cell(cells[scol]).lower()
            if given not in SPLIT_ALIASES:
                raise DataError(f"{where}: split {cells[scol]!r} is not one of "
                                f"{', '.join(SPLIT_ALIASES)}")
            split = SPLIT_ALIASES[given]
        rel = normalise_path(raw)
        src = locate(rel, (root, path.parent, path.parent.parent))
        if not is_image(src.name):
            raise DataError(f"{where}: {raw!r} is not an image file (one of "
                            f"{', '.join(IMAGE_SUFFIXES)}); list images only")
        if must_exist and not src.is_file():
            raise DataError(f"{where}: image {raw!r} not found (looked under {root}, "
                            f"{path.parent} and {path.parent.parent})")
        frame = _cell(cells[fcol]) if fcol else ""
        for name in names:
            records.append((str(src), raw, name, split, _cell(cells[srccol]) if srccol else "",
                            _cell(cells[gcol]) if gcol else "", frame or None, where, rel))
    if not records:
        raise DataError(f"{path}: no rows with an image path")
    return pd.DataFrame(records, columns=list(ROW_COLUMNS))


def scan_table(labels: Path, root: Path, *, classes: tuple[str, ...] | None = None) -> Scan:
    """The table layout: ``labels`` read against ``root`` (see the module docstring)."""
    root, labels = Path(root), Path(labels)
    if not root.is_dir():
        raise DataError(f"--root {root}: folder not found")
    df = read_table(labels)
    rows = _table_rows(labels, df, root, classes=classes)
    gcol = _column(df, GROUP_COLUMNS) or ""
    return Scan(root=root, layout="table", rows=rows, sheets=(str(labels),),
                group_column=gcol, path_form=f"as written in {labels.name}")
