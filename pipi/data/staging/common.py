"""What the stagers share: the staged folder's format (its frame index, manifest hashes and
count tables, :func:`load_staged`) and the staging steps (argument checks, metadata CSV
reading, image checks, placing images, publishing the staged folder).

A stager builds its output in a temporary folder beside ``OUT`` (:func:`staging_area`),
writes the frame index there (:func:`write_index`) and renames it into place at the end
(:func:`pipi.paths.publish_dir`, shared with the synthesizers), so a failure leaves nothing
half-written.

Hashes (recomputable by anyone):

* ``content_sha256`` (:func:`split_sha256`) = SHA-256 of the UTF-8 bytes of
  ``json.dumps(video_to_split, sort_keys=True, separators=(",", ":"))``: the split
  assignment alone.
* ``data_digest`` (:func:`compute_data_digest`) = SHA-256 of the UTF-8 lines
  ``"<relpath>\\t<class>\\t<sha256 of file>\\n"`` over the sorted frame index, prefixed by
  the line ``"split:<content_sha256>\\n"``: changes whenever the split, the labels or any
  image byte changes. Caches and run pairing key on it.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from PIL import Image

from pipi.classes import CLASSES
from pipi.data.progress import tqdm
from pipi.errors import DataError
from pipi.paths import staging_dir

__all__ = [
    "FRAME_COLUMNS",
    "LINK_MODES",
    "PER_CLASS",
    "SCHEMA_VERSION",
    "SPLITS",
    "StageResult",
    "check_image",
    "check_link",
    "check_out",
    "compute_data_digest",
    "count_table",
    "format_count_table",
    "hash_images",
    "load_staged",
    "place",
    "read_metadata_text",
    "sniff_delimiter",
    "split_sha256",
    "staging_area",
    "write_index",
]

#: How a stager places images: hardlinks (copies across devices), symlinks or copies.
LINK_MODES = ("hardlink", "symlink", "copy")


# --------------------------------------------------------------------------- the staged format
SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
#: The columns of ``frames.parquet``, one row per (frame, class).
FRAME_COLUMNS = (
    "path", "filename", "class", "class_index", "video_id", "frame_number", "split", "multilabel",
)


@dataclass(frozen=True)
class StageResult:
    out: Path
    manifest: dict
    frames: pd.DataFrame
    counts: pd.DataFrame

    @property
    def data_digest(self) -> str:
        return self.manifest["data_digest"]


# --------------------------------------------------------------------------- hashes
def split_sha256(video_to_split: dict[str, str]) -> str:
    """SHA-256 of the canonical JSON of a {video_id: split} assignment."""
    blob = json.dumps(video_to_split, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def compute_data_digest(content_sha256: str, rows: list[tuple[str, str, str]]) -> str:
    """Digest of split + (relpath, class, file sha256) rows; see the module docstring."""
    h = hashlib.sha256(f"split:{content_sha256}\n".encode())
    for relpath, cls, fsha in sorted(rows):
        h.update(f"{relpath}\t{cls}\t{fsha}\n".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- counts
PER_CLASS = tuple(f"{s}_per_class" for s in SPLITS)


def count_table(frames: pd.DataFrame) -> pd.DataFrame:
    """Per-class, per-split frame counts under both conventions.

    Columns ``train``/``val``/``test``: each frame once, on its ``primary`` row (the paper's
    Table convention; every row counts where ``frames`` has no ``primary`` column).
    Columns ``train_per_class``/...: one per (frame, class) row, so a multilabel frame counts
    once per class (pipi's frame index). The ``Total`` row counts frames in both.
    """
    def table(rows: pd.DataFrame) -> pd.DataFrame:
        return (rows.groupby(["class", "split"]).size().unstack("split")
                .reindex(index=list(CLASSES), columns=list(SPLITS)).fillna(0).astype(int))

    prim = frames[frames["primary"]] if "primary" in frames else frames
    t = pd.concat([table(prim), table(frames).set_axis(list(PER_CLASS), axis=1)], axis=1)
    n = frames.groupby("split")["filename"].nunique().reindex(list(SPLITS)).fillna(0).astype(int)
    t.loc["Total"] = list(n) * 2
    t.index.name = "Class"
    return t


def format_count_table(counts: pd.DataFrame, rule: str) -> str:
    """Markdown table in the shape of the paper's Table 1 (Class | Train | Val | Test), the
    per-(frame, class) counts beside it, and the counting ``rule`` (how a frame with several
    classes counts once) under it."""
    head = "| Class | Train | Val | Test | Train (per class) | Val (per class) | Test (per class) |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for cls, row in counts.iterrows():
        name = "**Total (frames)**" if cls == "Total" else cls
        cells = " | ".join(f"{row[c]:,}" for c in (*SPLITS, *PER_CLASS))
        lines.append(f"| {name} | {cells} |")
    note = (f"Train/Val/Test: the paper's convention, {rule}. (per class): a frame counts once "
            "in each of its classes (pipi's frame index). Total: frames.")
    lines += ["", note]
    return "\n".join(lines) + "\n"


def load_staged(root: Path) -> tuple[pd.DataFrame, dict]:
    """Read a staged folder's frame index and manifest, with clear errors."""
    root = Path(root)
    idx, man = root / "frames.parquet", root / "manifest.json"
    if not idx.is_file() or not man.is_file():
        raise DataError(
            f"{root}: not a staged dataset (frames.parquet and manifest.json expected); "
            "run `pipi stage kvasir ...` or `mlflow run . -e stage` first"
        )
    return pd.read_parquet(idx), json.loads(man.read_text())


# --------------------------------------------------------------------------- arguments
def check_link(link: str) -> None:
    if link not in LINK_MODES:
        raise DataError(f"link must be hardlink, symlink or copy, got {link!r}")


def check_out(out: Path) -> None:
    """Refuse an ``out`` that exists and is not an empty folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out}: output folder exists and is not empty; choose a new --out")


# --------------------------------------------------------------------------- metadata CSV
def sniff_delimiter(text: str, default: str) -> str:
    """The delimiter of a CSV's header line (``;``, ``,`` or a tab), ``default`` if unclear."""
    first = text.splitlines()[0] if text.strip() else ""
    try:
        return csv.Sniffer().sniff(first, delimiters=";,\t").delimiter
    except csv.Error:
        return default


def read_metadata_text(path: Path, *, default: str, missing: str) -> tuple[str, str]:
    """A metadata CSV's text (a UTF-8 BOM dropped) and its sniffed delimiter.

    ``missing`` completes the error when the file is absent (``"<path>: <missing>"``).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {missing}")
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    return text, sniff_delimiter(text, default)


# --------------------------------------------------------------------------- images
def check_image(path: Path) -> str:
    """Fully decode an image (catches truncated/corrupt files) and return its SHA-256."""
    data = path.read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as exc:  # PIL raises many types for corrupt data
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "cannot identify image file" in why:   # PIL names its in-memory buffer
            why = "not an image PIL can read"
        raise DataError(f"{path}: unreadable or corrupt image ({why})") from None
    return hashlib.sha256(data).hexdigest()


def hash_images(paths: Iterable[Path], *, workers: int, progress: bool,
                where: Callable[[Path], str] | None = None) -> dict[Path, str]:
    """:func:`check_image` over ``paths`` (threads): path -> SHA-256.

    ``where(path)`` is appended to the error of a bad image (e.g. the label file and line
    that listed it).
    """
    def verify(p: Path) -> str:
        try:
            return check_image(p)
        except DataError as exc:
            if where is None:
                raise
            raise DataError(f"{exc} ({where(p)})") from None

    unique = list(dict.fromkeys(paths))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(zip(unique, tqdm(
            pool.map(verify, unique), total=len(unique), desc="verify images",
            unit="img", disable=not progress,
        )))


def place(src: Path, dst: Path, link: str) -> None:
    """Put ``src`` at ``dst`` as a hardlink (a copy across devices), a symlink or a copy.

    Never writes through an existing ``dst`` (a hard link to a user's image would carry the
    new bytes into that image): every form creates ``dst`` exclusively, and a ``dst`` that
    exists raises :class:`FileExistsError` (the stager names both images).
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link == "hardlink":
        try:
            os.link(src, dst)
            return
        except FileExistsError:
            raise
        except OSError:  # cross-device (or a file system without links): a copy
            pass
    elif link == "symlink":
        os.symlink(Path(src).resolve(), dst)
        return
    with open(src, "rb") as fin, open(dst, "xb") as fout:  # "x": refuse an existing dst
        shutil.copyfileobj(fin, fout, 1 << 20)
    shutil.copystat(src, dst)


# --------------------------------------------------------------------------- output
@contextlib.contextmanager
def staging_area(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out``, removed on exit (publish ``<it>/staged`` first); a
    full disk becomes one line (:class:`DataError`)."""
    tmp = staging_dir(out)
    try:
        yield tmp
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DataError(f"--out {out}: the disk is full ({exc.strerror}) while staging; "
                        "nothing was written: free space or choose --out on another disk, "
                        "or --link hardlink/symlink to place the images without copying them"
                        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_index(stage_dir: Path, frames: pd.DataFrame, manifest: dict, counts: pd.DataFrame,
                counts_md: str) -> None:
    """Write ``frames.parquet``, ``manifest.json``, ``counts.md`` and ``counts.csv``."""
    frames.to_parquet(stage_dir / "frames.parquet", index=False)
    (stage_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (stage_dir / "counts.md").write_text(counts_md)
    counts.to_csv(stage_dir / "counts.csv")
