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
import contextlib
import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

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


def drop_artifacts(db: Path, *, within: Path) -> int:
    """Remove the local artifact folders of the runs and logged models recorded in the SQLite
    store ``db`` (a test's checkpoints and models: make test wrote 15 GB of them and CI's
    disk filled), leaving the records. Only folders inside ``within`` go (the test session's
    own temporary folder: a checkout can lie under /tmp too); a file that is not an MLflow
    store is left alone. Returns how many folders went."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            found = [r[0] for r in con.execute("SELECT artifact_uri FROM runs")]
            with contextlib.suppress(sqlite3.Error):   # a store from before logged models
                found += [r[0] for r in con.execute("SELECT artifact_location FROM logged_models")]
    except sqlite3.Error:
        return 0
    root, gone = Path(within).resolve(), 0
    for uri in filter(None, found):
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            continue
        path = Path(unquote(parsed.path)).resolve()
        if path.name == "artifacts":   # <experiment>/<run or model id>/artifacts
            path = path.parent
        if path.is_dir() and path.is_relative_to(root) and path != root:
            shutil.rmtree(path, ignore_errors=True)
            gone += 1
    return gone
