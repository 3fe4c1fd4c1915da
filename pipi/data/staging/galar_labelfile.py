"""Galar label files: the on-disk format and a fast, checked, columnar reader.

Galar (Le Floch et al., Sci Data 2025) labels every frame of a video in
``Labels/<video_id>.csv``: comma-delimited, one row per frame, one-hot 0/1 columns and a
``frame`` column, in two header variants (``reference/datasets.md``)::

    27 columns: index, z-line, pylorus, ..., lymphangioectasis, frame
    32 columns: bubbles, dirt, no view, reduced view, good view, <the 27 above>

:func:`read_label_files` parses many files with pyarrow's multithreaded CSV reader: files
with the same header are concatenated and parsed in one call (a fixed ~1 ms per call would
otherwise dominate small files), labels as int8 columns, no Python loop over rows. Only when
a check fails does a slow ``csv``-module pass run, to name the file and line of the problem.

Only the columns a mapping uses (``strict``) are checked into a refusal; any other column
is read leniently (a value that is not 0/1 becomes -1, counted in ``LabelTable.unchecked``).
The ``section`` column is read as whatever the file holds: section names (``stomach``,
``small intestine``, ...; the GalKva-2026 release's form) or 0/1 numbers
(``LabelTable.section_form``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from pipi.errors import DataError

__all__ = [
    "ALL_COLUMNS",
    "HEADER_27",
    "HEADER_32",
    "LABEL_COLUMNS",
    "SECTION_COLUMNS",
    "SECTION_FORMS",
    "TECHNICAL_COLUMNS",
    "LabelTable",
    "canonical_section",
    "line_of_row",
    "read_label_file",
    "read_label_files",
]

#: One-hot columns of every Galar label file, in file order.
LABEL_COLUMNS: tuple[str, ...] = (
    "z-line", "pylorus", "ampulla of vater", "ileocecal valve", "section", "mouth", "esophagus",
    "stomach", "small intestine", "colon", "ulcer", "polyp", "active bleeding", "blood",
    "erythema", "erosion", "angiectasia", "IBD", "foreign body", "esophagitis", "varices",
    "hematin", "celiac", "cancer", "lymphangioectasis",
)
#: Image-quality columns in front of the 32-column variant (6 of the 80 real videos).
TECHNICAL_COLUMNS: tuple[str, ...] = ("bubbles", "dirt", "no view", "reduced view", "good view")
HEADER_27: tuple[str, ...] = ("index",) + LABEL_COLUMNS + ("frame",)
HEADER_32: tuple[str, ...] = TECHNICAL_COLUMNS + HEADER_27
#: Every Galar column a label file may hold (the 32-column header).
ALL_COLUMNS: frozenset[str] = frozenset(HEADER_32)
#: Section (anatomical region) columns: exactly one of them is 1 on a frame.
SECTION_COLUMNS: tuple[str, ...] = ("mouth", "esophagus", "stomach", "small intestine", "colon")
#: How a file writes its ``section`` column: by name, or as 0/1 numbers.
SECTION_FORMS: tuple[str, ...] = ("names", "0/1")
#: Other spellings of the section names (after lower-casing and collapsing ``_``/``-``/spaces).
_SECTION_ALIASES = {"oesophagus": "esophagus", "small bowel": "small intestine",
                    "large intestine": "colon", "large bowel": "colon", "oral cavity": "mouth"}


def canonical_section(name) -> str:
    """A section name as written in ``SECTION_COLUMNS`` ("Small_Intestine" -> "small
    intestine"); a name that is not a Galar section is returned lower-cased; "" stays ""."""
    key = re.sub(r"[\s_\-]+", " ", str(name)).strip().lower()
    key = _SECTION_ALIASES.get(key, key)
    return key


@dataclass(frozen=True)
class LabelTable:
    """One parsed ``Labels/<video>.csv``: frame numbers and the 0/1 label columns."""

    path: Path
    columns: tuple[str, ...]  # label columns present (25, or 30 with the technical ones)
    frame: np.ndarray  # (N,) int64 frame numbers
    values: np.ndarray  # (N, len(columns)) int8: 0/1, -1 where an unchecked column is not 0/1
    #: how the ``section`` column is written: "names", "0/1" or "empty" (every cell empty)
    section_form: str = "0/1"
    #: (N,) section names of the ``section`` column ("" where empty); None for "0/1"
    section_names: np.ndarray | None = None
    #: unchecked column -> number of its values that are not 0/1 (read as -1)
    unchecked: dict = field(default_factory=dict)

    @property
    def header_variant(self) -> int:
        return 32 if "good view" in self.columns or len(self.columns) > 25 else 27

    def column(self, name: str) -> np.ndarray | None:
        """(N,) int8 values of one column, or None if this file does not have it."""
        try:
            return self.values[:, self.columns.index(name)]
        except ValueError:
            return None

    def sections(self) -> np.ndarray:
        """(N,) anatomical section of every frame, by name: the ``section`` column where it
        names one, else the one-hot section column that is 1 ("" if none or several)."""
        onehot = np.stack([self.column(c) == 1 for c in SECTION_COLUMNS], axis=1)  # (N, 5)
        names = np.asarray(SECTION_COLUMNS + ("",), dtype=object)
        pick = np.where(onehot.sum(axis=1) == 1, onehot.argmax(axis=1), len(SECTION_COLUMNS))
        out = names[pick]
        if self.section_names is not None:
            named = self.section_names != ""
            out[named] = self.section_names[named]
        return out


def _check_header(path: Path, header: list[str]) -> None:
    unknown = [c for c in header if c not in ALL_COLUMNS]
    if unknown:
        raise DataError(
            f"{path}, line 1: unknown column(s) {unknown}. A Galar label file has the 27 "
            f"columns {list(HEADER_27)}, optionally preceded by {list(TECHNICAL_COLUMNS)}"
        )
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        raise DataError(f"{path}, line 1: duplicated column(s) {dup}")
    missing = [c for c in HEADER_27 if c not in header]
    if missing:
        raise DataError(
            f"{path}, line 1: missing column(s) {missing}; every Galar label file has "
            f"{list(HEADER_27)}"
        )
    tech = [c for c in TECHNICAL_COLUMNS if c in header]
    if tech and len(tech) != len(TECHNICAL_COLUMNS):
        raise DataError(
            f"{path}, line 1: has {tech} but not {[c for c in TECHNICAL_COLUMNS if c not in tech]}; "
            "the 32-column variant has all five image-quality columns"
        )


def _number01(text: str) -> int:
    """0 or 1 for a 0/1 cell ("1", "1.0", " 0 "), -1 for anything else."""
    try:
        x = float(text)
    except ValueError:
        return -1
    return int(x) if x in (0.0, 1.0) else -1


def _first_bad_line(path: Path, header: list[str], strict: frozenset[str]) -> str:
    """Slow path, run only on error: find the first bad line with the csv module."""
    n = len(header)
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            line = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != n:
                return f"line {line}: {len(row)} fields, the header has {n}"
            for name, cell in zip(header, row):
                if name != "frame" and name not in strict:
                    continue  # a column the mapping does not use is never a refusal
                v = cell.strip()
                if not v:
                    return f"line {line}: column {name!r} is empty"
                try:
                    x = float(v)
                except ValueError:
                    return f"line {line}: column {name!r} holds {v!r}, not a number"
                if name == "frame":
                    if x != int(x) or x < 0:
                        return f"line {line}: frame {v!r} is not a non-negative integer"
                elif x not in (0.0, 1.0):
                    return f"line {line}: column {name!r} holds {v!r}; labels are 0 or 1"
    return "a value could not be parsed"


#: CSV text parsed per pyarrow call when files are batched (64 MB: a dozen real videos).
BATCH_BYTES = 1 << 26
_THREADS_FROM = 1 << 22  # threads pay off from ~4 MB of text on


@dataclass(frozen=True)
class _Source:
    path: Path
    header: tuple[str, ...]
    body: bytes  # the file after its header line, ending with a newline
    rows: int | None  # data rows, when plain enough to batch (no blank lines, no CR)


def _load(path: Path) -> _Source:
    """Read one file's bytes and check its header (line 1)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read label file ({exc})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")
    nl = data.find(b"\n")
    first, body = (data, b"") if nl < 0 else (data[:nl], data[nl + 1:])
    header = [c.strip() for c in next(csv.reader([first.decode("utf-8", "replace")]), [])]
    if not any(header):
        raise DataError(f"{path}, line 1: empty label file; expected the Galar header")
    _check_header(path, header)
    if body and not body.endswith(b"\n"):
        body += b"\n"
    plain = b"\r" not in body and b"\n\n" not in body and not body.startswith(b"\n")
    return _Source(path, tuple(header), body, body.count(b"\n") if plain else None)


def _label_cols(header) -> list[str]:
    return [c for c in header if c not in ("index", "frame")]


def _parse(buf: bytes, header: tuple[str, ...], strict: frozenset[str]):
    """The table of CSV text without its header; None if a strict cell is bad. Unchecked
    columns are int8 (first try) or text (second try)."""
    cols = _label_cols(header)
    opts = pacsv.ReadOptions(column_names=list(header), block_size=1 << 22,
                             use_threads=len(buf) > _THREADS_FROM)
    for label_type, other, frame_type in ((pa.int8(), pa.int8(), pa.int64()),
                                          (pa.float32(), pa.string(), pa.float64())):
        types = {c: label_type if c in strict else other for c in cols} | {"frame": frame_type}
        try:  # float: a file written as "1.0"; text: an unchecked column holding words
            table = pacsv.read_csv(pa.py_buffer(buf), read_options=opts,
                                   convert_options=pacsv.ConvertOptions(column_types=types))
        except pa.ArrowInvalid:
            continue
        return table.combine_chunks()
    return None


def _lenient(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """An unchecked column: (int8 0/1 or -1, the stripped text of each cell or None)."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_string(arr.type):
        v = arr.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int16)
        return np.where((v == 0) | (v == 1), v, -1).astype(np.int8), None
    enc = arr.dictionary_encode()  # few distinct values: map those, not every row
    words = [str(w).strip() for w in enc.dictionary.to_pylist()]
    idx = enc.indices.fill_null(len(words)).to_numpy(zero_copy_only=False)
    codes = np.asarray([_number01(w) for w in words] + [-1], np.int8)
    return codes[idx], np.asarray(words + [""], dtype=object)[idx]


