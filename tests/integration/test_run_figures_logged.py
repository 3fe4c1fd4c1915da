"""The per-run figures and the descriptions the MLflow UI shows (no server, no training)."""

from __future__ import annotations

import json

import pytest
from fakes import experiment

from pipi import tracking
from pipi.tracking.handle import MAX_FIGURE_BYTES


def _png_of(nbytes: int) -> bytes:
    return b"\x89PNG" + b"\0" * (nbytes - 4)


def test_log_figures_logs_pngs_and_leaves_out_what_exceeds_the_budget(sqlite_tracking, caplog):
    import mlflow

    exp = experiment("figure-budget")
    with mlflow.start_run(experiment_id=exp) as run:
        logged = tracking.run_of(run.info.run_id).log_figures(
            {"a": _png_of(1000), "big": _png_of(MAX_FIGURE_BYTES), "b": _png_of(2000)})
    assert logged == ["figures/a.png", "figures/b.png"]
    files = {a.path: a.file_size for a in
             mlflow.MlflowClient().list_artifacts(run.info.run_id, "figures")}
    assert files == {"figures/a.png": 1000, "figures/b.png": 2000}
    assert "figure big" in caplog.text
    with mlflow.start_run(experiment_id=exp) as run, pytest.raises(ValueError, match="not a PNG"):
        tracking.run_of(run.info.run_id).log_figures({"x": b"GIF89a"})


def test_every_pipi_run_marks_its_experiment_for_model_training(sqlite_tracking):
    import mlflow

    from pipi import tracking

    with tracking.pipi_run(entry_point="test", experiment="ui-kind") as run:
        pass
    c = mlflow.MlflowClient()
    tags = c.get_experiment(run.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.pipi"])
    assert "metrics.`test/macro_auc`" in view["selectedColumns"]
    # a kind someone chose is kept
    c.set_experiment_tag(run.experiment_id, "mlflow.experimentKind", "genai_development")
    with tracking.pipi_run(entry_point="test", experiment="ui-kind"):
        pass
    assert c.get_experiment(run.experiment_id).tags["mlflow.experimentKind"] == \
        "genai_development"
    url = tracking.ui.experiment_url(run.experiment_id)
    assert url.endswith(f"/#/experiments/{run.experiment_id}/runs?"
                        "workflowType=machine_learning&viewStateShareKey=pipi")


