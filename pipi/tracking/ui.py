"""What the MLflow UI shows of pipi's runs: the experiment kind, figures, descriptions, system
metrics, the registered model's card (docs/mlflow-ui.md).

Every write here goes through MLflow's public API: experiment tags, run tags
(``mlflow.note.content`` is the run's Description in the UI), artifacts, and the registry's
descriptions.
"""

from __future__ import annotations

import json
import logging
import os

import mlflow
from mlflow.tracking import MlflowClient

from pipi.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "ML_VIEW_QUERY",
    "SHARED_VIEW_PREFIX",
    "SYSTEM_METRICS_ENV",
    "TRAINING_VIEW",
    "TRAINING_VIEW_STATE",
    "artifact_url",
    "experiment_url",
    "mark_experiment",
    "run_url",
    "set_model_description",
    "set_version_description",
    "system_metrics_enabled",
]

#: MLflow 3's experiment type tag: without it the UI opens an experiment on the GenAI overview
#: (traces); ``custom_model_development`` opens it on the runs table ("Training runs").
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: Environment default of ``--system-metrics`` (true/false).
SYSTEM_METRICS_ENV = "PIPI_SYSTEM_METRICS"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


#: MLflow 3.17's UI picks "GenAI" or "Model training" per browser (its sidebar switch, stored
#: in the browser); a link with this query opens the model-training view of an experiment.
ML_VIEW_QUERY = "workflowType=machine_learning"
#: Experiment tag prefix of the UI's shared views ("Views > Share"): a JSON view state.
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
#: pipi's runs-table view: what matters (cell, backbone, seed, test macro-AUC) as columns,
#: best test macro-AUC first. Column ids are the UI's ``<type>.`<key>``` sort keys.
TRAINING_VIEW = "pipi"
TRAINING_VIEW_STATE = {
    "selectedColumns": ["params.`cell`", "params.`backbone`", "params.`seed`",
                        "metrics.`test/macro_auc`", "metrics.`val/best_macro_auc`",
                        "tags.`pipi.entry_point`"],
    "orderByKey": "metrics.`test/macro_auc`",
    "orderByAsc": False,
}


def mark_experiment(experiment_id: str) -> None:
    """Tag the experiment as a model-development one (unless someone chose a kind already)
    and store pipi's runs-table view as a shared view (:func:`experiment_url` opens it)."""
    c = MlflowClient()
    tags = c.get_experiment(experiment_id).tags or {}
    if EXPERIMENT_KIND_TAG not in tags:
        c.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    view = json.dumps(TRAINING_VIEW_STATE, separators=(",", ":"))
    if tags.get(SHARED_VIEW_PREFIX + TRAINING_VIEW) != view:
        c.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + TRAINING_VIEW, view)


def system_metrics_enabled(value: str | bool | None) -> bool:
    """``--system-metrics`` as a bool: true/false, or ``auto``/None for ``PIPI_SYSTEM_METRICS``
    (default false). An unknown word is a ConfigError naming it."""
    if isinstance(value, bool):
        return value
    word = (value or "auto").strip().lower()
    source = "system_metrics"
    if word == "auto":
        word, source = os.environ.get(SYSTEM_METRICS_ENV, "false").strip().lower(), \
            SYSTEM_METRICS_ENV
    if word in _TRUE:
        _check_psutil()
        return True
    if word in _FALSE:
        return False
    raise ConfigError(f"{source}={word!r}: expected true or false (or auto: "
                      f"${SYSTEM_METRICS_ENV}, default false)")


def _check_psutil() -> None:
    try:
        import psutil  # noqa: F401  (MLflow's system-metrics monitor needs it)
    except ImportError:
        raise ConfigError("system_metrics=true needs the psutil package (pip install psutil; "
                          "GPU metrics also need nvidia-ml-py); see docs/mlflow-ui.md") from None


def set_model_description(name: str, text: str) -> None:
    """The registered model's description (its model card)."""
    MlflowClient().update_registered_model(name, description=text)


def set_version_description(name: str, version: str, text: str) -> None:
    MlflowClient().update_model_version(name, str(version), description=text)


def _ui_root() -> str:
    uri = mlflow.get_tracking_uri()
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"


def _run_page(run_id: str, experiment_id: str | None) -> str:
    exp = experiment_id or mlflow.get_run(run_id).info.experiment_id
    return f"{_ui_root()}/#/experiments/{exp}/runs/{run_id}"


def run_url(run_id: str, experiment_id: str | None = None) -> str:
    """The run's page in the UI, in the model-training view (the tracking server's address;
    ``mlflow ui``'s default address for a local store)."""
    return f"{_run_page(run_id, experiment_id)}?{ML_VIEW_QUERY}"


def artifact_url(run_id: str, path: str, experiment_id: str | None = None) -> str:
    """The run's Artifacts tab with ``path`` selected (its preview: image, HTML, text), in
    the model-training view."""
    return f"{_run_page(run_id, experiment_id)}/artifacts/{path}?{ML_VIEW_QUERY}"


def experiment_url(experiment_id: str) -> str:
    """The experiment's runs table in the model-training view, with pipi's columns."""
    return (f"{_ui_root()}/#/experiments/{experiment_id}/runs?{ML_VIEW_QUERY}"
            f"&viewStateShareKey={TRAINING_VIEW}")
