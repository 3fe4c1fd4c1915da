"""Resume continues a run on its own data and recipe (issue 24, "Data and runs")."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.cli.train import train as train_cmd
from pipi.data.staging import load_staged, stage_kvasir

SMOKE = ["--cell", "a", "--profile", "smoke", "--weights", "none", "--experiment", "resume"]


def _train(*args: str):
    return CliRunner().invoke(train_cmd, [*SMOKE, *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def other_staged(tiny_release, tmp_path_factory, pipi_home):
    """The same release staged with another split seed: another data digest."""
    out = tmp_path_factory.mktemp("staged-other") / "tiny"
    stage_kvasir(tiny_release / "labelled_images", tiny_release / "metadata.csv", out, seed=7,
                 progress=False)
    return out


@pytest.fixture()
def interrupted(tiny_staged, sqlite_tracking, monkeypatch):
    """A run of 2 epochs on ``tiny_staged`` that ended KILLED after its first epoch's
    checkpoint (Ctrl-C; a FINISHED run is not resumed and keeps no checkpoint)."""
    real = tracking.RunTracker.log_checkpoint

    def interrupt(self, state):
        real(self, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(tracking.RunTracker, "log_checkpoint", interrupt)
    CliRunner().invoke(train_cmd, [*SMOKE, "--data", str(tiny_staged), "--epochs", "2",
                                   "--patience", "2", "--seed", "3", "--image-size", "48"])
    monkeypatch.setattr(tracking.RunTracker, "log_checkpoint", real)
    newest = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("resume").experiment_id],
        order_by=["attributes.start_time DESC"], max_results=1)[0]
    assert newest.info.status == "KILLED"
    return newest.info.run_id


@pytest.mark.slow
def test_resume_refuses_other_data_naming_both_digests(interrupted, tiny_staged, other_staged):
    own = load_staged(tiny_staged)[1]["data_digest"]
    other = load_staged(other_staged)[1]["data_digest"]
    assert own != other
    r = _train("--resume", interrupted, "--data", str(other_staged))
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert own[:12] in lines[0] and other[:12] in lines[0], lines[0]
    run = MlflowClient().get_run(interrupted)
    assert run.info.status == "KILLED"  # not touched
    assert run.data.tags[tracking.tags.TAG_DATA_DIGEST] == own


@pytest.mark.slow
def test_resume_takes_the_runs_data_and_recipe(interrupted, tiny_staged):
    # options that differ from the run's recipe (and the default data=synthetic) are ignored
    r = _train("--resume", interrupted, "--data", "synthetic", "--image-size", "64",
               "--seed", "9")
    assert r.exit_code == 0, r.output
    summary = next(ln for ln in r.output.splitlines() if ln.startswith(f"run {interrupted}"))
    assert "profile smoke, 48 px" in summary, summary
    run = MlflowClient().get_run(interrupted)
    assert run.info.status == "FINISHED"
    own = load_staged(tiny_staged)[1]["data_digest"]
    assert run.data.tags[tracking.tags.TAG_DATA_DIGEST] == own
    assert run.data.tags[tracking.tags.TAG_SEED] == "3"
    assert run.data.params["data_dir"] == str(tiny_staged)
