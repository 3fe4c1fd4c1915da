"""The tracking store: default URI, reachability, code version and config hash."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow

import pipi
from pipi.errors import TrackingError
from pipi.paths import PROJECT_ROOT
from pipi.tracking.tags import *  # noqa: F403

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- store
def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else a SQLite store ``mlflow.db`` in the working dir."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def check_reachable(uri: str, *, timeout: float = 5.0) -> None:
    """Fail fast, naming the URI, when an HTTP tracking server does not answer."""
    if not uri.startswith(("http://", "https://")):
        return
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310
            if resp.status >= 400:
                raise TrackingError(f"tracking server {uri} answered HTTP {resp.status} on /health")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return  # reachable, auth is MLflow's business (MLFLOW_TRACKING_USERNAME/PASSWORD)
        raise TrackingError(f"tracking server {uri} answered HTTP {exc.code} on /health") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackingError(
            f"cannot reach the MLflow tracking server at {uri} ({reason}). Start it "
            "(`mlflow server ...`), fix MLFLOW_TRACKING_URI, or unset it to use the local "
            "SQLite store"
        ) from None


def configure(uri: str | None = None) -> str:
    """Point mlflow at ``uri`` (or the default), checking that it is reachable."""
    uri = uri or default_tracking_uri()
    check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    return uri


def ui_hint(run_id: str | None = None) -> str:
    """One line telling the user where the run is and how to open it."""
    uri = mlflow.get_tracking_uri()
    if uri.startswith(("http://", "https://")):
        if run_id:
            run = mlflow.get_run(run_id)
            return f"open {uri.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
        return f"open {uri}"
    where = ""
    if run_id:
        exp = mlflow.get_run(run_id).info.experiment_id
        where = f", then http://127.0.0.1:5000/#/experiments/{exp}/runs/{run_id}"
    return f"tracking store {uri}; open the UI with: mlflow ui --backend-store-uri {uri}{where}"


# --------------------------------------------------------------------------- versions
def code_version() -> str:
    """Git commit of the project (with '-dirty' when modified), else the package version."""
    root = PROJECT_ROOT
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "pipi"], cwd=root,
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()
        return f"{sha}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return f"pipi-{pipi.__version__}"


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 (16 hex) of a configuration's canonical JSON: the idempotency key of sweeps."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


