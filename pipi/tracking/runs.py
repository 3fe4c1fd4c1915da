"""Run lifecycle (FAILED with a reason), logging, run lookup for sweeps."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipi.errors import ArtifactStoreError, ServerGoneError, TrackingError
from pipi.paths import PROJECT_ROOT
from pipi.tracking.handle import Run, param_value, where
from pipi.tracking.liveness import heartbeat
from pipi.tracking.mlflow_run import MlflowRun
from pipi.tracking.parent import attach_launched_run, launched_run_id
from pipi.tracking.permissions import check_can_create_runs
from pipi.tracking.records import RunRecord, run_record
from pipi.tracking.signals import interrupt_reason, signals_end_runs
from pipi.tracking.store import code_version, record_lost_run, server_gone
from pipi.tracking.tags import *  # noqa: F403
from pipi.tracking.ui import mark_experiment
from pipi.tracking.uploads import environ_set, guarded_upload

__all__ = [
    "RETRY_VARS", "RunTracker", "child_runs", "client", "create_child_run",
    "current_tracking_uri", "default_experiment", "download_artifact", "downloaded",
    "entry_point_params", "filter_value", "find_finished_run", "find_finished_runs", "get_run",
    "keep_killed_after_parent", "launch_env_manager", "launch_params", "log_artifact_to_run",
    "param_value", "pipi_run", "reported", "resume_hint", "run_of", "set_run_tags", "tag_project_run",
    "terminate_run", "usable_run",
]

log = logging.getLogger(__name__)


def resume_hint(run_id: str) -> str:
    return (f"continue it with: mlflow run . -e train -P resume={run_id} (or pipi train "
            f"--resume {run_id})")


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
    if launched := launched_run_id():
        with contextlib.suppress(Exception):
            return mlflow.get_run(launched).info.experiment_id
    return DEFAULT_EXPERIMENT


def _experiment_id(experiment: str) -> str:
    """The id of the experiment named ``experiment``, created when there is none, as
    ``mlflow.set_experiment`` finds it, without making it the process's active experiment
    (``set_experiment`` also exports ``MLFLOW_EXPERIMENT_ID`` to every later run and child
    process: issue 39). A deleted one is refused in one line."""
    c = MlflowClient()
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        try:
            return c.create_experiment(experiment)
        except MlflowException:   # another process created it in between
            exp = c.get_experiment_by_name(experiment)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise TrackingError(f"experiment {experiment!r} is deleted; restore it (`mlflow "
                            f"experiments restore --experiment-id {exp.experiment_id}`) or "
                            "choose another name")
    return exp.experiment_id


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
) -> Iterator[MlflowRun]:
    """Start (or resume, or attach to ``mlflow run``'s) run; mark it FAILED with a reason on error.

    Yields the run as a value (:class:`~pipi.tracking.handle.MlflowRun`): everything the
    entry point logs goes through it, to this run by id; its ``started`` record is the run as
    it started.

    The run's experiment is tagged as a model-development one (``tracking.ui``), so the UI
    opens it on the runs table; ``log_system_metrics`` turns on MLflow's system metrics.
    """
    all_tags = {TAG_ENTRY_POINT: entry_point, TAG_CODE_VERSION: code_version(),
                **{k: str(v) for k, v in (tags or {}).items()}}  # REST needs strings
    env_run = launched_run_id()
    experiment_id = None
    active = mlflow.active_run()
    if nested and active is None:
        nested = False
        if env_run and run_id is None:
            # Inside `mlflow run` but before its run is active here: a side run (e.g. staging
            # the default data) must not take over the project's run id; ending it clears
            # MLFLOW_RUN_ID (MLflow's end_run), the command remembers the id
            # (parent.remembering_launched_run).
            exp_id = mlflow.get_run(env_run).info.experiment_id
            run_id = MlflowClient().create_run(exp_id, tags=all_tags, run_name=run_name).info.run_id
    if not nested and run_id is None:
        if not env_run:  # a 403 after the work would lose it: one line before (auth servers)
            check_can_create_runs(experiment or default_experiment())
        if experiment and not env_run:
            experiment_id = _experiment_id(experiment)
    elif nested:   # a child goes where its parent is
        experiment_id = active.info.experiment_id
    if run_id is not None:
        _clear_failure(run_id)
    elif env_run and not nested:
        # the project's run: MLflow attaches to it through MLFLOW_RUN_ID (and takes the
        # variable out, so a child process does not inherit it); after a side run MLflow has
        # cleared it already and the remembered id is passed instead
        run_id = None if os.environ.get("MLFLOW_RUN_ID") == env_run else env_run
        attach_launched_run(env_run)
    with signals_end_runs():
        yield from _run_body(run_id=run_id, run_name=run_name, nested=nested, tags=all_tags,
                             entry_point=entry_point, env_run=env_run,
                             experiment_id=None if run_id else experiment_id,
                             log_system_metrics=log_system_metrics)


def _run_body(*, run_id, run_name, nested, tags, entry_point, env_run, experiment_id=None,
              log_system_metrics=False):
    run = mlflow.start_run(run_id=run_id, run_name=run_name, nested=nested, tags=tags,
                           experiment_id=experiment_id,
                           log_system_metrics=log_system_metrics or None)
    try:
        mark_experiment(run.info.experiment_id)
        # a training run says it is alive (resume refuses a run that another process trains)
        with heartbeat(run.info.run_id) if entry_point == "train" else contextlib.nullcontext():
            yield MlflowRun(run_record(run))
    except BaseException as exc:
        if server_gone():
            raise _lost_server(exc, run.info.run_id, entry_point) from None
        if isinstance(exc, KeyboardInterrupt):
            _end_interrupted(exc, run.info.run_id, entry_point,
                             project_run=run.info.run_id == env_run)
            raise
        if isinstance(exc, ArtifactStoreError):
            raise _store_failed(exc, run.info.run_id, entry_point) from None
        reason = f"{type(exc).__name__}: {exc}"[:4900]
        with contextlib.suppress(Exception):
            mlflow.set_tag(TAG_FAILURE, reason)
            mlflow.log_text("".join(traceback.format_exception(exc)), "failure/traceback.txt")
        mlflow.end_run("FAILED")
        raise
    else:
        mlflow.end_run("FINISHED")


def _end_interrupted(exc: KeyboardInterrupt, run_id: str, entry_point: str, *,
                     project_run: bool) -> None:
    """Ctrl-C or SIGTERM: the run ends KILLED with the reason (and, for a training run, how
    to continue it) in ``pipi.failure_reason``, and one line on stderr says the same."""
    reason = interrupt_reason(exc)
    how = resume_hint(run_id) if entry_point == "train" else f"run `{entry_point}` again"
    with contextlib.suppress(Exception):
        mlflow.set_tag(TAG_FAILURE, f"{reason}; {how}")
    with contextlib.suppress(Exception):
        mlflow.end_run("KILLED")
    if project_run:
        keep_killed_after_parent(run_id)
    if not reported(exc):  # the innermost run says it; the runs around it end the same way
        print(f"{entry_point} run {run_id} KILLED: {reason}; {how}", file=sys.stderr, flush=True)
        exc.pipi_reported = True


def reported(exc: BaseException) -> bool:
    """Whether a pipi run already told the user that ``exc`` (Ctrl-C, SIGTERM) ended it."""
    return getattr(exc, "pipi_reported", False)


def keep_killed_after_parent(run_id: str) -> None:
    """Under ``mlflow run``, keep the run KILLED after MLflow's own process has exited.

    On Ctrl-C, ``mlflow run`` waits for this process and then marks the run FAILED:
    ``mlflow.projects._maybe_set_run_terminated`` compares the run's status string with
    ``RunStatus``'s integer constants, so it never sees that the run already ended. A small
    detached process (``pipi.tracking.finalise``) waits for that parent to exit and puts the
    status back to KILLED when the parent changed it.
    """
    import subprocess

    parent = os.getppid()
    if parent == 1:  # orphaned: `mlflow run` is gone and will write nothing after us (a
        return       # finaliser would wait on init for its whole five minutes)
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-m", "pipi.tracking.finalise", str(parent), run_id,
             mlflow.get_tracking_uri()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONPATH": _pythonpath()})


def _pythonpath() -> str:
    """This checkout's root first, so the finaliser runs the same pipi."""
    here = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)


