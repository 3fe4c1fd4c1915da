"""Registration is one step as seen from outside (issue 31): the version is created with all
its tags and description; a resume never registers a second version of a run; promote
refuses a version without the full tag set."""

from __future__ import annotations

import mlflow
import pytest
from fakes import experiment
import torch
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.tracking.logged_model import log_frame_model, registered_name
from pipi.training.frames import build_frame_model

NAME = "pipi-resnet18-a"


@pytest.fixture()
def cfg(monkeypatch):
    monkeypatch.setenv("PIPI_MODEL_PREFIX", "pipi")
    return make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                       image_size=32)


def _log(cfg, tmp_path, description="evidence of the run"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    run = tracking.run_of(mlflow.active_run().info.run_id)   # the test's own run
    return log_frame_model(run, cfg, build_frame_model(cfg), tmp_path, test_auc=0.75,
                           register=True,
                           tags={tracking.tags.TAG_RECIPE: "mlflow run . -e train -P cell=a"},
                           description=description)


def _versions(run_id: str) -> list:
    return MlflowClient().search_model_versions(f"name='{NAME}' and run_id='{run_id}'")


def test_a_signal_right_after_the_create_call_leaves_a_complete_version(
        sqlite_tracking, cfg, tmp_path, monkeypatch):
    assert registered_name(cfg) == NAME
    created = MlflowClient._create_model_version if hasattr(
        MlflowClient, "_create_model_version") else None
    real = MlflowClient.create_model_version

    def then_signal(real_fn):
        def wrapped(self, *a, **k):
            real_fn(self, *a, **k)
            raise KeyboardInterrupt  # SIGTERM/SIGINT arrive as soon as the version exists
        return wrapped

    monkeypatch.setattr(MlflowClient, "create_model_version", then_signal(real))
    if created is not None:
        monkeypatch.setattr(MlflowClient, "_create_model_version", then_signal(created))
    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp) as run, pytest.raises(KeyboardInterrupt):
        _log(cfg, tmp_path)
    (mv,) = _versions(run.info.run_id)
    assert tracking.registry.missing_version_tags(mv) == [], mv.tags
    assert mv.tags["cell"] == "a" and mv.tags["seed"] == str(cfg.seed)
    assert mv.tags["run_id"] == run.info.run_id
    assert mv.description == "evidence of the run"


def test_a_resume_keeps_the_runs_version(sqlite_tracking, cfg, tmp_path):
    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp) as run:
        first = _log(cfg, tmp_path / "1")
    # the run resumed after its registration (e.g. killed while setting the alias)
    with mlflow.start_run(run_id=run.info.run_id):
        again = _log(cfg, tmp_path / "2")
    assert again["registered"] == first["registered"]
    (mv,) = _versions(run.info.run_id)
    assert MlflowClient().get_model_version_by_alias(NAME, "candidate").version == mv.version


def test_a_half_tagged_version_is_completed_not_duplicated(sqlite_tracking, cfg, tmp_path):
    c = MlflowClient()
    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp) as run:
        pass
    rid = run.info.run_id
    partial = {"run_id": rid, "test_macro_auc": "0.7", "recipe": "r", "recipe_hash": "",
               "data_digest": "d"}  # what a kill between tag writes left (5 of 9)
    if not c.search_registered_models(f"name='{NAME}'"):
        c.create_registered_model(NAME)
    mv = c.create_model_version(NAME, f"runs:/{rid}/model", run_id=rid, tags=partial)
    with mlflow.start_run(run_id=rid):
        out = _log(cfg, tmp_path)
    assert out["registered_version"] == str(mv.version)
    (got,) = _versions(rid)
    assert tracking.registry.missing_version_tags(got) == []


def test_promote_refuses_a_version_without_the_full_tag_set(sqlite_tracking, tmp_path):
    from pipi.workflows.promote import promote

    c = MlflowClient()
    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp) as run:
        pass
    if not c.search_registered_models(f"name='{NAME}'"):
        c.create_registered_model(NAME)
    mv = c.create_model_version(NAME, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id,
                                tags={"run_id": run.info.run_id, "test_macro_auc": "0.7",
                                      "recipe": "r", "recipe_hash": "", "data_digest": "d"})
    with pytest.raises(ConfigError) as exc:
        promote(model=NAME, version=str(mv.version), force_reason="ship it")
    msg = str(exc.value)
    assert "\n" not in msg and f"version {mv.version}" in msg, msg
    for tag in ("git_commit", "cell", "backbone", "seed"):
        assert tag in msg, msg
    assert tracking.registry.alias_version(NAME, "champion") is None


