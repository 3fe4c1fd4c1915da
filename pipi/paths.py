"""Where pipi's files live: the package, the project checkout and ``PIPI_HOME``."""

from __future__ import annotations

import os
from pathlib import Path

#: The ``pipi`` package folder (shipped with logged models as code).
PACKAGE_DIR = Path(__file__).resolve().parent
#: The project checkout holding ``MLproject`` (``mlflow run .`` runs from here).
PROJECT_ROOT = PACKAGE_DIR.parent


def pipi_home() -> Path:
    """Where pipi keeps generated data and caches: ``$PIPI_HOME`` or ``./.pipi``."""
    return Path(os.environ.get("PIPI_HOME") or Path.cwd() / ".pipi").resolve()
