"""Where pipi's files live: the package, the project checkout and ``PIPI_HOME``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipi.errors import DataError

#: The ``pipi`` package folder (shipped with logged models as code).
PACKAGE_DIR = Path(__file__).resolve().parent
#: The project checkout holding ``MLproject`` (``mlflow run .`` runs from here).
PROJECT_ROOT = PACKAGE_DIR.parent


def pipi_home() -> Path:
    """Where pipi keeps generated data and caches: ``$PIPI_HOME`` or ``./.pipi``."""
    return Path(os.environ.get("PIPI_HOME") or Path.cwd() / ".pipi").resolve()


def staging_dir(out: Path, suffix: str = ".staging") -> Path:
    """A fresh temporary folder beside ``out`` (moved into place when the work is done).

    Raises :class:`~pipi.errors.DataError` naming ``out`` when its parent cannot be created
    or written (a read-only or virtual file system such as ``/proc``).
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=suffix, dir=out.parent))
    except OSError as exc:
        raise DataError(f"--out {out}: cannot write there ({exc.strerror or exc}); choose a "
                        "writable folder") from None