def tag_project_run(tags: Mapping[str, Any], *, note: str, unless: str | None = None,
                    name: str | None = None) -> str | None:
    """Tag the run that ``mlflow run`` made for this process when pipi does its work in
    another run (a resumed one) or none (staged data reused), so it is not left empty.

    ``name`` renames it (a no-op ``stage`` says so instead of MLflow's random name).
    Returns its id, or None outside ``mlflow run`` (or when it is ``unless``).
    """
    run_id = launched_run_id()
    if not run_id or run_id == unless:
        return None
    c = MlflowClient()
    for k, v in {TAG_ENTRY_POINT: tags.get(TAG_ENTRY_POINT, ""), TAG_CODE_VERSION: code_version(),
                 **tags, "mlflow.note.content": note}.items():
        c.set_tag(run_id, k, str(v))
    if name:
        c.update_run(run_id, name=name)
    return run_id


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
        how = resume_hint(run_id)
    else:
        how = f"run `{entry_point}` again"
    return ServerGoneError(
        f"lost the MLflow tracking server {uri} during {entry_point} run {run_id}: it stopped "
        f"answering for longer than the retry budget ({budget}). The run will be marked FAILED "
        f"when the server is back; start the server again and {how}")


def _store_failed(exc: ArtifactStoreError, run_id: str, entry_point: str) -> ArtifactStoreError:
    """The artifact store is full or failing: the run ends FAILED with the cause and how to go
    on (no traceback artifact: the store takes none); one line for the terminal."""
    if getattr(exc, "pipi_reported", False):  # an inner run already ended with it
        with contextlib.suppress(Exception):
            mlflow.set_tag(TAG_FAILURE, str(exc))
            mlflow.end_run("FAILED")
        return exc
    how = resume_hint(run_id) if entry_point == "train" else f"run `{entry_point}` again"
    reason = f"{exc}; {how}"
    with contextlib.suppress(Exception):
        mlflow.set_tag(TAG_FAILURE, reason[:4900])
    with contextlib.suppress(Exception):
        mlflow.end_run("FAILED")
    out = ArtifactStoreError(f"{entry_point} run {run_id} FAILED: {reason}")
    out.pipi_reported = True
    return out


