"""Run lifecycle (FAILED with a reason), logging, run lookup for sweeps."""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.data.dataset_source_registry import get_registered_sources, resolve_dataset_source
from mlflow.tracking import MlflowClient

from pipi.errors import ServerGoneError, TrackingError
from pipi.tracking.store import code_version, record_lost_run, server_gone
from pipi.tracking.tags import *  # noqa: F403
from pipi.tracking.ui import mark_experiment

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- runs
def default_experiment() -> str:
    """The experiment every entry point uses unless told otherwise: MLflow's own choice.

    ``MLFLOW_EXPERIMENT_NAME`` / ``MLFLOW_EXPERIMENT_ID`` (``mlflow run --experiment-name``
    sets the latter), else the experiment of ``MLFLOW_RUN_ID``, else MLflow's ``Default``.
    ``mlflow run . -e train`` and ``pipi train`` therefore land in the same experiment, and
    ``aggregate`` reads that one by default.
    """
    if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
        return os.environ["MLFLOW_EXPERIMENT_NAME"]
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return os.environ["MLFLOW_EXPERIMENT_ID"]
    if os.environ.get("MLFLOW_RUN_ID"):
        with contextlib.suppress(Exception):
            return mlflow.get_run(os.environ["MLFLOW_RUN_ID"]).info.experiment_id
    return DEFAULT_EXPERIMENT


def _set_experiment(experiment: str | None) -> None:
    if experiment:
        mlflow.set_experiment(experiment)


@contextlib.contextmanager
def pipi_run(
    *,
    entry_point: str,
    experiment: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    nested: bool = False,
    run_id: str | None = None,
    log_system_metrics: bool = False,
) -> Iterator[mlflow.ActiveRun]:
    """Start (or resume, or attach to ``mlflow run``'s) run; mark it FAILED with a reason on error.

    The run's experiment is tagged as a model-development one (``tracking.ui``), so the UI
    opens it on the runs table; ``log_system_metrics`` turns on MLflow's system metrics.
    """
    all_tags = {TAG_ENTRY_POINT: entry_point, TAG_CODE_VERSION: code_version(),
                **{k: str(v) for k, v in (tags or {}).items()}}  # REST needs strings
    env_run = os.environ.get("MLFLOW_RUN_ID")
    side_run = False
    if nested and mlflow.active_run() is None:
        nested = False
        if env_run and run_id is None:
            # Inside `mlflow run` but before its run is active here: a side run (e.g. staging
            # the default data) must not take over the project's run id, and ending it must
            # not forget that id (mlflow.end_run clears MLFLOW_RUN_ID).
            exp_id = mlflow.get_run(env_run).info.experiment_id
            run_id = MlflowClient().create_run(exp_id, tags=all_tags, run_name=run_name).info.run_id
            side_run = True
    if not nested and run_id is None:
        _set_experiment(experiment)
    if run_id is not None:
        _clear_failure(run_id)
    run = mlflow.start_run(run_id=run_id, run_name=run_name, nested=nested, tags=all_tags,
                           log_system_metrics=log_system_metrics or None)
    try:
        mark_experiment(run.info.experiment_id)
        yield run
    except BaseException as exc:
        if server_gone():
            raise _lost_server(exc, run.info.run_id, entry_point) from None
        reason = f"{type(exc).__name__}: {exc}"[:4900]
        with contextlib.suppress(Exception):
            mlflow.set_tag(TAG_FAILURE, reason)
            mlflow.log_text("".join(traceback.format_exception(exc)), "failure/traceback.txt")
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        mlflow.end_run(status)
        raise
    else:
        mlflow.end_run("FINISHED")
    finally:
        if side_run and env_run:
            os.environ["MLFLOW_RUN_ID"] = env_run


def _clear_failure(run_id: str) -> None:
    """A resumed run keeps its earlier failure as ``pipi.previous_failure``, not as a reason."""
    c = MlflowClient()
    tags = c.get_run(run_id).data.tags
    if TAG_FAILURE in tags:
        c.set_tag(run_id, TAG_PREVIOUS_FAILURE, tags[TAG_FAILURE])
        c.delete_tag(run_id, TAG_FAILURE)


#: MLflow's client retry budget (its environment variables; docs/faults.md).
RETRY_VARS = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
              "MLFLOW_HTTP_REQUEST_TIMEOUT")


def _lost_server(exc: BaseException, run_id: str, entry_point: str) -> ServerGoneError:
    """The server stopped answering for longer than the retry budget: end the run here
    without waiting for the server again, remember it (``record_lost_run``), say how to go on."""
    uri = mlflow.get_tracking_uri()
    if isinstance(exc, ServerGoneError):  # an inner run already said it
        record_lost_run(run_id, uri, f"inner run lost the tracking server: {exc}")
        _drop_active_run()
        return exc
    budget = ", ".join(f"{v}={getattr(mlflow.environment_variables, v).get()}"
                       for v in RETRY_VARS)
    reason = (f"the MLflow tracking server {uri} stopped answering for longer than the client's "
              f"retry budget ({budget}) during {type(exc).__name__}")
    record_lost_run(run_id, uri, reason)
    _drop_active_run()
    if entry_point == "train":
        how = (f"continue it with: mlflow run . -e train -P resume={run_id} (or pipi train "
               f"--resume {run_id})")
    else:
        how = f"run `{entry_point}` again"
    return ServerGoneError(
        f"lost the MLflow tracking server {uri} during {entry_point} run {run_id}: it stopped "
        f"answering for longer than the retry budget ({budget}). The run will be marked FAILED "
        f"when the server is back; start the server again and {how}")


