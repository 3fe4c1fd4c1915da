"""``pipi serve``'s process side (``pipi/tracking/scoring.py``): the model is fetched and loaded
once in the parent, a bad one fails in one line, and worker processes rebuild the same guarded
app from the environment, with time to import pipi before uvicorn's health check."""

from __future__ import annotations

import asyncio
import json
import os

import mlflow
import pandas as pd
import pytest
import uvicorn

from pipi.errors import ConfigError
from pipi.serving.guard import RequestGuard
from pipi.tracking import scoring


class _Count(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return pd.DataFrame({"n": [len(model_input)]})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("scoring") / "model"
    # requirements given: MLflow would otherwise infer them by loading the model in a
    # subprocess (about 20 s here), and these tests read none
    mlflow.pyfunc.save_model(str(path), python_model=_Count(), pip_requirements=["mlflow"])
    return path


def _post(app, body: bytes):
    sent, given = [], []

    async def receive():
        if given:
            return {"type": "http.disconnect"}
        given.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/invocations", "raw_path": b"/invocations",
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 2), "headers": [(b"content-type", b"application/json")]}
    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def test_a_worker_builds_the_guarded_app_from_the_environment(model_dir, monkeypatch):
    monkeypatch.delenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", raising=False)
    monkeypatch.setenv(scoring.ENV_MODEL_PATH, str(model_dir))
    monkeypatch.setenv(scoring.ENV_MAX_BYTES, "100")
    app = scoring.app_from_env()
    assert isinstance(app, RequestGuard) and app.max_bytes == 100
    assert _post(app, b'{"dataframe_records": [{"a": 1}, {"a": 2}]}') == (
        200, {"predictions": [{"n": 2}]})
    status, answer = _post(app, b'{"dataframe_records": [{"a": "' + b"x" * 100 + b'"}]}')
    assert status == 413 and "over the limit of 100 bytes" in answer["message"]


@pytest.mark.parametrize("workers", [1, 3])
def test_serve_fetches_and_loads_once_then_hands_uvicorn_the_app(model_dir, monkeypatch,
                                                                  workers):
    monkeypatch.delenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", raising=False)
    monkeypatch.delenv(scoring.ENV_MODEL_PATH, raising=False)
    monkeypatch.delenv(scoring.ENV_MAX_BYTES, raising=False)
    calls, said = [], []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    scoring.serve(scoring.ServeRequest(str(model_dir), port=5123, workers=workers,
                                       max_bytes=4096), announce=said.append)
    ((app, kw),) = calls
    assert kw["host"] == "127.0.0.1" and kw["port"] == 5123
    assert "413" in said[0] and "4096 bytes" in said[0]
    if workers == 1:
        assert isinstance(app, RequestGuard) and app.max_bytes == 4096
    else:
        # workers import it by name; uvicorn's 5 s health check killed them while they
        # imported pipi (a restart loop, seen on this machine)
        assert app == "pipi.tracking.scoring:app_from_env" and kw["factory"]
        assert kw["workers"] == workers and kw["timeout_worker_healthcheck"] >= 60
        assert os.environ[scoring.ENV_MAX_BYTES] == "4096"


def test_a_model_that_is_not_there_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^\S*nothing: cannot fetch the model \(") as exc:
        scoring.serve(scoring.ServeRequest(str(tmp_path / "nothing")))
    assert "\n" not in str(exc.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a loadable MLflow model"):
        scoring.serve(scoring.ServeRequest(str(tmp_path / "empty")))
