"""``c1_frozen`` (issue 42 item 3) trains on ResNet-50 at the smoke profile, its frozen
``probe`` base trained first as a dependency, and registers."""

from __future__ import annotations

import mlflow
import pytest

from pipi.config import make_config
from pipi.runs.training import train

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("test_limitation_train")]


def test_c1_frozen_trains_on_resnet50_and_registers(training_store, tiny_staged):
    s = train(make_config(cell="c1_frozen", backbone="resnet50", profile="smoke",
                          weights="none"), experiment="limitation", data=str(tiny_staged),
                          progress=False)
    run = mlflow.get_run(s.run_id)
    assert run.info.status == "FINISHED" and run.data.params["base_cell"] == "probe"
    assert s.registered_name == "pipi-resnet50-c1_frozen"
    base = mlflow.get_run(s.base_run_id)
    assert base.data.tags["pipi.cell"] == "probe" and base.data.tags["pipi.backbone"] == "resnet50"
