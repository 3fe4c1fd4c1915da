"""The tracking tests' store: a fresh SQLite store with one experiment, named after the test
module, outside any ``mlflow run`` (no ``MLFLOW_RUN_ID``); the global tracking URI is put back
after the test."""

from __future__ import annotations

import mlflow
import pytest


@pytest.fixture()
def store(tmp_path, monkeypatch, store_uri, request):
    """The experiment id of a fresh store, which is the tracking URI during the test."""
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mlflow.set_tracking_uri(store_uri)
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    yield mlflow.create_experiment(name, artifact_location=str(tmp_path / "a"))
    mlflow.set_tracking_uri(None)
