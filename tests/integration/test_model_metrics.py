"""The logged model carries its own epoch's metrics (issue 38 item 4): it is logged at the
selected epoch's step, so MLflow links that epoch's ``val/macro_auc`` to it (it linked epoch
0's), and no metric key holds two values.

Which epoch is selected is not this test's subject, and a 4-epoch smoke training on the tiny
release learns nothing: its validation AUC is noise around 0.5, and the first epoch was the
best on one CPU and not on another. The epoch loop's validation score is therefore scripted
(the real metrics, with ``val/macro_auc`` replaced by :data:`SCRIPTED`), so epoch 2 is the
one selected on every machine."""

from __future__ import annotations

import json

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from pipi.config import make_config
from pipi.training import frames
from pipi.training.frames import EPOCH_SERIES
from pipi.runs.training import train

pytestmark = pytest.mark.timeout(300)

#: The validation macro-AUC of epochs 0-3 as the epoch loop sees it: epoch 2 is the best.
SCRIPTED = (0.61, 0.66, 0.83, 0.72)


def test_the_model_is_logged_at_its_epoch_and_no_metric_repeats(training_store, tiny_staged,
                                                                 monkeypatch):
    real, seen = frames.split_metrics, []

    def scripted(df, classes, prefix, **kw):
        out = real(df, classes, prefix, **kw)
        if prefix == "val" and len(seen) < len(SCRIPTED):
            seen.append(out["val/macro_auc"])
            out["val/macro_auc"] = SCRIPTED[len(seen) - 1]
        return out

    monkeypatch.setattr(frames, "split_metrics", scripted)
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32, epochs=4, patience=4, lr=3e-3)
    s = train(cfg, experiment="model-metrics", data=str(tiny_staged), register=False,
    progress=False)
    c = MlflowClient()
    run = c.get_run(s.run_id)
    history = {m.step: m.value for m in c.get_metric_history(s.run_id, "val/macro_auc")}
    assert len(seen) == 4 and sorted(history) == [0, 1, 2, 3]
    assert [history[e] for e in range(4)] == pytest.approx(SCRIPTED)
    best = int(run.data.tags["pipi.best_epoch"])
    assert best == 2, history
    model = mlflow.get_logged_model(s.model_id)
    linked = {m.key: m for m in model.metrics or []}
    assert linked["val/macro_auc"].value == pytest.approx(history[best])
    assert linked["val/macro_auc"].step == best
    # the run's own val metrics are recomputed from the selected epoch's predictions: the
    # real AUC the loop saw at that epoch, before the script replaced it
    assert run.data.metrics["val/best_macro_auc"] == pytest.approx(seen[best])
    for key in run.data.metrics:
        steps = [m.step for m in c.get_metric_history(s.run_id, key)]
        if key in EPOCH_SERIES:
            assert sorted(steps) == [0, 1, 2, 3], (key, steps)
        else:
            assert len(steps) == 1, (key, steps)
    assert "test/macro_auc" in linked and json.loads(run.data.tags["pipi.test_classes"])
