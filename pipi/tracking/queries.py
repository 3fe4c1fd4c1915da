"""Reads for aggregate: one paged query of runs, artifact checks, cached predictions."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.tracking import MlflowClient

from pipi.errors import TrackingError
from pipi.tracking.records import run_record
from pipi.tracking.runs import download_artifact
from pipi.tracking.tags import *

__all__ = [
    "RUN_COLUMNS", "download_predictions", "experiment_id", "experiment_name", "has_artifact",
    "load_runs",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- aggregate reads
#: Columns of :func:`load_runs` (tags of the run contract, flattened).
RUN_COLUMNS = ("run_id", "experiment_id", "run_name", "status", "start_time", "entry_point",
               "cell", "backbone", "seed", "data_digest", "dataset", "study", "variant",
               "base_run_id", "parent_run_id", "evaluable_classes", "code_version",
               "profile", "test_macro_auc", "test_classes", "val_classes", "recipe",
               "recipe_hash", "failure_reason", "params", "tta_loss_before", "tta_loss_after",
               "metrics", "tags")


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


def experiment_name(experiment: str) -> str:
    """The name of an experiment given its name or id (TrackingError when unknown)."""
    return MlflowClient().get_experiment(experiment_id(experiment)).name


def load_runs(experiment: str, filter_string: str = "", *, page_size: int = 1000):
    """Every run of ``experiment`` matching ``filter_string``, one row per run (all pages).

    The single MLflow query of ``aggregate``: pages through ``MlflowClient.search_runs``
    with page tokens until the last page. Columns: :data:`RUN_COLUMNS`.
    """
    eid = experiment_id(experiment)
    c, rows, token = MlflowClient(), [], None
    while True:
        try:
            page = c.search_runs([eid], filter_string=filter_string or "", max_results=page_size,
                                 order_by=["attributes.start_time ASC"], page_token=token)
        except Exception as exc:  # noqa: BLE001 - MlflowException (bad filter) or REST error
            raise TrackingError(f"cannot search runs of {experiment!r} with filter "
                                f"{filter_string!r}: {exc}") from None
        for r in map(run_record, page):
            t = r.tags
            rows.append({
                "run_id": r.run_id, "experiment_id": r.experiment_id,
                "run_name": r.run_name, "status": r.status,
                "start_time": r.start_time, "entry_point": r.entry_point,
                "cell": r.cell, "backbone": r.backbone, "seed": r.seed,
                "data_digest": r.data_digest, "dataset": t.get(TAG_DATASET, ""),
                "study": t.get(TAG_STUDY, ""), "variant": t.get(TAG_VARIANT, ""),
                "base_run_id": r.base_run_id, "parent_run_id": r.parent_run_id,
                "evaluable_classes": t.get(TAG_EVALUABLE_CLASSES, ""),
                "code_version": r.code_version, "profile": r.resolved_param("profile"),
                "test_macro_auc": r.test_macro_auc,
                "test_classes": t.get(TAG_TEST_CLASSES, ""),
                "val_classes": t.get(TAG_VAL_CLASSES, ""),
                "recipe": t.get(TAG_RECIPE, ""), "recipe_hash": t.get(TAG_RECIPE_HASH, ""),
                "failure_reason": r.failure_reason,
                "params": json.dumps(dict(r.params), sort_keys=True),
                "tta_loss_before": r.metrics.get("tta/loss_before", float("nan")),
                "tta_loss_after": r.metrics.get("tta/loss_after", float("nan")),
                # every metric and pipi tag, for studies whose numbers are not predictions
                # (transplant first-conv cosines, Grad-CAM Dice)
                "metrics": json.dumps(dict(r.metrics), sort_keys=True),
                "tags": json.dumps({k: v for k, v in t.items() if k.startswith(TAG_PREFIX)},
                                   sort_keys=True),
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
    except Exception as exc:  # noqa: BLE001 - MlflowException or REST error
        raise TrackingError(f"run {run_id}: cannot list artifacts ({exc})") from None
    return any(f.path.rstrip("/").rpartition("/")[2] == name for f in listed)


def download_predictions(run_id: str, cache_dir: Path) -> Path:
    """The run's ``predictions/`` artifact folder, downloaded once into ``cache_dir/<run_id>``.

    A run's artifacts do not change once it has FINISHED, so the run id is the cache key;
    the folder is moved into place only when complete.
    """
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
