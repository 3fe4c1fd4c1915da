"""`pipi train` and `mlflow run . -e train` log one form of each option (issue 30).

The `mlflow run` side is MLflow's own computation of the params it logs for an MLproject
entry point; the `pipi train` side is the click command both launchers run, through
:func:`pipi.tracking.launch_params` and a run handle's ``log_params`` into a real run.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from fakes import experiment
from mlflow.projects._project_spec import load_project

from pipi import tracking
from pipi.cli import ENTRY_POINTS
from pipi.cli.train import requested_options

ROOT = Path(__file__).resolve().parents[3]

REQUESTS = [
    {},
    {"cell": "pi", "profile": "smoke", "weights": "none", "data": "/tmp/my data/staged"},
    {"compile": "true", "deterministic": "false", "batch_size": "16", "alpha": "2.5",
     "resume": "", "model_prefix": "lab-anna"},
]


def _mlflow_run_params(request: dict) -> dict:
    """What `mlflow run . -e train -P k=v ...` logs before the entry point starts."""
    ep = load_project(str(ROOT)).get_entry_point("train")
    params, extra = ep.compute_parameters(request, storage_dir=None)
    assert extra == {}
    return params


def _pipi_train_params(request: dict) -> dict:
    """What `pipi train --k v ...` logs as its options (the click parse both launchers run)."""
    args = [x for k, v in request.items() for x in (f"--{k.replace('_', '-')}", v)]
    return requested_options(ENTRY_POINTS["train"].make_context("train", args))


@pytest.mark.parametrize("request_", REQUESTS, ids=["defaults", "smoke", "overrides"])
def test_both_launchers_give_the_same_option_params(request_):
    assert _pipi_train_params(request_) == _mlflow_run_params(request_)


def test_booleans_are_lower_case_and_resolved_values_go_beside_the_request(tmp_path, store_uri):
    mlflow.set_tracking_uri(store_uri)
    try:
        exp = mlflow.create_experiment("p", artifact_location=str(tmp_path / "a"))
        # the same request, as each launcher logs it, then the same resolved values
        resolved = {"compile": False, "deterministic": True, "batch_size": 16, "profile": "smoke"}
        logged = []
        for first in (_mlflow_run_params({}), None):
            with mlflow.start_run(experiment_id=exp) as run:
                if first is not None:  # `mlflow run` logged these before pipi started
                    mlflow.log_params(first)
                handle = tracking.run_of(run.info.run_id)
                handle.log_params(_pipi_train_params({}))
                handle.log_params(resolved)
            logged.append(mlflow.get_run(run.info.run_id).data.params)
        assert logged[0] == logged[1]
        p = logged[0]
        assert p["compile"] == "false" and p["deterministic"] == "true"
        assert "compile.resolved" not in p and "deterministic.resolved" not in p
        assert p["batch_size"] == "auto" and p["batch_size.resolved"] == "16"
        assert tracking.resolved_param(p, "profile") == "smoke"
        assert tracking.resolved_param(p, "cell") == "pi"
    finally:
        mlflow.set_tracking_uri(None)


def test_a_run_reads_its_params_as_requested_whichever_launcher_logged_them(store_uri,
                                                                          monkeypatch):
    """Issue 38 / 41 M6: `mlflow run` logs an empty `train_sources` as the two characters
    ``''``; read back (RunRecord, the runs table aggregate and promote select from), it is
    empty, so the run trained on every source joins the aggregate's arms instead of a
    leave-one-source-out condition named ``train '' -> test ''``."""
    from pipi.analysis.loso import split_heldout_runs
    from pipi.tracking.queries import load_runs

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    mlflow.set_tracking_uri(store_uri)
    logged = _mlflow_run_params({"cell": "pi", "data": "/tmp/my data/staged"})
    assert logged["train_sources"] == "''" and logged["data"] == "'/tmp/my data/staged'"
    exp = experiment("mixed")
    with mlflow.start_run(experiment_id=exp) as run:
        mlflow.log_params(logged)
    with mlflow.start_run(experiment_id=exp):
        mlflow.log_params({**logged, "train_sources": "KID,AIIMS", "test_sources": "SEE-AI"})
    rec = tracking.get_run(run.info.run_id)
    assert rec.params["train_sources"] == "" and rec.params["data"] == "/tmp/my data/staged"
    assert rec.params["cell"] == "pi"
    everywhere, heldout = split_heldout_runs(load_runs("mixed"))
    assert everywhere["run_id"].tolist() == [run.info.run_id] and len(heldout) == 1
    assert tracking.records.unquote_param("'it'\"'\"'s'") == "it's"
    assert tracking.records.unquote_param("'") == "'" and tracking.records.unquote_param("a b") == "a b"


def test_a_project_run_pipi_did_no_work_in_says_what_it_was(store_uri, monkeypatch):
    """Issue 38: a no-op `mlflow run -e stage` and a refused promote left runs named by
    MLflow's random names (`carefree-shrimp-32`); they are renamed to say what they were."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    mlflow.set_tracking_uri(store_uri)
    c = mlflow.MlflowClient()
    rid = c.create_run(c.create_experiment("noop")).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", rid)
    assert tracking.tag_project_run({tracking.tags.TAG_ENTRY_POINT: "stage"}, note="nothing staged",
                                    name="stage synthetic-demo (reused, no-op)") == rid
    run = c.get_run(rid)
    assert run.info.run_name == "stage synthetic-demo (reused, no-op)"
    assert run.data.tags["mlflow.note.content"] == "nothing staged"


