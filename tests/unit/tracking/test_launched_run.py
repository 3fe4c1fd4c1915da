"""The run ``mlflow run`` made for this process is remembered by the command, not written
back into ``os.environ`` (issue 39): a side run before it (the default data staged) ends, MLflow
clears ``MLFLOW_RUN_ID``, and the command's run still attaches to the launched one."""

from __future__ import annotations

import os

from mlflow.tracking import MlflowClient

from pipi import tracking


def test_the_command_remembers_the_launched_run_until_it_attaches(monkeypatch):
    monkeypatch.setenv("MLFLOW_RUN_ID", "a" * 32)
    assert tracking.launched_run_id() == "a" * 32          # the library alone: the variable
    with tracking.remembering_launched_run() as launched:
        assert launched == "a" * 32
        monkeypatch.delenv("MLFLOW_RUN_ID")                 # what MLflow's end_run does
        assert tracking.launched_run_id() == "a" * 32
        tracking.parent.attach_launched_run("b" * 32)              # another run: still waiting
        assert tracking.launched_run_id() == "a" * 32
        tracking.parent.attach_launched_run("a" * 32)
        assert tracking.launched_run_id() is None
    assert tracking.launched_run_id() is None               # the block over: the environment
    with tracking.remembering_launched_run() as launched:
        assert launched is None and tracking.launched_run_id() is None


def test_a_side_run_then_the_project_run_attaches_without_an_environment_write(store,
                                                                             monkeypatch):
    c = MlflowClient()
    project = c.create_run(store).info.run_id              # what `mlflow run` creates
    monkeypatch.setenv("MLFLOW_RUN_ID", project)
    with tracking.remembering_launched_run():
        with tracking.pipi_run(entry_point="stage", nested=True) as side:
            assert side.run_id != project                   # a side run, in the same experiment
        # MLflow's end_run cleared it, and pipi did not put it back
        assert "MLFLOW_RUN_ID" not in os.environ
        with tracking.pipi_run(entry_point="train") as run:
            assert run.run_id == project
        assert tracking.launched_run_id() is None
    assert c.get_run(project).info.status == "FINISHED"
    assert c.get_run(side.run_id).info.status == "FINISHED"
    assert c.get_run(side.run_id).info.experiment_id == store
    assert sorted(r.info.run_id for r in c.search_runs([store])) == sorted([side.run_id, project])
