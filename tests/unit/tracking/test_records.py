"""The tracking wall: runs come out of tracking as frozen RunRecords, every tracking module
names its public names (``__all__``), and the package re-exports exactly those, by name."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import math
import pickle
from pathlib import Path
from types import MappingProxyType

import pytest
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.tracking import RunRecord, VersionRecord
from pipi.tracking.records import run_record

TRACKING = Path(tracking.__file__).parent



def test_a_run_read_through_tracking_is_a_record_with_what_mlflow_holds(store):
    c = MlflowClient()
    rid = c.create_run(store, run_name="r1", tags={
        tracking.tags.TAG_CELL: "pi", tracking.tags.TAG_BACKBONE: "resnet18",
        tracking.tags.TAG_SEED: "-3",
        tracking.tags.TAG_DATA_DIGEST: "d" * 64, tracking.tags.TAG_CONFIG_HASH: "h1",
        tracking.tags.TAG_ENTRY_POINT: "train"}).info.run_id
    c.log_param(rid, "data_dir", "/staged/x")
    c.log_param(rid, "profile", "auto")
    c.log_param(rid, "profile.resolved", "smoke")
    c.log_metric(rid, "test/macro_auc", 0.5)
    c.log_metric(rid, "test/macro_auc", 0.75)     # the record holds the latest value
    c.set_terminated(rid, "FINISHED")
    mine = c.get_run(rid)

    rec = tracking.get_run(rid)
    assert isinstance(rec, RunRecord)
    assert (rec.run_id, rec.run_name, rec.experiment_id, rec.status) == (
        rid, "r1", store, "FINISHED")
    assert (rec.start_time, rec.end_time, rec.artifact_uri, rec.lifecycle_stage) == (
        mine.info.start_time, mine.info.end_time, mine.info.artifact_uri, "active")
    assert dict(rec.tags) == mine.data.tags and dict(rec.params) == mine.data.params
    assert dict(rec.metrics) == mine.data.metrics == {"test/macro_auc": 0.75}
    assert (rec.cell, rec.backbone, rec.seed, rec.data_digest, rec.data_dir) == (
        "pi", "resnet18", -3, "d" * 64, "/staged/x")
    assert (rec.config_hash, rec.entry_point, rec.test_macro_auc) == ("h1", "train", 0.75)
    assert rec.resolved_param("profile") == "smoke" and rec.finished and not rec.live
    # find_finished_run(s) and child_runs hand out records too
    assert tracking.find_finished_run("h1").run_id == rid
    assert [r.run_id for r in tracking.find_finished_runs({tracking.tags.TAG_CELL: "pi"})] == [rid]


def test_a_record_is_frozen_and_its_mappings_are_read_only():
    rec = RunRecord(run_id="r", tags={"a": "1"}, params={"p": "2"}, metrics={"m": 1.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.status = "FINISHED"
    for mapping in (rec.tags, rec.params, rec.metrics):
        with pytest.raises(TypeError):
            mapping["x"] = "y"
    src = {"a": "1"}
    rec = RunRecord(run_id="r", tags=src)
    src["a"] = "changed"                          # the caller's dict is copied, not shared
    assert rec.tags["a"] == "1"
    assert RunRecord(run_id="r").seed is None and math.isnan(RunRecord(run_id="r").test_macro_auc)
    assert RunRecord(run_id="r", tags={tracking.tags.TAG_SEED: "x1"}).seed is None
    assert RunRecord(run_id="r", status="SCHEDULED").live
    assert run_record(rec) is rec
    full = RunRecord(run_id="r", status="FAILED", start_time=1, tags={"a": "1"},
                     metrics={"m": 0.5}, model_ids=("m-1",))
    back = pickle.loads(pickle.dumps(full))        # a record may go to a worker process
    assert back == full and isinstance(back.tags, MappingProxyType)


def test_pipi_run_and_child_runs_give_records(store):
    with tracking.pipi_run(entry_point="test", experiment="records") as run:
        assert isinstance(run, tracking.mlflow_run.MlflowRun) and isinstance(run.started, RunRecord)
        assert run.started.status == "RUNNING" and run.record().status == "RUNNING"
        assert run.started.entry_point == "test" and run.experiment_id == store
    child = tracking.create_child_run(run.run_id, run_name="c", tags={tracking.tags.TAG_CELL: "a"})
    [rec] = tracking.runs.child_runs(run.run_id)
    assert isinstance(rec, RunRecord) and (rec.run_id, rec.cell, rec.parent_run_id) == (
        child, "a", run.run_id)


def test_a_model_version_read_through_tracking_is_a_record(store):
    c = MlflowClient()
    rid = c.create_run(store).info.run_id
    c.create_registered_model("rec-model")
    c.create_model_version("rec-model", f"runs:/{rid}/model", run_id=rid,
                           tags={"run_id": rid}, description="evidence")
    c.set_registered_model_alias("rec-model", "candidate", "1")
    by_number = tracking.registry.model_version("rec-model", "1")
    assert isinstance(by_number, VersionRecord)
    assert (by_number.name, by_number.version, by_number.run_id, by_number.description) == (
        "rec-model", "1", rid, "evidence")
    assert dict(by_number.tags) == {"run_id": rid}
    with pytest.raises(TypeError):
        by_number.tags["x"] = "y"
    assert tracking.registry.model_version("rec-model", alias="candidate") == by_number
    assert tracking.registry.missing_version_tags(by_number) == [
        k for k in tracking.registry.VERSION_TAGS if k != "run_id"]
    assert pickle.loads(pickle.dumps(by_number)) == by_number


def _modules() -> list[str]:
    return sorted(p.stem for p in TRACKING.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", _modules())
def test_every_tracking_module_names_its_public_names(name):
    """``__all__`` is explicit, lists only names the module defines or re-exports on purpose,
    and leaves out the libraries it imports (mlflow, MlflowClient, os ...)."""
    text = (TRACKING / f"{name}.py").read_text()
    assert any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                 for t in n.targets)
               for n in ast.parse(text).body), f"pipi/tracking/{name}.py has no __all__"
    module = importlib.import_module(f"pipi.tracking.{name}")
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.__all__ names {public}, which it lacks"
        assert not public.startswith("_")
        assert getattr(getattr(module, public), "__module__", "").split(".")[0] != "mlflow"


def test_the_package_re_exports_by_name_what_its_modules_export():
    """The face lists every name of its modules' ``__all__`` it re-exports (issue 39: lazily,
    a static import under ``TYPE_CHECKING`` and its module in ``_MODULES``)."""
    init = ast.parse((TRACKING / "__init__.py").read_text())
    stars = [n.module for n in ast.walk(init)
             if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
    assert stars == [], f"star imports in pipi/tracking/__init__.py: {stars}"
    guarded = [n.body for n in init.body if isinstance(n, ast.If)
               and ast.unparse(n.test) == "TYPE_CHECKING"]   # the lazy face's static imports
    imported = {a.asname or a.name: n.module.rsplit(".", 1)[-1]
                for n in [*init.body, *(x for body in guarded for x in body)]
                if isinstance(n, ast.ImportFrom) and n.module.startswith("pipi.tracking.")
                for a in n.names}
    exported = set(tracking.__all__)
    assert exported == set(imported), sorted(exported ^ set(imported))
    # the lazy table says the same as the static imports
    assert tracking._WHERE == imported
    for name, mod in imported.items():
        assert name in importlib.import_module(f"pipi.tracking.{mod}").__all__, (name, mod)
    assert not any(n.startswith("_") for n in exported)
    # issue 39: the face is what the layers above use, about 60 names (213 at 07fdbae); the tag
    # names and the registry's operations are reached through their modules
    assert len(exported) <= 65, len(exported)
    assert not any(n.startswith("TAG_") for n in exported) and "set_aliases" not in exported


def test_the_tracking_face_is_light():
    """Issue 39: importing the face (and reading a tag name) loads neither mlflow nor torch."""
    import subprocess
    import sys

    code = ("import sys; from pipi import tracking; tracking.tags.TAG_CELL; tracking.RunRecord; "
            "print(sorted(m for m in ('mlflow', 'torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]", out
