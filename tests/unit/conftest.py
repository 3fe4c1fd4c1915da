"""Fixtures of the unit tier. Its fresh MLflow SQLite stores (``sqlite_store`` from
tests/conftest.py, ``store_uri`` here) are copies of one migrated template (tests/stores.py):
creating a store runs MLflow's schema migrations, several seconds on the 2-core machine, and
the unit tier opens about twenty."""

from __future__ import annotations

import pytest
from stores import new_sqlite_store


@pytest.fixture()
def store_uri(tmp_path) -> str:
    """A fresh SQLite store of one test, at ``tmp_path / 'mlflow.db'``."""
    return new_sqlite_store(tmp_path / "mlflow.db")


#: The unit tier's time limit per test (pyproject's ``timeout`` is the integration tier's).
UNIT_TIMEOUT_S = 180


def pytest_collection_modifyitems(config, items):
    """Every unit test without a limit of its own gets :data:`UNIT_TIMEOUT_S`."""
    for item in items:
        if "tests/unit/" in str(item.fspath).replace("\\", "/") and \
                item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))
