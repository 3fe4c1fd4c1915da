"""Artifact uploads: a small retry budget for the call only, the store's failures in one line,
a server that does not answer still bridged with MLflow's full budget (issue 31).

The real full store (a 2 MB filesystem behind a real `mlflow server`) is
tests/integration/test_faults.py::test_a_full_artifact_store_ends_the_run_in_one_line.
"""

from __future__ import annotations

import errno
import os

import pytest
import requests
from mlflow.exceptions import MlflowException

from pipi.errors import ArtifactStoreError
from pipi.tracking.uploads import UPLOAD_BUDGET, guarded_upload, server_status

RETRIES = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"


def _mlflow_wrapped(inner: requests.RequestException) -> MlflowException:
    """What MLflow's http_request raises: its own exception, the requests error as context."""
    try:
        try:
            raise inner
        except requests.RequestException as exc:
            raise MlflowException(f"API request to http://h/api failed with exception {exc}")
    except MlflowException as outer:
        return outer


def test_the_status_the_server_answered_is_read_from_the_exception_chain():
    retried = requests.exceptions.RetryError(
        "HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /x "
        "(Caused by ResponseError('too many 500 error responses'))")
    assert server_status(_mlflow_wrapped(retried)) == 500
    response = requests.Response()
    response.status_code = 503
    assert server_status(requests.HTTPError("503 Server Error", response=response)) == 503
    refused = requests.exceptions.ConnectionError(
        "HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /x (Caused by "
        "NewConnectionError('Failed to establish a new connection: [Errno 111] refused'))")
    assert server_status(_mlflow_wrapped(refused)) is None
    assert server_status(ValueError("400 Client Error")) is None


def test_the_small_budget_holds_for_the_call_only(monkeypatch):
    monkeypatch.setenv(RETRIES, "7")
    seen = []
    assert guarded_upload(lambda: seen.append(os.environ[RETRIES]) or "ok", what="x",
                          run_id="r") == "ok"
    assert seen == [UPLOAD_BUDGET[RETRIES]] and os.environ[RETRIES] == "7"


def test_a_server_that_did_not_answer_gets_mlflows_full_budget(monkeypatch):
    monkeypatch.delenv(RETRIES, raising=False)
    budgets = []

    def upload():
        budgets.append(os.environ.get(RETRIES))
        if len(budgets) == 1:
            raise _mlflow_wrapped(requests.exceptions.ConnectionError("Connection refused"))
        return "stored"

    assert guarded_upload(upload, what="checkpoints/last.pt", run_id="r") == "stored"
    assert budgets == [UPLOAD_BUDGET[RETRIES], None]  # the second try: MLflow's own budget


def test_a_full_local_store_says_so_in_one_line(tmp_path):
    ckpt = tmp_path / "last.pt"
    ckpt.write_bytes(b"x" * 2_000_000)

    def upload():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/mlruns/1/abc/artifacts")

    with pytest.raises(ArtifactStoreError) as info:
        guarded_upload(upload, what="checkpoints/last.pt", path=ckpt, run_id="r")
    msg = str(info.value)
    assert msg.startswith("the artifact store is full: checkpoints/last.pt (2.0 MB) was not")
    assert "No space left on device: /mlruns/1/abc/artifacts" in msg and "\n" not in msg
    # another local error is the caller's to report, not the store being full
    with pytest.raises(PermissionError):
        guarded_upload(lambda: (_ for _ in ()).throw(PermissionError(errno.EACCES, "denied")),
                       what="x", run_id="r")
