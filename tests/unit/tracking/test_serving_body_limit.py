"""``pipi serve``'s app: MLflow's own scoring app (``scoring_server.init``) inside the request
guard, an ASGI middleware (issues 24 and 30). Driven at the ASGI level with a body handed out
chunk by chunk, so the test sees how much of it the server pulled; each refusal is also sent to
MLflow's bare app, to show what the guard changes.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pandas as pd
import pytest
from fastapi import FastAPI
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import scoring_server
from starlette.requests import Request

from pipi.serving.guard import RequestGuard, read_limited
from pipi.tracking.scoring import scoring_app

LIMIT = 64 * 1024
CHUNK = 16 * 1024


class _Model:
    """What the scoring server needs of a pyfunc model; ``fail``: what ``predict`` raises."""

    def __init__(self, fail: Exception | None = None):
        self.metadata = SimpleNamespace(get_input_schema=lambda: None)
        self.fail, self.seen = fail, []

    def predict(self, data, params=None):
        self.seen.append(data)
        if self.fail:
            raise self.fail
        return pd.DataFrame({"p": [0.25] * len(data)})


@pytest.fixture(autouse=True)
def _serving_env(monkeypatch):
    monkeypatch.delenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", raising=False)  # init sets it


def _post(app, headers: dict, chunks: list[bytes], path: str = "/invocations"):
    """POST ``chunks`` to ``path``; (status, parsed or raw body, chunks the app pulled)."""
    pulled, sent = [0], []

    async def receive():
        if pulled[0] >= len(chunks):
            await asyncio.sleep(0)
            return {"type": "http.disconnect"}
        pulled[0] += 1
        return {"type": "http.request", "body": chunks[pulled[0] - 1],
                "more_body": pulled[0] < len(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.encode(), v.encode()) for k, v in
                         {"content-type": "application/json", **headers}.items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080)}
    asyncio.run(app(scope, receive, send))
    (status,) = [m["status"] for m in sent if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    try:
        return status, json.loads(body), pulled[0]
    except ValueError:
        return status, body.decode(), pulled[0]


def test_a_content_length_over_the_limit_is_refused_before_the_body_is_read():
    model = _Model()
    status, answer, pulled = _post(scoring_app(model, max_bytes=LIMIT),
                                   {"content-length": str(200 * CHUNK)}, [b"x" * CHUNK] * 200)
    assert status == 413 and pulled == 0 and not model.seen
    assert answer["message"].startswith(f"request body is over the limit of {LIMIT} bytes")
    assert f"Content-Length {200 * CHUNK} bytes" in answer["message"]
    assert set(answer) == {"error_code", "message"}


def test_a_chunked_body_is_read_only_up_to_the_limit():
    model = _Model()
    status, answer, pulled = _post(scoring_app(model, max_bytes=LIMIT),
                                   {"transfer-encoding": "chunked"}, [b"x" * CHUNK] * 200)
    assert status == 413 and not model.seen
    assert pulled == LIMIT // CHUNK + 1  # the chunk that passed the limit, none after it
    assert "refused after reading" in answer["message"]
    # MLflow's bare app reads all 200 chunks before it looks at them
    assert _post(scoring_server.init(model), {"transfer-encoding": "chunked"},
                 [b"x" * CHUNK] * 200)[2] == 200


def test_a_body_under_the_limit_reaches_the_model_whole_and_answers_as_mlflow_does():
    records = [{"a": i, "b": "x" * 100} for i in range(300)]
    raw = json.dumps({"dataframe_records": records}).encode()
    chunks = [raw[i:i + 1000] for i in range(0, len(raw), 1000)]
    guarded_model, bare_model = _Model(), _Model()
    status, answer, pulled = _post(scoring_app(guarded_model, max_bytes=LIMIT),
                                   {"content-length": str(len(raw))}, chunks)
    assert status == 200 and pulled == len(chunks)
    pd.testing.assert_frame_equal(guarded_model.seen[0], pd.DataFrame(records))
    assert (status, answer) == _post(scoring_server.init(bare_model), {}, chunks)[:2]
    pd.testing.assert_frame_equal(bare_model.seen[0], guarded_model.seen[0])


def test_a_refused_prediction_is_one_line_without_the_request_or_a_stack_trace():
    body = json.dumps({"dataframe_records": [{"image": "SECRET" * 50}]}).encode()
    for fail, code, expect in [
            (MlflowException("image 0: not valid base64", error_code=INVALID_PARAMETER_VALUE),
             "INVALID_PARAMETER_VALUE", "image 0: not valid base64"),
            (RuntimeError("boom"), "BAD_REQUEST", "Encountered an unexpected error")]:
        status, bare, _ = _post(scoring_server.init(_Model(fail)), {}, [body])
        assert status == 400 and ("SECRET" in bare["message"] or "stack_trace" in bare)
        status, answer, _ = _post(scoring_app(_Model(fail), max_bytes=LIMIT), {}, [body])
        assert status == 400 and set(answer) == {"error_code", "message"}
        assert answer["error_code"] == code and answer["message"].startswith(expect)
        assert "SECRET" not in answer["message"] and "\n" not in answer["message"]


def test_a_body_that_is_not_json_is_a_400_that_does_not_echo_it():
    body = b"{not json " + b"SECRET" * 100
    status, bare, _ = _post(scoring_server.init(_Model()), {}, [body])
    assert status == 400 and "SECRET" in bare["message"]
    status, answer, _ = _post(scoring_app(_Model(), max_bytes=LIMIT), {}, [body])
    assert status == 400 and answer["error_code"] == "BAD_REQUEST"
    assert answer["message"].startswith("request body is not JSON at line 1 column 2")
    assert "SECRET" not in answer["message"]


def test_a_plain_text_refusal_of_mlflow_becomes_the_json_shape():
    status, bare, _ = _post(scoring_server.init(_Model()), {"content-type": "text/plain"},
                            [b"x"])
    assert status == 415 and isinstance(bare, str)
    status, answer, _ = _post(scoring_app(_Model(), max_bytes=LIMIT),
                              {"content-type": "text/plain"}, [b"x"])
    assert status == 415 and answer == {"error_code": "BAD_REQUEST", "message": bare}


def test_an_exception_in_the_servers_own_parsing_is_a_400_not_a_bare_500():
    """FastAPI answers a route's ValueError with a plain 500 (and raises it on): the guard
    holds that answer back and sends one line instead."""
    app = FastAPI()

    @app.post("/invocations")
    async def invocations(request: Request):
        await request.body()
        raise ValueError("columns must be a list, not 'SECRET'")

    with pytest.raises(ValueError):
        _post(app, {}, [b"{}"])
    status, answer, _ = _post(RequestGuard(app, max_bytes=LIMIT), {}, [b"{}"])
    assert status == 400
    assert answer["message"] == ("cannot read the request (ValueError: columns must be a list, "
                                 "not 'SECRET')")


def test_other_paths_pass_through_untouched():
    app = scoring_app(_Model(), max_bytes=1)
    scope_get = _post(app, {"content-length": "10"}, [b"x" * 10], path="/ping")
    assert scope_get[0] == 405  # /ping is a GET: MLflow's own answer, no 413


def test_the_limit_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        RequestGuard(FastAPI(), max_bytes=0)


def test_read_limited_counts_the_chunks():
    async def chunks():
        for part in (b'{"a": ', b"1", b"}"):
            yield part

    assert asyncio.run(read_limited(chunks(), 100)) == b'{"a": 1}'
    assert asyncio.run(read_limited(chunks(), 100, content_length="8")) == b'{"a": 1}'
    refused = asyncio.run(read_limited(chunks(), 7))
    assert refused == b"" and refused.size == 8 and not refused.declared
