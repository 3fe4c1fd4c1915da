"""The per-frame predictions artifact: one documented, versioned format (docs/run-contract.md).

``predictions/{val,test}.parquet`` + ``predictions/schema.json``; written by every run that
evaluates frames and read by ``aggregate`` and the later entry points. No torch here, so
readers stay light.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.classes import CLASSES, NUM_CLASSES
from pipi.errors import DataError, PipiError, reason_of

PREDICTIONS_FORMAT = "pipi.predictions"
PREDICTIONS_VERSION = 1
PROB_COLUMNS = tuple(f"prob_{i:02d}" for i in range(NUM_CLASSES))
#: Columns added after the probabilities when the staged frames have them (Galar's
#: ``capsule_system``; a staged image dataset's ``source`` and ``image_path``, the path as the
#: dataset wrote it); readers of version 1 ignore columns they do not know.
OPTIONAL_COLUMNS = ("capsule_system", "source", "image_path")


def prob_columns(n_classes: int = NUM_CLASSES) -> tuple[str, ...]:
    """The probability columns of ``n_classes`` classes, in class index order: ``prob_00``..."""
    return tuple(f"prob_{i:02d}" for i in range(n_classes))


def prob_columns_of(df: pd.DataFrame) -> tuple[str, ...]:
    """The probability columns a predictions table has (``prob_00``, ``prob_01``, ... in
    order, as many as its classes)."""
    n = 0
    while f"prob_{n:02d}" in df:
        n += 1
    return prob_columns(n)


def predictions_frame(frames: pd.DataFrame, probs: np.ndarray) -> pd.DataFrame:
    """The versioned predictions table (docs/run-contract.md)."""
    df = pd.DataFrame({
        "path": frames["path"].to_numpy(),
        "video_id": frames["video_id"].to_numpy(),
        "frame_number": frames["frame_number"].to_numpy(np.int64),
        "label": frames["class_index"].to_numpy(np.int64),
        "label_name": frames["class"].to_numpy(),
    })
    for i, col in enumerate(prob_columns(probs.shape[1])):
        df[col] = probs[:, i].astype(np.float32)
    for col in OPTIONAL_COLUMNS:
        if col in frames:
            df[col] = frames[col].astype(str).to_numpy()
    return df


def predictions_schema(optional: tuple[str, ...] = (),
                       classes: Sequence[str] = CLASSES) -> dict:
    """The ``schema.json`` of a predictions folder: ``classes`` in index order (Kvasir's 14
    by default), one ``prob_NN`` column per class."""
    cols = prob_columns(len(classes))
    return {"format": PREDICTIONS_FORMAT, "version": PREDICTIONS_VERSION,
            "classes": list(classes), "prob_columns": list(cols),
            "columns": ["path", "video_id", "frame_number", "label", "label_name",
                        *cols, *optional]}


def write_predictions(preds: dict[str, pd.DataFrame], folder: Path,
                      classes: Sequence[str] = CLASSES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, df in preds.items():
        df.to_parquet(folder / f"{split}.parquet", index=False)
    optional = tuple(c for c in OPTIONAL_COLUMNS if any(c in df for df in preds.values()))
    (folder / "schema.json").write_text(json.dumps(predictions_schema(optional, classes),
                                                   indent=2))
    return folder


def read_schema(folder: Path) -> dict:
    """A predictions folder's ``schema.json`` (DataError naming it when it is not JSON)."""
    sfile = Path(folder) / "schema.json"
    try:
        return json.loads(sfile.read_text())
    except ValueError as exc:
        raise DataError(f"{sfile}: not JSON ({reason_of(exc)})") from None


def read_predictions(folder: Path, split: str = "test") -> pd.DataFrame:
    """Read one split of a predictions artifact folder, checking its schema version, that
    the split is a Parquet file and that its probabilities are finite (DataError naming the
    file otherwise)."""
    path = Path(folder) / f"{split}.parquet"
    schema = read_schema(folder)
    if not isinstance(schema, dict) or schema.get("format") != PREDICTIONS_FORMAT \
            or schema.get("version") != PREDICTIONS_VERSION:
        raise PipiError(f"{folder}: unsupported predictions format {schema}")
    try:
        df = pd.read_parquet(path)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types for a bad file
        raise DataError(f"{path}: not a Parquet file ({type(exc).__name__}: "
                        f"{reason_of(exc)})") from None
    check_finite(df, str(path))
    return df


def check_finite(df: pd.DataFrame, where: str) -> None:
    """Refuse probabilities that are NaN or infinite, naming ``where`` (a file, a run) and
    the first frame that has one."""
    cols = list(prob_columns_of(df))
    if not cols or not len(df):
        return
    probs = df[cols].to_numpy(np.float64)
    bad = ~np.isfinite(probs).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        frame = df["path"].iloc[first] if "path" in df else f"row {first}"
        raise DataError(f"{where}: {int(bad.sum())} of {len(df)} frames have a NaN or infinite "
                        f"probability (first: {frame}); the model that wrote them diverged or "
                        "its weights hold NaN: retrain or re-import it")