def _drop_active_run() -> None:
    """Pop the active run without waiting on a server that is gone (one quick attempt)."""
    with environ_set({RETRY_VARS[0]: "0", RETRY_VARS[2]: "5"}), \
            contextlib.suppress(Exception):
        mlflow.end_run("FAILED")  # pops first, then tries the server once


#: What ``mlflow run`` tags its run with when it builds an environment (not with ``local``).
_PROJECT_ENV_TAG = "mlflow.project.env"


def launch_env_manager() -> str:
    """The ``--env-manager`` of the ``mlflow run`` that launched this process: what MLflow
    tagged its run with (``mlflow.project.env``: ``virtualenv``, ``uv``, ``conda``), ``local``
    when it tagged none (``--env-manager local``) or outside ``mlflow run`` (``pipi train``
    computes in the environment it runs in). The recipe tag names it, so the command it
    gives builds the environment the run was computed in."""
    env_run = launched_run_id()
    if not env_run:
        return "local"
    try:
        used = MlflowClient().get_run(env_run).data.tags.get(_PROJECT_ENV_TAG, "local")
    except MlflowException:
        return "local"
    return used if used in ("virtualenv", "uv", "conda") else "local"


def launch_params(options: Mapping[str, Any]) -> dict[str, str]:
    """A launcher's options as ``mlflow run`` logs its MLproject parameters: each value in
    :func:`param_value`'s form, shell-quoted (``''`` for empty) as MLflow quotes it.

    ``pipi train`` logs these first, so that its run and ``mlflow run . -e train``'s for the
    same request hold the same params: the options as requested (``batch_size=auto``) and,
    by :func:`log_params`, what pipi resolved them to (``batch_size.resolved=16``)."""
    return {k: shlex.quote(param_value(v)) for k, v in options.items()}


