"""`data_path=device` (issue 23) through a whole per-frame run on the CPU: the same run as
the host path, and the run's params say which data path ran."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

from pipi.config import make_config
from pipi.training.frames import run_frame_cell


def test_device_data_path_trains_the_host_run(tiny_staged, tmp_path):
    kw = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none",
          "seed": 3}
    host = run_frame_cell(make_config(**kw), data=tiny_staged, progress=False,
                          cache_dir=tmp_path)
    dev = run_frame_cell(make_config(**kw, data_path="device"), data=tiny_staged,
                         progress=False, cache_dir=tmp_path)
    assert host.runtime["resolved_data_path"] == "host"
    assert dev.runtime["resolved_data_path"] == "device"
    assert dev.runtime["resolved_graph"] == "off"
    assert dev.history == host.history
    for split in ("val", "test"):
        pd.testing.assert_frame_equal(dev.predictions[split], host.predictions[split],
                                      check_exact=True)


@pytest.mark.slow
def test_train_logs_the_data_path_it_ran(tiny_staged, sqlite_tracking):
    from pipi.runs.training import train

    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none", seed=4,
                      data_path="device")
    s = train(cfg, data=str(tiny_staged), register=False, progress=False,
              experiment="data-path")
    params = mlflow.get_run(s.run_id).data.params
    assert params["data_path"] == "device"           # what was asked (hashed)
    assert params["resolved_data_path"] == "device"  # what ran
    assert params["resolved_graph"] == "off"
