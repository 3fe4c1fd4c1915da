"""The Capsule Vision 2024 challenge's prediction sheet from a run's per-frame predictions.

The challenge's ``save_predictions_to_excel`` writes one row per frame: ``image_path`` as the
dataset wrote it, one probability column per class (named by the class, in the class order)
and ``predicted_class`` (the arg-max's name). Its ``generate_metrics_report`` reads the
probability columns of such a sheet. Pure tables here; writing is :func:`write_sheet`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.errors import DataError
from pipi.predictions import prob_columns

__all__ = ["SHEET_FORMATS", "challenge_sheet", "write_sheet"]

SHEET_FORMATS = ("xlsx", "csv")


def challenge_sheet(preds: pd.DataFrame, classes: Sequence[str], *, where: str = "") -> pd.DataFrame:
    """The sheet of a predictions table (docs/run-contract.md) whose classes are ``classes``:
    ``image_path`` (the staged ``image_path`` column, the path as the dataset wrote it; the
    staged ``path`` where the data has none), a column per class, ``predicted_class``; one
    row per image (a multilabel frame's rows are one)."""
    cols = list(prob_columns(len(classes)))
    missing = [c for c in cols if c not in preds]
    if missing or f"prob_{len(classes):02d}" in preds:
        raise DataError(f"{where or 'predictions'}: its probability columns do not match its "
                        f"{len(classes)} classes {list(classes)} (missing {missing})")
    paths = (preds["image_path"] if "image_path" in preds else preds["path"]).astype(str)
    probs = preds[cols].to_numpy(np.float64)
    # one row per image: the challenge's scorer refuses a sheet with an image_path twice (a
    # multilabel frame has a row per label, all with the frame's one prediction)
    first = ~paths.duplicated().to_numpy()
    keep = pd.Series(np.flatnonzero(first), index=paths[first].to_numpy())
    if not np.array_equal(probs, probs[keep.loc[paths.to_numpy()].to_numpy()]):
        bad = paths[paths.duplicated(keep=False)].iloc[0]
        raise DataError(f"{where or 'predictions'}: image {bad!r} has rows with different "
                        "probabilities; one row per image is needed for the sheet")
    paths, probs = paths[first], probs[first]
    sheet = pd.DataFrame(probs, columns=list(classes))
    sheet.insert(0, "image_path", paths.to_numpy())
    sheet["predicted_class"] = [classes[i] for i in probs.argmax(1)] if len(probs) else []
    return sheet


def write_sheet(sheet: pd.DataFrame, out: Path, fmt: str) -> Path:
    """Write ``sheet`` to ``out`` as ``xlsx`` or ``csv``, atomically (a temporary file in the
    same folder, renamed into place: never half a sheet)."""
    if fmt not in SHEET_FORMATS:
        raise DataError(f"format={fmt!r}: use one of {list(SHEET_FORMATS)}")
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=f".{fmt}", dir=out.parent)
    except OSError as exc:
        raise DataError(f"{out}: cannot write the sheet there ({exc.strerror}); choose another "
                        "path") from None
    os.close(fd)
    try:
        if fmt == "xlsx":
            sheet.to_excel(tmp, index=False)
        else:
            sheet.to_csv(tmp, index=False, float_format="%.17g")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # as an ordinary file (mkstemp's is 0600)
        os.replace(tmp, out)
    except OSError as exc:
        raise DataError(f"{out}: cannot write the sheet ({exc.strerror}); nothing written"
                        ) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
