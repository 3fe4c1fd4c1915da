"""New MLflow SQLite stores for tests, copied from one store created once per test process.

Creating a SQLite tracking store runs MLflow's schema migrations: about 7 s of CPU each time
on the loaded 2-core machine (8.7 s to open a new store against 1.5 s for a copy of one), and
the tests made a dozen of them. A copy is the same file MLflow would have written (the same
MLflow wrote it, in this session): empty but for the ``Default`` experiment, whose artifact
location is the test process's working folder's ``mlruns/0`` (tests/conftest.py gives every
test process a temporary one), as it would be for a store the test process created itself.
Tests about creating a store (the README's quick start, a first run) make their own.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

_TEMPLATE: dict[str, Path] = {}


def _template() -> Path:
    """The process's template store, created on first use (in the working folder's process)."""
    if "path" not in _TEMPLATE:
        from mlflow.tracking import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="pipi-store-template-"))
        path = folder / "mlflow.db"
        client = MlflowClient(tracking_uri=f"sqlite:///{path}")
        client.search_experiments()                      # the tracking tables and Default
        client.search_registered_models()                # the registry's (the same database)
        _TEMPLATE["path"] = path
    return _TEMPLATE["path"]


def new_sqlite_store(path: Path) -> str:
    """``sqlite:///<path>``: a new store at ``path`` (a copy of the process's template, made
    with SQLite's backup API, so a consistent snapshot even while MLflow holds the template
    open)."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path}: a store is already there")
    path.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(_template())
    dst = sqlite3.connect(path)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    os.chmod(path, 0o644)
    return f"sqlite:///{path}"