def test_a_run_no_launcher_parsed_logs_the_request_form_mlflow_run_logs():
    """Issue 38 item 6: a sequence cell's base (trained nested) and a sweep's in-process child
    logged only the resolved values (47 params against 62); they log the options that ask for
    their configuration, as `mlflow run . -e train` logs them for that request."""
    from pipi.config import make_config, train_params
    from pipi.training.sequence import base_config
    from pipi.runs.training import request_form

    seq = make_config(cell="b_plus", seed=7, backbone="resnet18", profile="smoke",
                      weights="none", image_size=48)
    base = base_config(seq)
    form = request_form(base, "/tmp/my data/staged")
    want = _mlflow_run_params({**train_params(base, data="/tmp/my data/staged")})
    assert form == want
    assert form["cell"] == base.cell and form["seed"] == "7" and form["image_size"] == "48"
    assert form["batch_size"] == "auto" and form["data"] == "'/tmp/my data/staged'"
    # the same request `pipi train` parses logs the same params
    assert form == _pipi_train_params({k: str(v) for k, v in
                                       train_params(base, data="/tmp/my data/staged").items()})
    # the default data (synthetic) is the MLproject's default, as a request without -P data
    assert request_form(base, None)["data"] == "synthetic"


def test_the_recipe_names_the_environment_mlflow_run_built(store_uri, monkeypatch):
    """Issue 38 item 8: the `pipi.recipe` tag said `--env-manager local` under MLflow's default
    environment; it names what `mlflow run` tagged its run with (`mlflow.project.env`)."""
    from pipi.config import make_config, recipe_command
    from pipi.errors import ConfigError

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mlflow.set_tracking_uri(store_uri)
    try:
        assert tracking.launch_env_manager() == "local"          # pipi train: this process
        c = mlflow.MlflowClient()
        exp = c.create_experiment("env")
        built = c.create_run(exp, tags={"mlflow.project.env": "virtualenv"}).info.run_id
        local = c.create_run(exp).info.run_id                    # --env-manager local tags none
        monkeypatch.setenv("MLFLOW_RUN_ID", built)
        assert tracking.launch_env_manager() == "virtualenv"
        monkeypatch.setenv("MLFLOW_RUN_ID", local)
        assert tracking.launch_env_manager() == "local"
    finally:
        mlflow.set_tracking_uri(None)
    cfg = make_config(cell="pi", profile="smoke")
    assert "--env-manager virtualenv" in recipe_command(cfg, env_manager="virtualenv")
    assert "--env-manager local" in recipe_command(cfg)
    with pytest.raises(ConfigError, match="env_manager"):
        recipe_command(cfg, env_manager="docker")
