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
# one progress bar per downloaded artifact floods the logs of aggregate/ablate; pipi shows its own
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

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
    where = ""
    if run_id:
        exp = mlflow.get_run(run_id).info.experiment_id
        where = f", then http://127.0.0.1:5000/#/experiments/{exp}/runs/{run_id}"
    return f"tracking store {uri}; open the UI with: mlflow ui --backend-store-uri {uri}{where}"


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
    all_tags = {TAG_ENTRY_POINT: entry_point, TAG_CODE_VERSION: code_version(),
                **{k: str(v) for k, v in (tags or {}).items()}}  # REST needs strings
    if nested and mlflow.active_run() is None:
        nested = False
        if os.environ.get("MLFLOW_RUN_ID") and run_id is None:
            # Inside `mlflow run` but before its run is active here: a side run (e.g. staging
            # the default data) must not take over the project's run id.
            exp_id = mlflow.get_run(os.environ["MLFLOW_RUN_ID"]).info.experiment_id
            run_id = MlflowClient().create_run(exp_id, tags=all_tags, run_name=run_name).info.run_id
    if not nested and run_id is None:
        _set_experiment(experiment)
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
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import Schema, TensorSpec

    inferred = infer_signature(input_example, signature_output, params={"strip_prior": False})
    # any image size: B x H x W x 3 uint8 (ragged batches as an object array of H x W x 3)
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, -1, -1, 3))]),
        outputs=inferred.outputs, params=inferred.params,
    )
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


# --------------------------------------------------------------------------- run lookup (sweeps)
TAG_STUDY = "pipi.study"
TAG_VARIANT = "pipi.variant"
TAG_C3_RUN = "pipi.c3_run_id"


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


def run_model_uri(run_id: str, name: str = "model") -> str:
    """``models:/<model id>`` of the model called ``name`` that the run logged."""
    run = get_run(run_id)
    outputs = getattr(run, "outputs", None)
    ids = [o.model_id for o in (outputs.model_outputs if outputs else [])]
    for mid in ids:
        m = mlflow.get_logged_model(mid)
        if m.name == name:
            return f"models:/{mid}"
    raise TrackingError(f"run {run_id} logged no model named {name!r}")


def download_model_files(run_id: str, dst: Path, name: str = "model") -> Path:
    """Download the files of a run's logged model (MLmodel, artifacts/...) into ``dst``."""
    uri = run_model_uri(run_id, name)
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst)))
    except Exception as exc:
        raise TrackingError(f"run {run_id}: cannot download model {uri} ({exc})") from None


def active_experiment_id() -> str | None:
    run = mlflow.active_run()
    return run.info.experiment_id if run else None


def current_tracking_uri() -> str:
    """The tracking URI in use (to hand to worker processes)."""
    return mlflow.get_tracking_uri()


# --------------------------------------------------------------------------- aggregate reads
#: Columns of :func:`load_runs` (tags of the run contract, flattened).
RUN_COLUMNS = ("run_id", "experiment_id", "run_name", "status", "start_time", "entry_point",
               "cell", "backbone", "seed", "data_digest", "dataset", "study", "variant",
               "base_run_id", "parent_run_id", "evaluable_classes", "code_version",
               "profile", "test_macro_auc")


def experiment_id(experiment: str) -> str:
    """Id of an experiment given its name (or id); TrackingError listing the names if unknown."""
    c = MlflowClient()
    exp = c.get_experiment_by_name(experiment)
    if exp is None and str(experiment).isdigit():
        with contextlib.suppress(Exception):
            exp = c.get_experiment(str(experiment))
    if exp is None:
        names = sorted(e.name for e in c.search_experiments())
        raise TrackingError(f"experiment {experiment!r} not found on {mlflow.get_tracking_uri()}; "
                            f"available: {names}")
    return exp.experiment_id


def load_runs(experiment: str, filter_string: str = "", *, page_size: int = 1000):
    """Every run of ``experiment`` matching ``filter_string``, one row per run (all pages).

    The single MLflow query of ``aggregate``: pages through ``MlflowClient.search_runs``
    with page tokens until the last page. Columns: :data:`RUN_COLUMNS`.
    """
    import pandas as pd

    eid = experiment_id(experiment)
    c, rows, token = MlflowClient(), [], None
    while True:
        try:
            page = c.search_runs([eid], filter_string=filter_string or "", max_results=page_size,
                                 order_by=["attributes.start_time ASC"], page_token=token)
        except Exception as exc:  # MlflowException: a bad filter string
            raise TrackingError(f"cannot search runs of {experiment!r} with filter "
                                f"{filter_string!r}: {exc}") from None
        for r in page:
            t = r.data.tags
            seed = t.get(TAG_SEED)
            rows.append({
                "run_id": r.info.run_id, "experiment_id": r.info.experiment_id,
                "run_name": r.info.run_name, "status": r.info.status,
                "start_time": r.info.start_time, "entry_point": t.get(TAG_ENTRY_POINT, ""),
                "cell": t.get(TAG_CELL, ""), "backbone": t.get(TAG_BACKBONE, ""),
                "seed": int(seed) if seed not in (None, "") and seed.lstrip("-").isdigit() else None,
                "data_digest": t.get(TAG_DATA_DIGEST, ""), "dataset": t.get(TAG_DATASET, ""),
                "study": t.get(TAG_STUDY, ""), "variant": t.get(TAG_VARIANT, ""),
                "base_run_id": t.get(TAG_BASE_RUN, ""),
                "parent_run_id": t.get("mlflow.parentRunId", ""),
                "evaluable_classes": t.get("pipi.evaluable_classes", ""),
                "code_version": t.get(TAG_CODE_VERSION, ""),
                "profile": r.data.params.get("profile", ""),
                "test_macro_auc": r.data.metrics.get("test/macro_auc", float("nan")),
            })
        token = page.token
        if not token:
            break
    df = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    df["seed"] = df["seed"].astype("Int64")
    return df


def has_artifact(run_id: str, path: str) -> bool:
    """Whether a run has an artifact (file or non-empty folder) at ``path``."""
    parent, _, name = path.rstrip("/").rpartition("/")
    try:
        listed = MlflowClient().list_artifacts(run_id, parent or None)
    except Exception as exc:
        raise TrackingError(f"run {run_id}: cannot list artifacts ({exc})") from None
    return any(f.path.rstrip("/").rpartition("/")[2] == name for f in listed)


def download_predictions(run_id: str, cache_dir: Path) -> Path:
    """The run's ``predictions/`` artifact folder, downloaded once into ``cache_dir/<run_id>``.

    A run's artifacts do not change once it has FINISHED, so the run id is the cache key;
    the folder is moved into place only when complete.
    """
    import shutil
    import tempfile

    final = Path(cache_dir) / run_id / "predictions"
    if (final / "schema.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=final.parent))
    try:
        got = download_artifact(run_id, "predictions", tmp)
        if not (got / "schema.json").is_file():
            raise TrackingError(f"run {run_id}: predictions/ artifact has no schema.json")
        with contextlib.suppress(FileExistsError, OSError):
            os.replace(got, final)  # another process may have finished first
        if not (final / "schema.json").is_file():
            raise TrackingError(f"run {run_id}: could not place predictions in {final}")
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_url(run_id: str, experiment_id_: str, uri: str | None = None) -> str | None:
    """``<uri>/#/experiments/<exp>/runs/<run_id>`` when the tracking URI is http(s), else None."""
    uri = uri or mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id_}/runs/{run_id}"
