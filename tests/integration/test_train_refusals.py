"""`train` refuses, before any run starts, what it cannot train on (issue 24, messages)."""

from __future__ import annotations

import json

import mlflow
import pytest
from click.testing import CliRunner

from pipi.calibration.objective import PRIOR_PARAMS_FORMAT, PRIOR_PARAMS_VERSION
from pipi.cli.train import train as train_cmd


def _runs() -> list:
    return mlflow.search_runs(search_all_experiments=True, output_format="list")


def _one_error(res) -> str:
    errors = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(errors) == 1, res.output
    return errors[0]


def test_a_staged_galar_folder_is_refused_before_the_run(galar_staged, sqlite_tracking):
    before = len(_runs())
    res = CliRunner().invoke(train_cmd, ["--cell", "pi", "--profile", "smoke", "--weights",
                                         "none", "--data", str(galar_staged)])
    err = _one_error(res)
    assert "is a staged Galar folder, test data only" in err, err
    assert len(_runs()) == before


def test_prior_params_on_an_rgb_cell_is_refused(tiny_staged, sqlite_tracking, tmp_path):
    pp = tmp_path / "prior_params.json"
    pp.write_text(json.dumps({"format": PRIOR_PARAMS_FORMAT, "version": PRIOR_PARAMS_VERSION,
                              "alpha": 3.0, "lambda_eff_fraction": 0.3}))
    before = len(_runs())
    res = CliRunner().invoke(train_cmd, ["--cell", "a", "--profile", "smoke", "--weights",
                                         "none", "--data", str(tiny_staged),
                                         "--prior-params", str(pp)])
    err = _one_error(res)
    assert "cell a uses no optical prior" in err, err
    assert len(_runs()) == before
