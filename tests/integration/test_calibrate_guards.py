"""calibrate refuses what it cannot use, in one line (issue 24): a study reused for another
source run, a run that has not FINISHED, a deleted run."""

from __future__ import annotations

import mlflow
import pytest
from click.testing import CliRunner

from pipi.cli import ENTRY_POINTS

pytestmark = pytest.mark.slow
EXPERIMENT = "calibrate-guards"


@pytest.fixture(scope="module")
def pi_runs(smoke_study) -> list[str]:
    """The session smoke study's two `pi` runs (ResNet-18, seeds 41 and 42): finished runs of
    the same cell to calibrate, trained once per session instead of again here. The
    calibrations and the test's own runs go into their own experiment, never the study's."""
    client = mlflow.MlflowClient(smoke_study.uri)
    if client.get_experiment_by_name(EXPERIMENT) is None:
        client.create_experiment(EXPERIMENT)
    runs = [smoke_study.run("pi", seed) for seed in sorted(s for c, s in smoke_study.runs
                                                            if c == "pi")]
    assert len(runs) == 2
    return runs


def _calibrate(*args: str):
    return CliRunner().invoke(ENTRY_POINTS["calibrate"], [*args, "--trials", "1"])


def _one_error(res) -> str:
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert res.exit_code == 2 and len(errors) == 1, res.output
    return errors[0]


def test_a_study_is_bound_to_its_source_run(tracking, pi_runs, tiny_staged, tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    common = ["--study", "shared", "--storage", storage, "--data", str(tiny_staged),
              "--experiment", EXPERIMENT]
    res = _calibrate("--run", pi_runs[0], *common)
    assert res.exit_code == 0, res.output
    err = _one_error(_calibrate("--run", pi_runs[1], *common))
    assert "study=shared: belongs to another calibration" in err
    assert pi_runs[0] in err and pi_runs[1] in err


def test_a_run_that_has_not_finished_says_its_status(tracking, pi_runs, tmp_path):
    c = mlflow.MlflowClient()
    exp = c.get_experiment_by_name(EXPERIMENT).experiment_id
    running = c.create_run(exp).info.run_id
    err = _one_error(_calibrate("--run", running, "--storage", f"sqlite:///{tmp_path}/o.db"))
    assert f"run {running} is RUNNING, not FINISHED" in err
    c.set_terminated(running, "FAILED")
    err = _one_error(_calibrate("--run", running, "--storage", f"sqlite:///{tmp_path}/o.db"))
    assert "is FAILED, not FINISHED" in err


def test_a_deleted_run_is_refused_saying_deleted(tracking, pi_runs, tmp_path):
    c = mlflow.MlflowClient()
    c.delete_run(pi_runs[1])
    try:
        err = _one_error(_calibrate("--run", pi_runs[1], "--storage",
                                    f"sqlite:///{tmp_path}/o.db"))
        assert f"run {pi_runs[1]} was deleted" in err
    finally:
        c.restore_run(pi_runs[1])
