"""New MLflow SQLite stores for tests, copied from one store migrated once per test process.

Creating a SQLite tracking store runs MLflow's schema migrations: about 7 s of CPU each time
on the loaded 2-core machine (8.7 s to open a new store against 1.5 s for a copy of one), and
the integration tests made a dozen of them. The template is an empty store at the current
schema without its ``Default`` experiment: each copy creates
that on first use, with the artifact location of the process that opens it (its working
folder's ``./mlruns``), as a new store does. Tests about creating a store (the README's quick
start, a first run) make their own.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
from pathlib import Path

_TEMPLATE: dict[str, Path] = {}


def _template() -> Path:
    """The process's template store, created on first use."""
    if "path" not in _TEMPLATE:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        folder = Path(tempfile.mkdtemp(prefix="pipi-store-template-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "mlflow.db"
        store = SqlAlchemyStore(f"sqlite:///{path}", str(folder / "mlruns"))
        store.engine.dispose()
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM experiment_tags")
            db.execute("DELETE FROM experiments")
        db.close()
        assert not list(folder.glob("mlflow.db-*"))  # no journal beside it: the file is the store
        _TEMPLATE["path"] = path
    return _TEMPLATE["path"]


def new_sqlite_store(path: Path) -> str:
    """``sqlite:///<path>``: a new, empty MLflow tracking and registry store at ``path``."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path}: a store is already there")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(), path)
    return f"sqlite:///{path}"
