"""Fixtures of the unit tier: fresh MLflow SQLite stores are copies of one migrated template.

Creating a SQLite store runs MLflow's schema migrations, several seconds per store on the
2-core machine; the unit tier opens about twenty. A copy of an empty store already at the
current schema is the same fresh store in milliseconds."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def store_template(tmp_path_factory) -> Path:
    """An empty SQLite MLflow store at the current schema, without its Default experiment:
    each copy creates that on first use with the artifact location of the process that opens
    it (its working directory's ./mlruns), as a new store does."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("store-template")
    path = folder / "mlflow.db"
    store = SqlAlchemyStore(f"sqlite:///{path}", str(folder / "mlruns"))
    store.engine.dispose()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM experiment_tags")
        db.execute("DELETE FROM experiments")
    db.close()
    assert not list(folder.glob("mlflow.db-*"))  # no journal beside it: the file is the store
    return path


def copy_store(template: Path, path: Path) -> str:
    """A fresh store at ``path`` (a copy of ``template``), as a tracking URI."""
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory, request, store_template) -> str:
    """A SQLite tracking and registry store of one test module (a registry needs no server);
    the unit tier's copy of tests/conftest.py's fixture of that name."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    return copy_store(store_template, tmp_path_factory.mktemp(f"{name}-store") / "mlflow.db")


@pytest.fixture()
def store_uri(tmp_path, store_template) -> str:
    """A fresh SQLite store of one test, at ``tmp_path / 'mlflow.db'``."""
    return copy_store(store_template, tmp_path / "mlflow.db")
