"""Artifact uploads that end in one line when the artifact store is full or failing.

MLflow's client retries an upload that the server answers with a 5xx for its whole retry
budget (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, default 7, with exponential backoff): a run whose
checkpoint does not fit in the store was silent for about six minutes, then ended with "too
many 500 error responses" and tracebacks, the cause only in the server's log. Here every
artifact upload of pipi runs with a small budget (:data:`UPLOAD_BUDGET`, set for the call
only). An upload the server keeps answering with a 5xx is the store's failure: pipi tries an
empty file in the same place (accepted: the store has no room for this one; refused too:
it fails every write) and raises :class:`~pipi.errors.ArtifactStoreError` with that cause.
A failure without an answer (refused connection, reset, timeout) is the server's, not the
store's: the upload is tried again with MLflow's full budget, so a restarting server is still
bridged (docs/faults.md). A local artifact store (a file path) that is full says so from its
``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import mlflow
from mlflow.exceptions import MlflowException
from requests import RequestException

from pipi.errors import ArtifactStoreError

__all__ = [
    "UPLOAD_BUDGET", "environ_set", "guarded_upload", "server_status", "upload_budget",
]

T = TypeVar("T")

#: MLflow's retry settings during one artifact upload: two retries, 1 s and 2 s apart.
UPLOAD_BUDGET = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_STATUS = re.compile(r"too many (\d{3}) error responses|(\d{3}) Server Error")
_NAMES = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
          504: "Gateway Timeout", 507: "Insufficient Storage"}


@contextlib.contextmanager
def environ_set(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` for the calls inside (MLflow reads its retry settings
    per request), then the previous values restored."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def upload_budget():
    """MLflow's retry settings of :data:`UPLOAD_BUDGET` for the calls inside (then restored)."""
    return environ_set(UPLOAD_BUDGET)


def server_status(exc: BaseException) -> int | None:
    """The 5xx status the server answered, from MLflow's exception chain (None: no answer)."""
    seen = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        code = getattr(response, "status_code", None)
        if isinstance(code, int) and code >= 500:
            return code
        m = _STATUS.search(str(seen))
        if m:
            return int(m.group(1) or m.group(2))
        seen = seen.__cause__ or seen.__context__
    return None


def _size(path: str | Path | None) -> str:
    if path is None or not Path(path).exists():
        return ""
    p = Path(path)
    n = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*")
                                                if f.is_file())
    return f" ({n / 1e6:.1f} MB)"


def _accepts_empty_file(artifact_uri: str, folder: str | None) -> bool:
    """Whether the store takes an empty file where the failed upload went (removed after)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    repo = get_artifact_repository(artifact_uri)
    name = ".pipi-space-probe"
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / name
        empty.touch()
        try:
            repo.log_artifact(str(empty), folder)
        except (MlflowException, OSError):  # MLflow wraps the HTTP errors in its own
            return False
    with contextlib.suppress(Exception):
        repo.delete_artifacts(f"{folder}/{name}" if folder else name)
    return True


def _artifact_uri(run_id: str) -> str | None:
    with contextlib.suppress(MlflowException, OSError):
        return mlflow.get_run(run_id).info.artifact_uri
    return None


def _store_error(exc: BaseException, *, what: str, run_id: str,
                 folder: str | None) -> ArtifactStoreError | None:
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return ArtifactStoreError(f"the artifact store is full: {what} was not stored "
                                  f"({exc.strerror}: {exc.filename})")
    status = server_status(exc)
    if status is None:
        return None
    artifact_uri = _artifact_uri(run_id)
    answer = f"HTTP {status} ({_NAMES.get(status, 'Server Error')})"
    uri = mlflow.get_tracking_uri()
    if artifact_uri and _accepts_empty_file(artifact_uri, folder):
        return ArtifactStoreError(
            f"the artifact store is full: the tracking server {uri} answered {answer} to the "
            f"upload of {what} but stores an empty file in the same place: no room for it "
            "(free space in the server's artifact store; its log has the details)")
    return ArtifactStoreError(
        f"the artifact store failed: the tracking server {uri} answered {answer} to the upload "
        f"of {what} and to an empty file in the same place (a read-only, unmounted or "
        "unreachable artifact store? the server's log has the details)")


def guarded_upload(call: Callable[[], T], *, what: str, run_id: str,
                   path: str | Path | None = None, folder: str | None = None) -> T:
    """Run the MLflow artifact upload ``call`` (of ``what``, e.g. ``checkpoints/last.pt``)
    with :data:`UPLOAD_BUDGET`; raise :class:`ArtifactStoreError` when the store is full or
    answers 5xx, and try once more with MLflow's full budget when the server did not answer.

    ``run_id`` is the run the upload goes to and ``folder`` the
    upload's folder in its artifacts, for the empty-file check; ``path`` the local file or
    folder (its size goes into the message).
    """
    try:
        with upload_budget():
            return call()
    except ArtifactStoreError:
        raise
    except Exception as exc:
        with upload_budget():
            err = _store_error(exc, what=what + _size(path), run_id=run_id, folder=folder)
        if err is not None:
            raise err from None
        if isinstance(exc, OSError) and not isinstance(exc, RequestException):
            raise  # a local store's own error (read-only, permissions): trying again won't help
    return call()  # no answer from the server: MLflow's full budget bridges a restart