def _arrays(parsed, header: tuple[str, ...], strict: frozenset[str]):
    """Checked (frame (N,) int64, values (N, C) int8, section text (N,) or None, unchecked
    counts); None if a strict check fails."""
    if parsed is None:
        return None
    table = parsed
    cols = _label_cols(header)
    if any(table.column(c).null_count for c in (*strict.intersection(cols), "frame")):
        return None  # an empty cell
    frame = _numpy(table.column("frame"))
    values = np.empty((table.num_rows, len(cols)), dtype=np.int8)  # (N, C)
    section, unchecked = None, {}
    for i, c in enumerate(cols):
        if c in strict:
            v = _numpy(table.column(c))
            if ((v != 0) & (v != 1)).any():
                return None
            values[:, i] = v
        else:
            values[:, i], text = _lenient(table.column(c))
            if c == "section":
                section = text
            unchecked[c] = values[:, i] == -1
    if (frame < 0).any() or (frame != np.floor(frame)).any():
        return None
    return frame.astype(np.int64, copy=False), values, section, unchecked


def _table(src: _Source, frame, values, section, unchecked, lo: int = 0, hi=None) -> LabelTable:
    """The rows ``lo:hi`` of a parsed batch as the table of ``src``."""
    frame, values = frame[lo:hi], values[lo:hi]
    if frame.shape[0] == 0:
        raise DataError(f"{src.path}: no frame rows under the header")
    if np.unique(frame).shape[0] != frame.shape[0]:
        dup = _first_duplicate(frame)
        line = _line_of_frame(src.path, list(src.header), dup, nth=2)
        raise DataError(f"{src.path}, line {line}: frame {dup} is listed twice")
    cols = tuple(_label_cols(src.header))
    form, names = "0/1", None
    if "section" in cols and section is None and (values[:, cols.index("section")] == -1).all():
        form, names = "empty", np.full(len(frame), "", dtype=object)  # parsed as numbers
    elif "section" in cols and section is not None:
        text = section[lo:hi]
        filled = text != ""
        numeric = values[:, cols.index("section")] != -1
        if not filled.any():
            form, names = "empty", np.full(len(text), "", dtype=object)
        elif (filled & ~numeric).any():  # words: the section by name
            form = "names"
            names = np.asarray([canonical_section(w) for w in text], dtype=object)
    counts = {c: int(m[lo:hi].sum()) for c, m in unchecked.items()
              if not (c == "section" and form != "0/1")}
    return LabelTable(path=src.path, columns=cols, frame=frame, values=values,
                      section_form=form, section_names=names,
                      unchecked={c: n for c, n in counts.items() if n})