def entry_point_params(entry_point: str, request: Mapping[str, Any]) -> dict[str, str]:
    """What ``mlflow run . -e <entry_point> -P k=v ...`` logs for ``request``: MLflow's own
    computation from the project's MLproject (every parameter, its default filled in, values
    shell-quoted). A run that pipi starts itself (a sequence cell's base, a sweep's child
    trained in this process) logs these first, so it holds the params a top-level run of the
    same request holds (issue 38). Without the MLproject (pipi installed as a package alone):
    the request in :func:`launch_params`' form."""
    request = {k: param_value(v) for k, v in request.items()}
    ep = _project_entry_point(entry_point)
    if ep is None:
        return launch_params(request)
    params, _extra = ep.compute_parameters(request, storage_dir=None)
    return dict(params)


@functools.lru_cache(maxsize=None)
def _project_entry_point(name: str):
    """The MLproject's entry point ``name`` as MLflow reads it (read once per process: every
    in-process training run asks), None without an MLproject."""
    from mlflow.projects._project_spec import load_project

    if not (PROJECT_ROOT / "MLproject").is_file():
        return None
    return load_project(str(PROJECT_ROOT)).get_entry_point(name)


def client() -> MlflowClient:
    return MlflowClient()


#: the resumable checkpoint of a training run, while it trains (docs/run-contract.md)
CHECKPOINT = "checkpoints/last.pt"


class RunTracker:
    """What a training loop needs from its run: per-epoch metrics and a resumable checkpoint."""

    def __init__(self, run: Run, workdir: Path, *, epoch_hook=None, resumed: bool = False):
        self.run = run
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        #: (epoch, metrics, model) -> None, after the epoch's metrics are logged; ``model``
        #: is the module being trained (this epoch's weights), or None where none was given
        self.epoch_hook = epoch_hook
        #: whether the run holds a checkpoint (logged here, or the one a resume started from):
        #: what :meth:`drop_checkpoint` removes
        self.checkpointed = resumed

    def log_metrics(self, metrics: Mapping[str, float], *, step: int | None = None,
                    model=None) -> None:
        self.run.log_metrics(metrics, step=step)
        if self.epoch_hook is not None and step is not None:
            self.epoch_hook(step, metrics, model)

    def log_checkpoint(self, state: dict) -> None:
        import torch

        path = self.workdir / CHECKPOINT.rsplit("/", 1)[-1]
        torch.save(state, path)
        self.run.log_artifact(path, CHECKPOINT.rsplit("/", 1)[0])
        self.checkpointed = True

    def drop_checkpoint(self) -> None:
        """Remove the resumable checkpoint from a run that has FINISHED: resume refuses such a
        run, and the checkpoint (model, best state, optimizer: 65-180 MB) would stay in the
        store for good. A failure to remove it is a warning; the run stays FINISHED."""
        if not self.checkpointed:
            return
        try:
            self.run.delete_artifact(CHECKPOINT)
        except Exception as exc:  # noqa: BLE001 - any store error: the run's result stands
            log.warning("run %s: %s stays in the artifact store (%s: %s)", self.run.run_id,
                        CHECKPOINT, type(exc).__name__, str(exc).splitlines()[0][:200])


def download_artifact(run_id: str, path: str, dst: Path | None = None) -> Path:
    """Download one artifact (file or folder) of a run; clear error when missing."""
    try:
        return Path(mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=path, dst_path=str(dst) if dst else None))
    except Exception as exc:  # MlflowException, OSError
        raise TrackingError(f"run {run_id}: cannot download artifact {path!r} ({exc})") from None


