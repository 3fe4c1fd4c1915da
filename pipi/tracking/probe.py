"""Fail fast when the tracking server is absent, in every process that talks to it.

MLflow's client retries a refused connection for minutes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
with exponential backoff), which is right while a run is going (a restarting server is
bridged) and wrong at the very start: ``mlflow run`` against a server that is not there would
hang about four minutes before a page of tracebacks, and against a server that accepts the
connection but never answers, MLflow waits ``MLFLOW_HTTP_REQUEST_TIMEOUT`` (120 s) per try,
retried, for more than 400 s without a word. This request-header provider (an MLflow
plugin, ``mlflow.request_header_provider`` in ``pyproject.toml``) runs before a process's
first request to an HTTP tracking URI, in ``mlflow run``'s own process as in pipi's entry
points, and ends the process with one line when:

* nothing answers ``/health`` within :data:`PROBE_TIMEOUT` seconds (refused or silent alike);
* a basic-auth server refuses the request for want of (valid) credentials;
* in ``mlflow run``'s process, the user may not create runs in the experiment it is about
  to create its run in (``Default`` unless ``--experiment-name``/``--experiment-id`` or
  ``MLFLOW_EXPERIMENT_NAME``/``_ID`` say otherwise): a member's own experiment is the fix.

Later requests of the same process are not probed: their outages are MLflow's retries'
business.
"""

from __future__ import annotations

import os
import sys

import mlflow
from mlflow.tracking.request_header.abstract_request_header_provider import (
    RequestHeaderProvider,
)

from pipi.errors import TrackingError
from pipi.tracking.permissions import check_can_create_runs
from pipi.tracking.store import check_credentials, check_reachable

__all__ = [
    "PROBE_TIMEOUT", "ServerProbe",
]

#: Seconds the first request may take before the server counts as absent.
PROBE_TIMEOUT = 10.0

_probed: set[str] = set()


class ServerProbe(RequestHeaderProvider):
    """Adds no header; probes the tracking server before the first request of a process."""

    def in_context(self) -> bool:
        uri = mlflow.get_tracking_uri()
        if uri in _probed or not uri.startswith(("http://", "https://")):
            return False
        _probed.add(uri)
        try:
            check_reachable(uri, timeout=PROBE_TIMEOUT)
            check_credentials(uri, timeout=PROBE_TIMEOUT)
            experiment = _mlflow_run_experiment(sys.argv)
            if experiment is not None:
                check_can_create_runs(experiment, uri)
        except TrackingError as exc:
            # MLflow swallows an Exception raised here; SystemExit ends the process cleanly
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        return False

    def request_headers(self) -> dict:
        return {}


def _mlflow_run_experiment(argv: list[str]) -> str | None:
    """The experiment (name or id) ``mlflow run`` will create its run in; None elsewhere."""
    prog = (argv[0] if argv else "").replace(os.sep, "/")
    if not (prog.rsplit("/", 1)[-1] == "mlflow" or prog.endswith("mlflow/__main__.py")) \
            or argv[1:2] != ["run"]:
        return None
    for flag in ("--experiment-name", "--experiment-id"):
        for i, arg in enumerate(argv):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return (os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("MLFLOW_EXPERIMENT_ID")
            or "0")