def _read_one(src: _Source, strict: frozenset[str]) -> LabelTable:
    if not src.body:
        return _table(src, np.zeros(0, np.int64),
                      np.zeros((0, len(src.header) - 2), np.int8), None, {})
    arrays = _arrays(_parse(src.body, src.header, strict), src.header, strict)
    if arrays is None:
        raise DataError(f"{src.path}, {_first_bad_line(src.path, list(src.header), strict)}")
    return _table(src, *arrays)


def _read_batch(batch: list[_Source], strict: frozenset[str]) -> list[LabelTable]:
    """Parse files of one header in one pyarrow call; on any problem, file by file."""
    if len(batch) > 1 and all(s.rows for s in batch):
        header = batch[0].header
        arrays = _arrays(_parse(b"".join(s.body for s in batch), header, strict), header, strict)
        if arrays is not None and arrays[0].shape[0] == sum(s.rows for s in batch):
            ends = np.cumsum([s.rows for s in batch])
            return [_table(s, *arrays, lo=e - s.rows, hi=e) for s, e in zip(batch, ends)]
    return [_read_one(s, strict) for s in batch]


def read_label_files(
    paths: Sequence[Path], *, strict: Collection[str] | None = None,
    on_file: Callable[[int], None] | None = None,
) -> list[LabelTable]:
    """Read and check Galar label files (either header variant), columnar and batched.

    ``strict``: the label columns that must hold 0/1 (``1.0`` accepted) in every row, i.e.
    the columns a mapping uses; default every label column but ``section``. Any other
    column is never a refusal: a value that is not 0/1 is read as -1 and counted
    (``LabelTable.unchecked``); ``section`` (when not strict) is read as section names or as
    0/1, whichever the file holds (``LabelTable.section_form``). Frame numbers must be
    non-negative integers, unique within a file. Errors name the file and the line.
    ``on_file(n)`` is called as files finish (a progress bar's ``update``).
    """
    strict = frozenset(LABEL_COLUMNS + TECHNICAL_COLUMNS) - {"section"} if strict is None \
        else frozenset(strict)
    out: dict[int, LabelTable] = {}
    pending: dict[tuple[str, ...], list[tuple[int, _Source]]] = {}

    def flush(key: tuple[str, ...]) -> None:
        items = pending.pop(key, [])
        for (i, _), table in zip(items, _read_batch([s for _, s in items], strict)):
            out[i] = table
        if on_file is not None and items:
            on_file(len(items))

    for i, p in enumerate(paths):
        src = _load(Path(p))
        pending.setdefault(src.header, []).append((i, src))
        if sum(len(s.body) for _, s in pending[src.header]) >= BATCH_BYTES:
            flush(src.header)
    for key in list(pending):
        flush(key)
    return [out[i] for i in range(len(paths))]


