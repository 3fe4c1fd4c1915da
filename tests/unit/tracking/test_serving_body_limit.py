"""The scoring server refuses an over-limit body while reading it, not after (issue 24).

The app is MLflow's own (``scoring_server.init``), driven at the ASGI level with a body
that is handed out chunk by chunk, so the test sees how much of it the server pulled.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import scoring_server
from starlette.requests import Request

from pipi.serving.guard import guarded, install_body_limit, read_limited

LIMIT = 64 * 1024
CHUNK = 16 * 1024


@pytest.fixture()
def app(monkeypatch):
    monkeypatch.setenv("PIPI_SERVE_MAX_BYTES", str(LIMIT))
    monkeypatch.delenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", raising=False)  # init sets it
    monkeypatch.setattr(Request, "body", Request.body)  # restored after the test
    monkeypatch.setattr(scoring_server, "invocations",
                        guarded(scoring_server.invocations, scoring_server.InvocationsResponse,
                                error_type=MlflowException))
    install_body_limit()
    model = SimpleNamespace(metadata=SimpleNamespace(get_input_schema=lambda: None))
    return scoring_server.init(model)


def _post(app, headers: dict, n_chunks: int):
    """POST /invocations with ``n_chunks`` chunks of CHUNK bytes; (status, body, chunks read)."""
    pulled, sent = [0], []

    async def receive():
        if pulled[0] >= n_chunks:
            return {"type": "http.disconnect"}
        pulled[0] += 1
        return {"type": "http.request", "body": b"x" * CHUNK,
                "more_body": pulled[0] < n_chunks}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/invocations",
             "raw_path": b"/invocations", "query_string": b"", "root_path": "",
             "headers": [(k.encode(), v.encode()) for k, v in
                         {"content-type": "application/json", **headers}.items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080)}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), pulled[0]


def test_a_content_length_over_the_limit_is_refused_before_the_body_is_read(app):
    status, answer, pulled = _post(app, {"content-length": str(200 * CHUNK)}, 200)
    assert status == 413 and pulled == 0
    assert answer["message"].startswith(f"request body is over the limit of {LIMIT} bytes")
    assert f"Content-Length {200 * CHUNK} bytes" in answer["message"]


def test_a_chunked_body_is_read_only_up_to_the_limit(app):
    status, answer, pulled = _post(app, {"transfer-encoding": "chunked"}, 200)
    assert status == 413
    assert pulled == LIMIT // CHUNK + 1  # the chunk that passed the limit, none after it
    assert "refused after reading" in answer["message"]


def test_a_body_under_the_limit_reaches_the_model_whole():
    async def chunks():
        for part in (b'{"a": ', b"1", b"}"):
            yield part

    assert asyncio.run(read_limited(chunks(), 100)) == b'{"a": 1}'
    assert asyncio.run(read_limited(chunks(), 100, content_length="8")) == b'{"a": 1}'
    refused = asyncio.run(read_limited(chunks(), 7))
    assert refused == b"" and refused.size == 8 and not refused.declared