@contextlib.contextmanager
def downloaded(run_id: str, path: str, *, prefix: str = "pipi-download-") -> Iterator[Path]:
    """One artifact of a run (file or folder) downloaded into a temporary folder that is
    removed when the block ends: read what you need inside it (a run's checkpoint, residuals,
    predictions would otherwise stay in the temp folder for good)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield download_artifact(run_id, path, Path(tmp))


def run_of(run_id: str) -> MlflowRun:
    """A handle on an existing run, by id (a trial's run that another call created): what is
    logged through it goes to that run, whichever is active."""
    return MlflowRun(get_run(run_id))


def get_run(run_id: str) -> RunRecord:
    """The run's record, read from the server now; TrackingError when there is none."""
    try:
        return run_record(mlflow.get_run(run_id))
    except Exception as exc:
        raise TrackingError(f"run {run_id!r} not found on {mlflow.get_tracking_uri()} ({exc})") from None


def usable_run(run_id: str, *, what: str, finished: bool = False) -> RunRecord:
    """The run's record, refused in one line when it was deleted (or, with ``finished``, when it has
    not FINISHED: it logs its model only at the end)."""
    run = get_run(run_id)
    if run.deleted:
        raise TrackingError(f"{what}: run {run_id} was deleted; restore it (`mlflow runs "
                            f"restore --run-id {run_id}`) or choose another run or version")
    if finished and not run.finished:
        raise TrackingError(f"{what}: run {run_id} is {run.status}, not FINISHED: its "
                            "model is logged only when training ends (resume it, or choose a "
                            "FINISHED run)")
    return run


# --------------------------------------------------------------------------- run lookup (sweeps)
def filter_value(value: Any) -> str:
    """``value`` as a quoted string literal of an MLflow search filter."""
    return "'" + str(value).replace("'", "\\'") + "'"


def find_finished_runs(tags: Mapping[str, Any], *, experiment_ids: list[str] | None = None,
                       max_results: int = 1000) -> list[RunRecord]:
    """FINISHED runs (newest first) whose tags equal ``tags``; all experiments by default."""
    clauses = [f"tags.`{k}` = {filter_value(v)}" for k, v in tags.items()]
    clauses.append("attributes.status = 'FINISHED'")
    kw = {"experiment_ids": experiment_ids} if experiment_ids else {"search_all_experiments": True}
    runs = mlflow.search_runs(filter_string=" and ".join(clauses), order_by=["start_time DESC"],
                              max_results=max_results, output_format="list", **kw)
    return [run_record(r) for r in runs]


def find_finished_run(config_hash_value: str, **tags: Any) -> RunRecord | None:
    """The newest FINISHED run with this ``pipi.config_hash`` (and extra tags), or None."""
    runs = find_finished_runs({TAG_CONFIG_HASH: config_hash_value, **tags}, max_results=1)
    return runs[0] if runs else None


def child_runs(parent_run_id: str) -> list[RunRecord]:
    """Every run whose ``mlflow.parentRunId`` is ``parent_run_id`` (oldest first)."""
    parent = get_run(parent_run_id)
    runs = mlflow.search_runs(
        experiment_ids=[parent.experiment_id], output_format="list",
        filter_string=f"tags.mlflow.parentRunId = {filter_value(parent_run_id)}",
        order_by=["start_time ASC"], max_results=50000)
    return [run_record(r) for r in runs]


def create_child_run(parent_run_id: str, *, run_name: str, tags: Mapping[str, Any]) -> str:
    """Create (not start) a run nested under ``parent_run_id``, for a process elsewhere to fill."""
    parent = get_run(parent_run_id)
    all_tags = {"mlflow.parentRunId": parent_run_id, "mlflow.runName": run_name,
                **{k: str(v) for k, v in tags.items()}}
    run = MlflowClient().create_run(parent.experiment_id, tags=all_tags, run_name=run_name)
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
    c = MlflowClient()
    guarded_upload(lambda: c.log_artifact(run_id, str(path), artifact_path), path=path,
                   what=where(Path(path).name, artifact_path), folder=artifact_path,
                   run_id=run_id)


def current_tracking_uri() -> str:
    """The tracking URI in use (to hand to worker processes)."""
    return mlflow.get_tracking_uri()