def read_label_file(path: Path, *, strict: Collection[str] | None = None) -> LabelTable:
    """Read and check one Galar label file; see :func:`read_label_files`."""
    return read_label_files([path], strict=strict)[0]


def _numpy(col: pa.ChunkedArray) -> np.ndarray:
    """One null-free column as numpy, zero-copy when it is a single chunk (the usual case)."""
    return col.chunk(0).to_numpy(zero_copy_only=True) if col.num_chunks == 1 else col.to_numpy()


def _first_duplicate(frame: np.ndarray) -> int:
    seen: set[int] = set()
    for f in frame.tolist():
        if f in seen:
            return f
        seen.add(f)
    raise AssertionError("no duplicate")


def _line_of_frame(path: Path, header: list[str], frame: int, *, nth: int = 1) -> int | None:
    k = header.index("frame")
    hits = 0
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            if len(row) > k and row[k].strip() and float(row[k]) == frame:
                hits += 1
                if hits == nth:
                    return reader.line_num
    return None


def line_of_row(table: LabelTable, row: int) -> int | None:
    """Line of the file holding ``table`` row ``row`` (for error messages; slow path)."""
    header = ["index", *table.columns, "frame"]  # only the frame column's position matters
    with open(table.path, encoding="utf-8-sig", newline="") as fh:
        header = [c.strip() for c in next(csv.reader(fh), header)]
    return _line_of_frame(table.path, header, int(table.frame[row]))
