"""Fail fast when the tracking server is absent, in every process that talks to it.

MLflow's client retries a refused connection for minutes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
with exponential backoff), which is right while a run is going (a restarting server is
bridged) and wrong at the very start: ``mlflow run`` against a server that is not there would
hang about four minutes before a page of tracebacks. This request-header provider (an MLflow
plugin, ``mlflow.request_header_provider`` in ``pyproject.toml``) runs before a process's
first request to an HTTP tracking URI, probes ``/health`` once with a short timeout, and when
nothing answers ends the process with one line naming the URI. Later requests of the same
process are not probed: their outages are MLflow's retries' business.
"""

from __future__ import annotations

import sys

import mlflow
from mlflow.tracking.request_header.abstract_request_header_provider import (
    RequestHeaderProvider,
)

from pipi.errors import TrackingError
from pipi.tracking.store import check_reachable

_probed: set[str] = set()


class ServerProbe(RequestHeaderProvider):
    """Adds no header; probes the tracking server before the first request of a process."""

    def in_context(self) -> bool:
        uri = mlflow.get_tracking_uri()
        if uri in _probed or not uri.startswith(("http://", "https://")):
            return False
        _probed.add(uri)
        try:
            check_reachable(uri, timeout=10.0)
        except TrackingError as exc:
            if isinstance(exc.__context__, TimeoutError) or "timed out" in str(exc):
                return False  # there but slow: MLflow's own timeout and retries decide
            # MLflow swallows an Exception raised here; SystemExit ends the process cleanly
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        return False

    def request_headers(self) -> dict:
        return {}
