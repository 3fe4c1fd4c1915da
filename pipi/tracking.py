"""Every MLflow convention of pipi in one place (the only module that imports mlflow).

Tag names, the default store, run lifecycle (FAILED with a reason), dataset inputs, the
registry and run queries live here; the rest of pipi calls these functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

import pipi  # noqa: E402
from pipi.errors import TrackingError  # noqa: E402

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "pipi"

# Tag names (the run contract; README "Run contract").
TAG_ENTRY_POINT = "pipi.entry_point"
TAG_DATASET = "pipi.dataset"
TAG_DATA_DIGEST = "pipi.data_digest"
TAG_SPLIT_SHA = "pipi.split_sha256"
TAG_CODE_VERSION = "pipi.code_version"
TAG_CONFIG_HASH = "pipi.config_hash"
TAG_FAILURE = "pipi.failure_reason"
TAG_CELL = "pipi.cell"
TAG_BACKBONE = "pipi.backbone"
TAG_SEED = "pipi.seed"
TAG_PARENT_RUN = "pipi.parent_run_id"
TAG_BASE_RUN = "pipi.base_run_id"


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
    return f"tracking store {uri}; open the UI with: mlflow ui --backend-store-uri {uri}"


# --------------------------------------------------------------------------- versions
def code_version() -> str:
    """Git commit of the project (with '-dirty' when modified), else the package version."""
    root = Path(__file__).resolve().parent.parent
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


# --------------------------------------------------------------------------- runs
def _set_experiment(experiment: str | None) -> None:
    if experiment:
        mlflow.set_experiment(experiment)
    elif not (os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("MLFLOW_EXPERIMENT_ID")
              or os.environ.get("MLFLOW_RUN_ID")):
        mlflow.set_experiment(DEFAULT_EXPERIMENT)


@contextlib.contextmanager
def pipi_run(
    *,
    entry_point: str,
    experiment: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    nested: bool = False,
    run_id: str | None = None,
) -> Iterator[mlflow.ActiveRun]:
    """Start (or resume, or attach to ``mlflow run``'s) run; mark it FAILED with a reason on error."""
    if not nested and run_id is None:
        _set_experiment(experiment)
    all_tags = {TAG_ENTRY_POINT: entry_point, TAG_CODE_VERSION: code_version(), **(tags or {})}
    run = mlflow.start_run(run_id=run_id, run_name=run_name, nested=nested, tags=all_tags)
    try:
        yield run
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"[:4900]
        with contextlib.suppress(Exception):
            mlflow.set_tag(TAG_FAILURE, reason)
            mlflow.log_text("".join(traceback.format_exception(exc)), "failure/traceback.txt")
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        mlflow.end_run(status)
        raise
    else:
        mlflow.end_run("FINISHED")


def log_params(params: Mapping[str, Any]) -> None:
    """Log params in chunks of 100 (MLflow's per-call limit)."""
    items = [(k, "" if v is None else str(v)) for k, v in params.items()]
    for i in range(0, len(items), 100):
        mlflow.log_params(dict(items[i:i + 100]))


def log_metrics(metrics: Mapping[str, float], *, step: int | None = None) -> None:
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


def set_tags(tags: Mapping[str, Any]) -> None:
    mlflow.set_tags({k: str(v) for k, v in tags.items()})


def log_artifact(path: Path, artifact_path: str | None = None) -> None:
    mlflow.log_artifact(str(path), artifact_path)


def log_artifacts(path: Path, artifact_path: str | None = None) -> None:
    mlflow.log_artifacts(str(path), artifact_path)


def log_text(text: str, artifact_file: str) -> None:
    mlflow.log_text(text, artifact_file)


def log_dict(obj: Any, artifact_file: str) -> None:
    mlflow.log_dict(obj, artifact_file)


def log_dataset(frames, *, source: str, name: str, digest: str, context: str) -> None:
    """Record a staged frame index as an MLflow dataset input of the active run."""
    ds = mlflow.data.from_pandas(frames, source=source, name=name, digest=digest[:32])
    mlflow.log_input(ds, context=context)


def active_run_id() -> str:
    run = mlflow.active_run()
    if run is None:
        raise TrackingError("no active MLflow run")
    return run.info.run_id


def client() -> MlflowClient:
    return MlflowClient()


# --------------------------------------------------------------------------- training runs
class RunTracker:
    """What a training loop needs from MLflow: per-epoch metrics and a resumable checkpoint."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)

    def log_metrics(self, metrics: Mapping[str, float], *, step: int | None = None) -> None:
        log_metrics(metrics, step=step)

    def log_checkpoint(self, state: dict) -> None:
        import torch

        path = self.workdir / "last.pt"
        torch.save(state, path)
        mlflow.log_artifact(str(path), "checkpoints")


def download_artifact(run_id: str, path: str, dst: Path | None = None) -> Path:
    """Download one artifact (file or folder) of a run; clear error when missing."""
    try:
        return Path(mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=path, dst_path=str(dst) if dst else None))
    except Exception as exc:  # MlflowException, OSError
        raise TrackingError(f"run {run_id}: cannot download artifact {path!r} ({exc})") from None


def get_run(run_id: str):
    try:
        return mlflow.get_run(run_id)
    except Exception as exc:
        raise TrackingError(f"run {run_id!r} not found on {mlflow.get_tracking_uri()} ({exc})") from None


def log_pyfunc_model(*, python_model, artifacts: dict[str, str], input_example,
                     registered_model_name: str | None, signature_output) -> Any:
    """Log (and register) a pyfunc model with signature and input example."""
    import numpy as np
    from mlflow.models import infer_signature

    signature = infer_signature(input_example, signature_output, params={"strip_prior": False})
    reqs = [
        f"torch=={_version('torch')}", f"torchvision=={_version('torchvision')}",
        f"mlflow=={_version('mlflow')}", f"numpy=={np.__version__}", f"pandas=={_version('pandas')}",
        f"pillow=={_version('pillow')}",
    ]
    code = str(Path(__file__).resolve().parent)
    return mlflow.pyfunc.log_model(
        name="model", python_model=python_model, artifacts=artifacts, signature=signature,
        input_example=input_example, pip_requirements=reqs, code_paths=[code],
        registered_model_name=registered_model_name,
    )


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist).split("+")[0]


def tag_model_version(name: str, version: str, tags: Mapping[str, Any], *,
                      alias: str | None = None) -> None:
    c = MlflowClient()
    for k, v in tags.items():
        c.set_model_version_tag(name, version, k, str(v))
    if alias:
        c.set_registered_model_alias(name, alias, version)


def registered_version_of(model_info, name: str) -> str | None:
    """The registry version created for a logged model (MLflow 3 LoggedModel aware)."""
    v = getattr(model_info, "registered_model_version", None)
    if v is not None:
        return str(v)
    c = MlflowClient()
    versions = c.search_model_versions(f"name='{name}'", order_by=["version_number DESC"],
                                       max_results=1)
    return str(versions[0].version) if versions else None
