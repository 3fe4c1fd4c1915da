"""Per-frame prediction files made outside pipi, read and joined to the staged frames.

Accepted forms (one row per frame, one probability per class of the staged data, summing to
1: Kvasir-Capsule's 14, or a staged image dataset's own class set; a frame listed once
per label, as pipi's own predictions list a multilabel frame, is one frame when its rows
agree to :data:`REPEAT_TOLERANCE`):

* CSV (``.csv``, ``.csv.gz``, ``.tsv``), Parquet (``.parquet``, ``.pq``) or Excel
  (``.xlsx``): the frame as ``filename`` (the image's file name, or its path inside the
  staged folder; a ``path`` column beside it that holds staged paths is used first), as
  ``video_id`` + ``frame_number``, or as ``image_path`` (a staged image dataset's path as the
  dataset wrote it, ``\\`` or ``/``: the Capsule Vision 2024 challenge's prediction sheet);
  then one probability column per class, named by class
  (any casing, spacing, hyphens or underscores: ``Blood - fresh``, ``blood_fresh``,
  ``BloodFresh``). Columns that describe the frame (``label``, ``split``,
  ``predicted_class``, ...; :data:`INFO_COLUMNS`) are ignored; any other column is an
  unknown class and refused.
* NPZ: arrays ``filenames`` (N,) and ``probs`` (N, K) in the staged data's class order
  (Kvasir's: :data:`pipi.classes.CLASSES`), or in the order of an optional ``classes`` array.

:func:`join_predictions` matches the rows to a staged release: every test frame must be
there, no frame outside the test split (or the whole val split, which is then kept too).
Every problem is one :class:`DataError` line naming the file; nothing is half-read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.classes import KVASIR, ClassSet
from pipi.errors import DataError

__all__ = ["INFO_COLUMNS", "REPEAT_TOLERANCE", "SUM_TOLERANCE", "Joined", "join_predictions",
           "read_prediction_file"]

#: Largest |sum of a row's probabilities - 1| accepted (a CSV written with 4 decimals is
#: off by at most 14 * 0.00005 = 0.0007 with Kvasir's 14 classes).
SUM_TOLERANCE = 1e-3
#: Largest difference between the probabilities of two rows of one frame (a multilabel frame
#: is listed once per label, with the same probabilities) that still reads as one prediction.
REPEAT_TOLERANCE = 1e-6
#: Names of the frame key columns (the first of each group that is present is used).
FILENAME_COLUMNS = ("filename", "file_name", "file", "image", "path")
#: Columns that describe a frame rather than give a probability (ignored).
INFO_COLUMNS = frozenset({"label", "label_name", "labels", "class", "class_name", "true_label",
                          "true_class", "target", "y_true", "split", "predicted_class",
                          "predicted", "prediction", "pred", "y_pred", "seed", "cell",
                          "backbone", "capsule_system", "patient_id", "index", "unnamed: 0"})
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".gz": "csv", ".parquet": "parquet",
             ".pq": "parquet", ".xlsx": "excel", ".npz": "npz"}
#: The frame key of a staged image dataset: its path exactly as the dataset wrote it.
IMAGE_PATH = "image_path"
_SHOWN = 5


def _fail(path: Path, msg: str) -> DataError:
    return DataError(f"{path}: {msg}")


def _examples(values) -> str:
    values = [str(v) for v in values]
    more = f", ... ({len(values)} in all)" if len(values) > _SHOWN else ""
    return ", ".join(values[:_SHOWN]) + more


def _shown(value) -> str:
    """A cell's value as a reader writes it: ``'abc'``, ``NaN``, ``inf``, ``1.5`` (never a
    numpy repr such as ``np.float64(nan)``)."""
    if isinstance(value, str):
        return repr(value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        return repr(str(value))
    return "NaN (an empty or missing value)" if np.isnan(x) else f"{x:g}"


def _index(classes: ClassSet, name: str) -> int | None:
    try:
        return classes.index(name)
    except KeyError:
        return None


def _classes_text(classes: ClassSet) -> str:
    which = "" if classes.is_kvasir else f"the staged data's {len(classes)} classes "
    return f"{which}{list(classes.names)}"


def read_prediction_file(path: Path, classes: ClassSet = KVASIR
                         ) -> tuple[pd.DataFrame, np.ndarray]:
    """(frame keys, probabilities ``(N, K)`` in the order of ``classes``) of a prediction file.

    ``classes``: the staged data's class set (Kvasir-Capsule's 14 by default). The keys frame
    has a ``filename`` column, ``video_id`` and ``frame_number``, or ``image_path``.
    """
    path = Path(path)
    if path.is_dir():
        raise _fail(path, "is a folder; pass the prediction file itself (.csv, .parquet, .xlsx "
                    "or .npz)")
    if not path.is_file():
        raise _fail(path, "no such file")
    kind = _SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise _fail(path, f"unknown prediction file type {path.suffix!r}; use .csv, .parquet, "
                    ".xlsx or .npz")
    if kind == "npz":
        keys, probs = _read_npz(path, classes)
    else:
        keys, probs = _read_table(path, kind, classes)
    _check_probs(path, probs, keys, classes)
    return keys.reset_index(drop=True), probs


def _read_table(path: Path, kind: str, classes: ClassSet) -> tuple[pd.DataFrame, np.ndarray]:
    try:
        if kind == "parquet":
            df = pd.read_parquet(path)
        elif kind == "excel":
            df = pd.read_excel(path)
        else:
            sep = "\t" if path.name.lower().endswith((".tsv", ".tsv.gz")) else ","
            df = pd.read_csv(path, sep=sep)
    except Exception as exc:  # noqa: BLE001 - pandas/pyarrow raise many types
        raise _fail(path, f"cannot read it as {kind.upper()} ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    cols = {str(c).strip(): c for c in df.columns}
    lower = {c.lower(): c for c in cols}
    name_col = next((lower[c] for c in FILENAME_COLUMNS if c in lower), None)
    if name_col is not None:
        keys = pd.DataFrame({"filename": df[cols[name_col]].astype(str).str.strip()})
        used = {name_col}
        if "path" in lower and lower["path"] != name_col:  # the staged path, beside the name
            keys["path"] = df[cols[lower["path"]]].astype(str).str.strip()
            used.add(lower["path"])
    elif "video_id" in lower and "frame_number" in lower:
        frame = pd.to_numeric(df[cols[lower["frame_number"]]], errors="coerce")
        if frame.isna().any() or (frame % 1 != 0).any():
            raise _fail(path, "column frame_number holds values that are not whole numbers")
        keys = pd.DataFrame({"video_id": df[cols[lower["video_id"]]].astype(str).str.strip(),
                             "frame_number": frame.astype(np.int64)})
        used = {lower["video_id"], lower["frame_number"]}
    elif IMAGE_PATH in lower:
        keys = pd.DataFrame({IMAGE_PATH: df[cols[lower[IMAGE_PATH]]].astype(str).str.strip()})
        used = {lower[IMAGE_PATH]}
    else:
        raise _fail(path, "no frame column: name each frame in a 'filename' column, in "
                    "'video_id' and 'frame_number' columns or in an 'image_path' column "
                    f"(columns: {list(cols)})")
    if IMAGE_PATH in lower:  # beside another frame key: a description of the frame
        used.add(lower[IMAGE_PATH])
    by_class: dict[int, str] = {}
    unknown = []
    for c in cols:
        if c in used or c.lower() in INFO_COLUMNS or c.lower() in ("video_id", "frame_number"):
            continue
        k = _index(classes, c)
        if k is None:
            unknown.append(c)
            continue
        if k in by_class:
            raise _fail(path, f"columns {by_class[k]!r} and {c!r} are both class "
                        f"{classes[k]!r}")
        by_class[k] = c
    if unknown:
        raise _fail(path, f"unknown class columns {unknown}; probability columns are named by "
                    f"class: {_classes_text(classes)}")
    missing = [classes[k] for k in range(len(classes)) if k not in by_class]
    if missing:
        raise _fail(path, f"no probability column for classes {missing}; one column per class "
                    f"is needed: {_classes_text(classes)}")
    values = df[[cols[by_class[k]] for k in range(len(classes))]]
    probs = values.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(probs)
    if bad.any():
        r, k = np.argwhere(bad)[0]
        raise _fail(path, f"row {r + 1}: column {by_class[k]!r} holds "
                    f"{_shown(values.iloc[r, k])}, not a probability")
    return keys, probs


def _read_npz(path: Path, classes: ClassSet) -> tuple[pd.DataFrame, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise _fail(path, f"cannot read it as NPZ (ValueError: {exc})") from None
        # an object array is a pickle, which could run code: never loaded from a file
        raise _fail(path, "holds an object (pickled) array, which pipi does not load; save "
                    "the names as strings: np.savez(path, filenames=np.asarray(names, "
                    "dtype=str), probs=probs)") from None
    except Exception as exc:  # noqa: BLE001 - zipfile/numpy raise many types
        raise _fail(path, f"cannot read it as NPZ ({type(exc).__name__}: {exc})") from None
    lack = [k for k in ("filenames", "probs") if k not in arrays]
    if lack:
        raise _fail(path, f"lacks arrays {lack}; an NPZ prediction file holds 'filenames' (N,) "
                    f"and 'probs' (N, {len(classes)}) (arrays found: {sorted(arrays)})")
    names, probs = arrays["filenames"], arrays["probs"]
    k = len(classes)
    if names.ndim != 1 or probs.ndim != 2 or probs.shape != (len(names), k):
        which = ("" if classes.is_kvasir or probs.ndim != 2 or probs.shape[1] == k else
                 f"; the staged data has {k} classes ({', '.join(classes.names)})")
        raise _fail(path, f"'filenames' {names.shape} and 'probs' {probs.shape} do not fit: "
                    f"expected (N,) and (N, {k}){which}")
    if not np.issubdtype(probs.dtype, np.number):
        raise _fail(path, f"'probs' holds {probs.dtype} values, not numbers")
    probs = probs.astype(np.float64)
    if "classes" in arrays:
        order = [str(c) for c in arrays["classes"]]
        unknown = [c for c in order if _index(classes, c) is None]
        if unknown or len(order) != k:
            raise _fail(path, f"'classes' must name the {k} classes "
                        f"{_classes_text(classes)}; unknown class names {unknown}" if unknown
                        else f"'classes' names {len(order)} classes, not {k}")
        idx = [_index(classes, c) for c in order]
        if sorted(idx) != list(range(k)):
            raise _fail(path, f"'classes' names a class twice: {order}")
        out = np.empty_like(probs)
        out[:, idx] = probs
        probs = out
    if not np.isfinite(probs).all():
        raise _fail(path, f"'probs' row {int(np.argwhere(~np.isfinite(probs))[0][0]) + 1} "
                    "holds a value that is not a finite number")
    if names.dtype.kind == "S":  # bytes, as Python 2 era code saved names
        names = np.char.decode(names, "utf-8")
    return pd.DataFrame({"filename": [str(n).strip() for n in names]}), probs


def _check_probs(path: Path, probs: np.ndarray, keys: pd.DataFrame, classes: ClassSet) -> None:
    if len(probs) == 0:
        raise _fail(path, "holds no rows")
    out = (probs < 0) | (probs > 1)
    if out.any():
        r, k = np.argwhere(out)[0]
        raise _fail(path, f"row {r + 1} ({_key_text(keys.iloc[[r]])[0]}): probability of "
                    f"{classes[k]!r} is {probs[r, k]:g}, outside [0, 1]")
    off = np.abs(probs.sum(1) - 1.0) > SUM_TOLERANCE
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise _fail(path, f"{int(off.sum())} rows have probabilities that do not sum to 1 (row "
                    f"{r + 1}, {_key_text(keys.iloc[[r]])[0]}: sum {probs[r].sum():.6f}; "
                    f"tolerance {SUM_TOLERANCE:g}); pass softmax probabilities, not logits")


def _key_text(keys: pd.DataFrame) -> list[str]:
    for col in ("filename", IMAGE_PATH):
        if col in keys:
            return keys[col].astype(str).tolist()
    return (keys["video_id"].astype(str) + " frame " + keys["frame_number"].astype(str)).tolist()


@dataclass(frozen=True)
class Joined:
    """A prediction file matched to the staged frames."""

    split: np.ndarray      # (len(frames),) the split of each staged row it scores, else ""
    probs: np.ndarray      # (len(frames), K) probabilities by staged row (0 where unscored)
    splits: tuple[str, ...]  # the splits it covers: ("test",) or ("val", "test")
    key: str               # rows matched by: filename, path, image_path, video_id+frame_number


def join_predictions(path: Path, keys: pd.DataFrame, probs: np.ndarray,
                     frames: pd.DataFrame) -> Joined:
    """Match the file's rows to the staged frames by name; every test frame, nothing else
    (but the val split, when the file covers all of it).

    One image may be staged more than once (a frame with two labels is one row per label):
    its one prediction row then scores every staged row of that image.
    """
    frames = frames.reset_index(drop=True)
    theirs, staged, key = _keys(path, keys, frames)
    theirs, keys, probs = _merge_repeats(path, theirs, keys, probs)
    pos = pd.Index(theirs).get_indexer(staged)       # staged row -> file row, -1: none
    splits = frames["split"].astype(str).to_numpy()
    names = np.asarray(_key_text(keys))
    known = set(staged.tolist())
    extra = ~pd.Series(theirs).isin(known).to_numpy()
    if extra.any():
        raise _fail(path, f"{int(extra.sum())} frames are not in the staged release (e.g. "
                    f"{_examples(names[extra])})")
    scored = np.zeros(len(keys), bool)
    scored[pos[(pos >= 0) & np.isin(splits, ("val", "test"))]] = True
    if not scored.all():
        other = splits[(pos >= 0) & ~np.isin(splits, ("val", "test"))]
        raise _fail(path, f"{int((~scored).sum())} frames are in the staged "
                    f"{other[0] if len(other) else 'train'} split, not the test split (e.g. "
                    f"{_examples(names[~scored])})")
    covered = []
    for s in ("val", "test"):
        rows = np.flatnonzero(splits == s)
        lack = rows[pos[rows] < 0]
        if s == "val" and len(lack) == len(rows):
            continue
        if len(lack):
            shown = frames["path"].iloc[lack].astype(str).tolist()
            raise _fail(path, f"{len(lack)} of the {len(rows)} staged {s} frames are missing "
                        f"(e.g. {_examples(shown)})")
        covered.append(s)
    use = (pos >= 0) & np.isin(splits, covered)
    split = np.where(use, splits, "").astype(object)
    out = np.zeros((len(frames), probs.shape[1]), np.float64)
    out[use] = probs[pos[use]]
    return Joined(split, out, tuple(covered), key)


def _merge_repeats(path: Path, theirs: np.ndarray, keys: pd.DataFrame, probs: np.ndarray
                   ) -> tuple[np.ndarray, pd.DataFrame, np.ndarray]:
    """One row per frame: rows that name the same frame (a multilabel frame listed once per
    label) are one prediction when their probabilities agree to ``REPEAT_TOLERANCE``."""
    dup = pd.Series(theirs).duplicated(keep=False).to_numpy()
    if not dup.any():
        return theirs, keys, probs
    groups = pd.DataFrame(probs[dup]).groupby(theirs[dup], sort=False)
    spread = (groups.max() - groups.min()).max(axis=1)
    bad = spread[spread > REPEAT_TOLERANCE]
    if len(bad):
        names = np.asarray(_key_text(keys))[dup]
        first = {k: n for k, n in zip(theirs[dup][::-1], names[::-1], strict=True)}
        raise _fail(path, f"{len(bad)} frames are listed more than once with different "
                    f"probabilities (e.g. {_examples([first[k] for k in bad.index])}; largest "
                    f"difference {bad.max():.3g}); the rows of one frame must agree to "
                    f"{REPEAT_TOLERANCE:g}")
    keep = ~pd.Series(theirs).duplicated(keep="first").to_numpy()
    return theirs[keep], keys[keep].reset_index(drop=True), probs[keep]


def _keys(path: Path, keys: pd.DataFrame, frames: pd.DataFrame
          ) -> tuple[np.ndarray, np.ndarray, str]:
    """(key of each file row, key of each staged row, the key used)."""
    if IMAGE_PATH in keys:
        if IMAGE_PATH not in frames:
            raise _fail(path, "names frames by image_path, which only a staged image dataset "
                        "(pipi stage images) has; name them by filename here")

        def norm(col):
            return col.astype(str).str.replace("\\", "/", regex=False).to_numpy()
        return norm(keys[IMAGE_PATH]), norm(frames[IMAGE_PATH]), IMAGE_PATH
    if "filename" not in keys:
        def pair(video, frame):
            return (pd.Series(video).astype(str) + "\x00"
                    + pd.Series(frame).astype(np.int64).astype(str)).to_numpy()
        return (pair(keys["video_id"], keys["frame_number"]),
                pair(frames["video_id"], frames["frame_number"]), "video_id+frame_number")
    names = keys["filename"].astype(str).str.replace("\\", "/", regex=False)
    paths = frames["path"].astype(str)
    if "path" in keys:  # the staged path, where the file gives one beside the name
        given = keys["path"].astype(str).str.replace("\\", "/", regex=False)
        if given.isin(paths).all():
            return given.to_numpy(), paths.to_numpy(), "path"
    if names.isin(paths).all():
        return names.to_numpy(), paths.to_numpy(), "path"
    base = (frames["filename"] if "filename" in frames else paths.str.rsplit("/", n=1).str[-1]
            ).astype(str)
    theirs = names.str.rsplit("/", n=1).str[-1]
    # one name, several images (e.g. frame_000001.png in every video of a release)
    images = frames.assign(_base=base).drop_duplicates(["_base", "video_id", "frame_number"])
    shared = images["_base"][images["_base"].duplicated(keep=False)]
    clash = shared[shared.isin(theirs)].unique()
    if len(clash):
        raise _fail(path, f"frame names are not unique in the staged release "
                    f"({_examples(clash)} name several frames); name frames by their staged "
                    "path or by video_id and frame_number")
    return theirs.to_numpy(), base.to_numpy(), "filename"
