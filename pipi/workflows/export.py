"""``pipi export cv2024``: a run's per-frame predictions as the Capsule Vision 2024 challenge's
prediction sheet (``image_path``, one probability per class, ``predicted_class``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipi import tracking
from pipi.errors import ConfigError, DataError
from pipi.predictions import read_predictions, read_schema
from pipi.report.cv2024_sheet import SHEET_FORMATS, challenge_sheet, write_sheet

__all__ = ["ExportResult", "export_cv2024", "sheet_target"]

SPLITS = ("test", "val")


@dataclass(frozen=True)
class ExportResult:
    out: Path
    run_id: str
    split: str
    n_frames: int
    classes: tuple[str, ...]


def export_cv2024(run_id: str, out: Path, *, split: str = "test", fmt: str | None = None
                  ) -> ExportResult:
    """Write the challenge's sheet of ``run_id``'s ``split`` predictions to ``out``
    (``fmt``: xlsx or csv; default from ``out``'s suffix, else xlsx)."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: use one of {list(SPLITS)}")
    out = Path(out)
    fmt = sheet_target(out, fmt)
    if fmt not in SHEET_FORMATS:
        raise ConfigError(f"format={fmt!r}: use one of {list(SHEET_FORMATS)}")
    if str(run_id).startswith("models:/"):   # a registered version or alias: its run
        run_id = tracking.registry.model_uri_run_id(run_id)
    work = Path(tempfile.mkdtemp(prefix="pipi-export-"))
    try:
        folder = tracking.download_predictions(run_id, work)
        classes = tuple(read_schema(folder).get("classes") or ())
        if not (folder / f"{split}.parquet").is_file():
            raise DataError(f"run {run_id}: its predictions have no {split} split "
                            f"({folder.name}/{split}.parquet)")
        preds = read_predictions(folder, split)
        sheet = challenge_sheet(preds, classes, where=f"run {run_id}: predictions/{split}")
        write_sheet(sheet, out, fmt)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ExportResult(out, run_id, split, len(sheet), classes)


def sheet_target(out: Path, fmt: str | None) -> str:
    """The sheet's format (``fmt``, else ``out``'s suffix, else xlsx), refused in one line
    where the two disagree or ``out``'s folder cannot be written (before any download)."""
    out = Path(out)
    named = out.suffix.lstrip(".").lower() if out.suffix.lower() in (".xlsx", ".csv") else None
    if fmt and named and fmt != named:
        raise ConfigError(f"--format {fmt} with --out {out}: the name says {named}; name the "
                          f"file .{fmt} or drop --format")
    _check_writable(out)
    return fmt or named or "xlsx"


def _check_writable(out: Path) -> None:
    """Refuse, before anything is downloaded, an ``out`` whose folder cannot be written."""
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if out.is_dir():
        raise ConfigError(f"--out {out}: is a folder; name the sheet file")
    if not folder.is_dir():
        raise ConfigError(f"--out {out}: {folder} is a file, not a folder; choose another --out")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: cannot write in {folder} (permission denied); choose "
                          "another --out")
