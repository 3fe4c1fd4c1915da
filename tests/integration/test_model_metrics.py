"""The logged model carries its own epoch's metrics (issue 38 item 4): it is logged at the
selected epoch's step, so MLflow links that epoch's ``val/macro_auc`` to it (it linked epoch
0's), and no metric key holds two values."""

from __future__ import annotations

import json

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from pipi.config import make_config
from pipi.training.frames import EPOCH_SERIES
from pipi.runs.training import train

pytestmark = pytest.mark.timeout(300)


def test_the_model_is_logged_at_its_epoch_and_no_metric_repeats(training_store, tiny_staged):
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32, epochs=4, patience=4, lr=3e-3)
    s = train(cfg, experiment="model-metrics", data=str(tiny_staged), register=False,
    progress=False)
    c = MlflowClient()
    run = c.get_run(s.run_id)
    history = {m.step: m.value for m in c.get_metric_history(s.run_id, "val/macro_auc")}
    assert sorted(history) == [0, 1, 2, 3]
    best = int(run.data.tags["pipi.best_epoch"])
    assert best > 0, ("the check needs a run whose selected epoch is not the first", history)
    model = mlflow.get_logged_model(s.model_id)
    linked = {m.key: m for m in model.metrics or []}
    assert linked["val/macro_auc"].value == pytest.approx(history[best])
    assert linked["val/macro_auc"].step == best
    assert run.data.metrics["val/best_macro_auc"] == pytest.approx(history[best])
    for key in run.data.metrics:
        steps = [m.step for m in c.get_metric_history(s.run_id, key)]
        if key in EPOCH_SERIES:
            assert sorted(steps) == [0, 1, 2, 3], (key, steps)
        else:
            assert len(steps) == 1, (key, steps)
    assert "test/macro_auc" in linked and json.loads(run.data.tags["pipi.test_classes"])