def test_a_dependency_registers_but_moves_no_alias(sqlite_tracking, cfg, tmp_path):
    """Issue 38: a run trained because another needed it (a sequence cell's base) registers,
    tagged with the run that needed it, and leaves ``@candidate`` where the user put it."""
    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp):
        mine = _log(cfg, tmp_path / "mine")
    with mlflow.start_run(experiment_id=exp) as needing:
        pass
    (tmp_path / "dep").mkdir()
    with mlflow.start_run(experiment_id=exp) as dep_run:
        dep = log_frame_model(tracking.run_of(dep_run.info.run_id), cfg,
                              build_frame_model(cfg), tmp_path / "dep", test_auc=0.5,
                              register=True, description="a base",
                              tags={tracking.tags.TAG_RECIPE: "r",
                                    tracking.tags.TAG_NEEDED_BY: needing.info.run_id})
    c = MlflowClient()
    assert str(c.get_model_version_by_alias(NAME, "candidate").version) == str(
        mine["registered_version"])
    v = c.get_model_version(NAME, dep["registered_version"])
    assert v.tags["needed_by"] == needing.info.run_id and not v.aliases
    assert dep["moved_alias"] is False and mine["moved_alias"] is True


def test_a_version_is_linked_to_its_logged_model_as_register_model_links_it(
        sqlite_tracking, cfg, tmp_path):
    """Issue 38: the UI read pipi's versions as "Not registered" (no ``mlflow.modelVersions``
    on the logged model). The link is compared with the one ``mlflow.register_model`` writes
    for another logged model; a resume adds no second entry."""
    import json

    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    exp = experiment("registration")
    with mlflow.start_run(experiment_id=exp) as run:
        out = _log(cfg, tmp_path / "1")
    with mlflow.start_run(run_id=run.info.run_id):
        _log(cfg, tmp_path / "2")
    mine = json.loads(mlflow.get_logged_model(out["model_id"]).tags[MLFLOW_MODEL_VERSIONS])
    with mlflow.start_run(experiment_id=exp):
        # requirements given: MLflow infers none in a subprocess (8 s of this tier)
        ref = mlflow.pyfunc.log_model(name="ref", python_model=_Echo(), input_example=[[1.0]],
                                      pip_requirements=["mlflow"])
    mv = mlflow.register_model(f"models:/{ref.model_id}", "pipi-reference-model")
    theirs = json.loads(mlflow.get_logged_model(ref.model_id).tags[MLFLOW_MODEL_VERSIONS])
    assert theirs == [{"name": "pipi-reference-model", "version": mv.version}]
    assert mine == [{"name": NAME, "version": type(mv.version)(out["registered_version"])}]


class _Echo(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return model_input


def test_a_version_read_back_from_a_sql_registry_names_its_logged_model_by_its_source():
    """MLflow's SQL registry store keeps a version's source (``models:/m-<id>``) but not its
    ``model_id``: a resume completing such a version linked nothing (the tour test found a
    version whose ``model_id`` read back None)."""
    from types import SimpleNamespace

    from pipi.tracking.registry import version_model_id

    assert version_model_id(SimpleNamespace(model_id="m-1", source="x")) == "m-1"
    assert version_model_id(SimpleNamespace(model_id=None, source="models:/m-abc")) == "m-abc"
    assert version_model_id(SimpleNamespace(model_id=None, source="runs:/r/model")) is None
    assert version_model_id(SimpleNamespace(source="models:/pipi-x/3")) is None


def test_a_models_uri_names_its_version_and_run_by_number_or_alias(store_uri, monkeypatch):
    """One parse of ``models:/`` URIs (tracking.registry) serves predict's model reference
    and the run lookup of galar/export: by number, by alias (read now), neither for others."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from pipi import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    mlflow.set_tracking_uri(store_uri)
    try:
        c = MlflowClient()
        rid = c.create_run(c.create_experiment("uris")).info.run_id
        c.set_terminated(rid)
        c.create_registered_model("m")
        c.create_model_version("m", source=f"runs:/{rid}/model", run_id=rid)
        c.set_registered_model_alias("m", "candidate", "1")
        for uri in ("models:/m/1", "models:/m@candidate"):
            mv = tracking.registry.model_uri_version(uri)
            assert (mv.name, str(mv.version), mv.run_id) == ("m", "1", rid)
            assert tracking.registry.model_uri_run_id(uri) == rid
        assert tracking.registry.model_uri_version(f"runs:/{rid}/model") is None
        with pytest.raises(Exception, match="alias @champion"):
            tracking.registry.model_uri_version("models:/m@champion")
    finally:
        mlflow.set_tracking_uri(None)
