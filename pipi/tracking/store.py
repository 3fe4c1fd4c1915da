"""The tracking store: default URI, reachability, code version and config hash."""

from __future__ import annotations

import base64
import functools
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
from pipi.paths import PROJECT_ROOT, pipi_home
from pipi.tracking.tags import *  # noqa: F403
from pipi.tracking.ui import experiment_url, run_url

__all__ = [
    "CODE_VERSION_ENV", "check_credentials", "check_reachable", "code_version", "config_hash",
    "configure", "default_tracking_uri", "flush_lost_runs", "record_lost_run", "server_gone",
    "ui_hint", "use_code_version",
]

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
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise TrackingError(
                f"the MLflow tracking server at {uri} accepted the connection but did not "
                f"answer within {timeout:.0f} s: check that it is up and not stuck, or fix "
                "MLFLOW_TRACKING_URI") from None
        raise TrackingError(
            f"cannot reach the MLflow tracking server at {uri} ({reason}). Start it "
            "(`mlflow server ...`), fix MLFLOW_TRACKING_URI, or unset it to use the local "
            "SQLite store"
        ) from None


def configure(uri: str | None = None) -> str:
    """Point mlflow at ``uri`` (or the default), checking that it is reachable.

    Runs that lost this server earlier (``record_lost_run``) are marked FAILED here with
    their reason, now that it answers again.
    """
    uri = uri or default_tracking_uri()
    check_reachable(uri)
    check_credentials(uri)
    mlflow.set_tracking_uri(uri)
    flush_lost_runs(uri)
    return uri


def check_credentials(uri: str, *, timeout: float = 60.0) -> None:
    """One line instead of a traceback when a basic-auth server refuses the credentials."""
    if not uri.startswith(("http://", "https://")):
        return
    req = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
                                 "?max_results=1")
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout):  # noqa: S310
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            given = "were refused" if user and password else "are not set"
            raise TrackingError(
                f"the MLflow tracking server {uri} needs a login (HTTP {exc.code}) and the "
                f"credentials {given}: set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD") from None
    except (urllib.error.URLError, OSError):
        return  # reachability is check_reachable's business; MLflow's retries decide


# --------------------------------------------------------------------------- outages
def server_gone(uri: str | None = None) -> bool:
    """True when ``uri`` (default: the current one) is an HTTP server that does not answer."""
    uri = uri or mlflow.get_tracking_uri()
    try:
        check_reachable(uri, timeout=5.0)
    except TrackingError:
        return True
    return False


def _lost_dir() -> Path:
    return pipi_home() / "lost-runs"


def record_lost_run(run_id: str, uri: str, reason: str) -> Path:
    """Remember a run whose server went away, to mark it FAILED once the server is back."""
    d = _lost_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{run_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run_id": run_id, "tracking_uri": uri, "reason": reason}))
    tmp.replace(path)
    return path


def flush_lost_runs(uri: str) -> list[str]:
    """Mark the recorded runs of ``uri`` FAILED with their reason; return their ids.

    A run that was resumed and finished meanwhile is left alone; a record stays when the
    server refuses the update, for the next call.
    """
    d = _lost_dir()
    done = []
    if not d.is_dir():
        return done
    client = mlflow.MlflowClient(tracking_uri=uri)
    for path in sorted(d.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("tracking_uri") != uri:
            continue
        try:
            run = client.get_run(rec["run_id"])
            if run.info.status != "FINISHED":
                client.set_tag(rec["run_id"], TAG_FAILURE, rec["reason"][:4900])
                if run.info.status in ("RUNNING", "SCHEDULED"):
                    client.set_terminated(rec["run_id"], "FAILED")
            done.append(rec["run_id"])
        except Exception as exc:  # noqa: BLE001  (the record stays for the next call)
            log.warning("could not mark run %s FAILED yet (%s)", rec.get("run_id"),
                        type(exc).__name__)
            continue
        path.unlink(missing_ok=True)
        log.info("run %s lost its tracking server earlier: marked FAILED with the reason",
                 rec["run_id"])
    return done


def ui_hint(run_id: str | None = None) -> str:
    """One line telling the user where the run is and how to open it."""
    uri = mlflow.get_tracking_uri()
    if uri.startswith(("http://", "https://")):
        if run_id:
            exp = mlflow.get_run(run_id).info.experiment_id
            return f"open {run_url(run_id, exp)} (runs table: {experiment_url(exp)})"
        return f"open {uri}"
    where = ""
    if run_id:
        exp = mlflow.get_run(run_id).info.experiment_id
        where = f", then {run_url(run_id, exp)} (runs table: {experiment_url(exp)})"
    return f"tracking store {uri}; open the UI with: mlflow ui --backend-store-uri {uri}{where}"


# --------------------------------------------------------------------------- versions
CODE_VERSION_ENV = "PIPI_CODE_VERSION"
#: The code version a worker process was handed by its sweep (:func:`use_code_version`).
_HANDED: list[str] = []


def code_version() -> str:
    """Git commit of the project (with '-dirty' when modified), else the package version.

    It keys idempotent children, so every process of one sweep must agree on it: a sweep
    hands its own value to its worker processes (as an argument: :func:`use_code_version`)
    and SLURM jobs (in ``PIPI_CODE_VERSION``, their environment), which win over git.
    Otherwise git is read once per process.
    """
    return (_HANDED[-1] if _HANDED else "") or os.environ.get(CODE_VERSION_ENV) or \
        _git_code_version()


def use_code_version(version: str) -> None:
    """This process keys its runs with ``version`` (a worker process of a sweep, handed the
    parent's value as an argument; nothing is written into the environment); "" forgets a
    handed value (the environment's or git's again)."""
    _HANDED[:] = [version] if version else []


@functools.lru_cache(maxsize=1)
def _git_code_version() -> str:
    root = PROJECT_ROOT
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=60,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "pipi"], cwd=root,
            capture_output=True, text=True, timeout=60,
        ).stdout.strip()
        return f"{sha}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return f"pipi-{pipi.__version__}"


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 (16 hex) of a configuration's canonical JSON: the idempotency key of sweeps."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