def _drop_active_run() -> None:
    """Pop the active run without waiting on a server that is gone (one quick attempt)."""
    saved = {v: os.environ.get(v) for v in RETRY_VARS}
    os.environ.update({RETRY_VARS[0]: "0", RETRY_VARS[2]: "5"})
    try:
        with contextlib.suppress(Exception):
            mlflow.end_run("FAILED")  # pops first, then tries the server once
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _same_param(logged: str, new: str) -> bool:
    # `mlflow run` logs an empty MLproject default as the shell-quoted string "''"
    return logged == new or (logged == "''" and new == "")


def log_params(params: Mapping[str, Any]) -> None:
    """Log params in chunks of 100 (MLflow's per-call limit).

    Params that ``mlflow run`` already logged with the same value are skipped; one that it
    logged with another value (a sentinel such as 0 that pipi resolved) is kept as logged and
    the resolved value goes to ``<key>.resolved``.
    """
    existing = mlflow.get_run(active_run_id()).data.params
    items = []
    for k, v in params.items():
        v = "" if v is None else str(v)
        if k in existing:
            if _same_param(existing[k], v):
                continue
            k = f"{k}.resolved"
        items.append((k, v))
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


def _local_source(path: str):
    """The staged folder as MLflow's local-file dataset source.

    A bare path string is resolved by every registered local source class at once, and MLflow
    warns that it is ambiguous; naming the (last registered) local class resolves it once.
    """
    uri = Path(path).resolve().as_uri()
    local = [s for s in get_registered_sources() if s.__name__ == "LocalArtifactDatasetSource"]
    return resolve_dataset_source(uri, candidate_sources=local[-1:] or None)


def log_dataset(frames, *, source: str, name: str, digest: str, context: str) -> None:
    """Record a staged frame index as an MLflow dataset input of the active run.

    MLflow's schema inference hints that integer columns cannot hold missing values; that
    hint is about model signatures, and a frame index has no missing values, so the schema
    of this dataset record is inferred without it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
        ds = mlflow.data.from_pandas(frames, source=_local_source(source), name=name,
                                     digest=digest[:32])
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


# --------------------------------------------------------------------------- run lookup (sweeps)
def _quote(value: Any) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


def find_finished_runs(tags: Mapping[str, Any], *, experiment_ids: list[str] | None = None,
                       max_results: int = 1000) -> list:
    """FINISHED runs (newest first) whose tags equal ``tags``; all experiments by default."""
    clauses = [f"tags.`{k}` = {_quote(v)}" for k, v in tags.items()]
    clauses.append("attributes.status = 'FINISHED'")
    kw = {"experiment_ids": experiment_ids} if experiment_ids else {"search_all_experiments": True}
    return mlflow.search_runs(filter_string=" and ".join(clauses), order_by=["start_time DESC"],
                              max_results=max_results, output_format="list", **kw)


def find_finished_run(config_hash_value: str, **tags: Any):
    """The newest FINISHED run with this ``pipi.config_hash`` (and extra tags), or None."""
    runs = find_finished_runs({TAG_CONFIG_HASH: config_hash_value, **tags}, max_results=1)
    return runs[0] if runs else None


def child_runs(parent_run_id: str) -> list:
    """Every run whose ``mlflow.parentRunId`` is ``parent_run_id`` (oldest first)."""
    parent = get_run(parent_run_id)
    return mlflow.search_runs(
        experiment_ids=[parent.info.experiment_id], output_format="list",
        filter_string=f"tags.mlflow.parentRunId = {_quote(parent_run_id)}",
        order_by=["start_time ASC"], max_results=50000)


def create_child_run(parent_run_id: str, *, run_name: str, tags: Mapping[str, Any]) -> str:
    """Create (not start) a run nested under ``parent_run_id``, for a process elsewhere to fill."""
    parent = get_run(parent_run_id)
    all_tags = {"mlflow.parentRunId": parent_run_id, "mlflow.runName": run_name,
                **{k: str(v) for k, v in tags.items()}}
    run = MlflowClient().create_run(parent.info.experiment_id, tags=all_tags, run_name=run_name)
    return run.info.run_id


def set_run_tags(run_id: str, tags: Mapping[str, Any]) -> None:
    c = MlflowClient()
    for k, v in tags.items():
        c.set_tag(run_id, k, str(v))


def terminate_run(run_id: str, status: str, reason: str | None = None) -> None:
    """End a run that no process holds any more (FAILED with a reason, or KILLED)."""
    c = MlflowClient()
    if reason:
        c.set_tag(run_id, TAG_FAILURE, reason[:4900])
    c.set_terminated(run_id, status)


def log_artifact_to_run(run_id: str, path: Path, artifact_path: str | None = None) -> None:
    """Attach a file to a run that is not the active one (e.g. a finished base run)."""
    MlflowClient().log_artifact(run_id, str(path), artifact_path)


def active_experiment_id() -> str | None:
    run = mlflow.active_run()
    return run.info.experiment_id if run else None


def current_tracking_uri() -> str:
    """The tracking URI in use (to hand to worker processes)."""
    return mlflow.get_tracking_uri()


