"""The run as a value (issue 39): a handle logs to the run it names, and the in-memory run
follows the same rules as the MLflow one (one script logged into each, the records compared)."""

from __future__ import annotations

import json
import logging
import os

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.errors import TrackingError
from pipi.tracking.handle import MAX_FIGURE_BYTES, MemoryRun, merge_params

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def _script(run, tmp_path) -> None:
    """What a workflow logs: request params, then resolved ones (one moved), per-epoch metrics,
    tags, files, a folder, a dict in JSON and in YAML, figures and a dataset input."""
    run.log_params({"cell": "pi", "batch_size": "auto", "compile": False, "data": None})
    run.log_params({"cell": "pi", "batch_size": 16, "seed": 3})
    for epoch, auc in enumerate((0.5, 0.75)):
        run.log_metrics({"val/macro_auc": auc, "train/loss": 1 - auc}, step=epoch)
    run.log_metrics({"test/macro_auc": 0.625})
    run.set_tags({"pipi.cell": "pi", "pipi.seed": 3})
    run.set_description("**trained** on tiny")
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "folder" / "sub").mkdir(parents=True)
    (tmp_path / "folder" / "b.csv").write_text("x\n1\n")
    (tmp_path / "folder" / "sub" / "c.txt").write_text("gamma")
    run.log_artifact(tmp_path / "a.txt")
    run.log_artifact(tmp_path / "a.txt", "checkpoints")
    run.log_artifacts(tmp_path / "folder", "predictions")
    run.log_text("summary", "summary/summary.md")
    run.log_dict({"epochs": [1, 2]}, "history.json")
    run.log_dict({"lr": 0.001}, "config.yaml")
    assert run.log_figures({"roc": PNG, "pr": PNG}) == ["figures/roc.png", "figures/pr.png"]
    frames = pd.DataFrame({"path": ["a.jpg", "b.jpg"], "split": ["train", "test"]})
    run.log_dataset(frames, source=str(tmp_path), name="tiny-train", digest="d" * 64,
                    context="training")


def _mlflow_files(run_id: str, tmp_path) -> dict[str, str]:
    local = mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path / "dl"))
    from pathlib import Path

    root = Path(local)
    return {p.relative_to(root).as_posix(): p.read_bytes().decode("latin-1")
            for p in root.rglob("*") if p.is_file()}


def test_the_memory_run_keeps_what_mlflow_keeps(store, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "f").mkdir()
    with tracking.pipi_run(entry_point="test", experiment="handle") as run:
        _script(run, tmp_path / "f")
    logged = tracking.get_run(run.run_id)
    with MemoryRun() as mem:
        _script(mem, tmp_path / "m")
        held = mem.record()
        files = {p: (mem.artifact_dir / p).read_bytes().decode("latin-1")
                 for p in mem.artifacts()}
        datasets = mem.datasets
        history = mem.history

    assert dict(held.params) == dict(logged.params)
    assert held.params["batch_size.resolved"] == "16" and held.params["compile"] == "false"
    assert {k: logged.tags[k] for k in held.tags} == dict(held.tags)
    assert held.tags[tracking.handle.NOTE_TAG] == "**trained** on tiny"
    assert dict(held.metrics) == dict(logged.metrics)
    c = MlflowClient()
    for key, steps in history.items():
        assert [(m.step, m.value) for m in c.get_metric_history(run.run_id, key)] == steps
    assert files == _mlflow_files(run.run_id, tmp_path)
    assert json.loads(files["history.json"]) == {"epochs": [1, 2]}
    assert yaml.safe_load(files["config.yaml"]) == {"lr": 0.001}
    inputs = c.get_run(run.run_id).inputs.dataset_inputs
    assert [(i.dataset.name, i.dataset.digest, i.tags[0].value) for i in inputs] == datasets


def test_a_handle_logs_to_its_run_whichever_run_is_active(store, tmp_path):
    """The handle names its run on every call: another run active in the process (a nested
    child, a library's own) does not receive what the handle logs."""
    with tracking.pipi_run(entry_point="outer", experiment="handle") as outer:
        with mlflow.start_run(nested=True) as other:
            outer.log_params({"where": "outer"})
            outer.log_metrics({"m": 1.0})
            outer.set_tags({"t": "x"})
            outer.log_text("hello", "note.txt")
    got, stray = tracking.get_run(outer.run_id), tracking.get_run(other.info.run_id)
    assert got.params["where"] == "outer" and got.metrics["m"] == 1.0 and got.tags["t"] == "x"
    assert "where" not in stray.params and "m" not in stray.metrics and "t" not in stray.tags
    assert tracking.has_artifact(outer.run_id, "note.txt")


def test_a_run_of_an_id_names_that_run(store):
    with tracking.pipi_run(entry_point="a", experiment="handle") as a:
        pass
    handle = tracking.run_of(a.run_id)
    assert handle.run_id == a.run_id and handle.experiment_id == a.experiment_id
    handle.log_metrics({"late": 2.0}, step=5)
    assert tracking.get_run(a.run_id).metrics["late"] == 2.0


def test_params_merge_as_both_launchers_log_them():
    existing = {"compile": "False", "data": "''", "batch_size": "0"}
    assert merge_params(existing, {"compile": False, "data": "", "batch_size": 32,
                                   "new": True}) == {"batch_size.resolved": "32", "new": "true"}


def test_the_memory_run_keeps_the_figure_budget_and_its_folder(caplog):
    with MemoryRun() as run, caplog.at_level(logging.WARNING):
        kept = run.log_figures({"a": PNG, "big": b"\x89PNG" + b"\0" * MAX_FIGURE_BYTES})
        assert kept == ["figures/a.png"] and "figure big" in caplog.text
        with pytest.raises(ValueError, match="not a PNG"):
            run.log_figures({"x": b"GIF89a"})
        with pytest.raises(ValueError, match="leaves the run's artifacts"):
            run.log_text("x", "../outside.txt")
        root = run.artifact_dir
    assert not root.exists()


def test_a_run_in_an_experiment_leaves_no_experiment_behind(store, monkeypatch):
    """pipi_run(experiment=...) finds (or creates) the experiment and starts the run there
    without mlflow.set_experiment, which would export MLFLOW_EXPERIMENT_ID to every later run
    and child process of this one; a nested run goes where its parent is."""
    from mlflow.tracking import fluent

    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.setattr(fluent, "_active_experiment_id", None)
    with tracking.pipi_run(entry_point="outer", experiment="fresh-one") as outer:
        with tracking.pipi_run(entry_point="inner", nested=True) as inner:
            pass
    fresh = MlflowClient().get_experiment_by_name("fresh-one").experiment_id
    assert outer.experiment_id == inner.experiment_id == fresh
    assert inner.record().parent_run_id == outer.run_id
    assert "MLFLOW_EXPERIMENT_ID" not in os.environ
    assert fluent._active_experiment_id is None
    MlflowClient().delete_experiment(fresh)
    with pytest.raises(TrackingError, match="is deleted; restore it"):
        with tracking.pipi_run(entry_point="again", experiment="fresh-one"):
            pass


def test_a_dataset_input_is_logged_without_mlflow_s_integer_hint(store, tmp_path):
    """A frame index has integer columns and no missing values: MLflow's hint about integer
    columns in a model signature is noise in every training's output (test_tour)."""
    import warnings

    frames = pd.DataFrame({"path": ["a.jpg", "b.jpg"], "class_index": [1, 2]})
    with tracking.pipi_run(entry_point="t", experiment="handle") as run:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run.log_dataset(frames, source=str(tmp_path), name="d", digest="e" * 64,
                            context="training")
    assert not [w for w in caught if "Inferred schema contains integer" in str(w.message)]
    [got] = MlflowClient().get_run(run.run_id).inputs.dataset_inputs
    assert got.dataset.name == "d" and got.tags[0].value == "training"


def test_a_deleted_artifact_leaves_no_empty_folder(store, tmp_path):
    """Both runs remove a file and the folders it leaves empty (the UI would list them), and
    keep a folder that still holds something."""
    (tmp_path / "last.pt").write_bytes(b"x")
    (tmp_path / "best.pt").write_bytes(b"y")
    with tracking.pipi_run(entry_point="test", experiment="handle") as run, MemoryRun() as mem:
        for r in (run, mem):
            r.log_artifact(tmp_path / "last.pt", "checkpoints")
            r.log_artifact(tmp_path / "best.pt", "checkpoints")
            r.log_artifact(tmp_path / "last.pt", "a/b")
            r.delete_artifact("checkpoints/last.pt")
            r.delete_artifact("a/b/last.pt")
        kept = mem.artifacts()
        folders = sorted(p.name for p in mem.artifact_dir.iterdir())
        with pytest.raises(ValueError, match="leaves the run's artifacts"):
            mem.delete_artifact("../elsewhere")
    c = MlflowClient()
    assert kept == ["checkpoints/best.pt"] and folders == ["checkpoints"]
    assert [a.path for a in c.list_artifacts(run.run_id)] == ["checkpoints"]
    assert [a.path for a in c.list_artifacts(run.run_id, "checkpoints")] == ["checkpoints/best.pt"]


def test_the_checkpoint_of_a_finished_training_is_dropped(tmp_path, caplog):
    """A training's tracker removes the checkpoint it logged (resume refuses a FINISHED run);
    a store that refuses is a warning, not a failed run; a tracker that logged none and
    resumed none has nothing to remove."""
    with MemoryRun() as mem:
        tracker = tracking.RunTracker(mem, tmp_path / "w")
        tracker.drop_checkpoint()   # nothing logged: nothing asked of the store
        tracker.log_checkpoint({"config": {}, "epoch": 0})
        tracker.log_checkpoint({"config": {}, "epoch": 1})
        assert mem.artifacts() == ["checkpoints/last.pt"]
        tracker.drop_checkpoint()
        assert mem.artifacts() == [] and not (mem.artifact_dir / "checkpoints").exists()

    class Refusing(MemoryRun):
        def delete_artifact(self, artifact_path):
            raise OSError("permission denied\nsecond line")

    with Refusing() as mem, caplog.at_level(logging.WARNING):
        tracker = tracking.RunTracker(mem, tmp_path / "r", resumed=True)
        tracker.drop_checkpoint()
    assert [r.getMessage() for r in caplog.records] == [
        f"run {mem.run_id}: checkpoints/last.pt stays in the artifact store "
        "(OSError: permission denied)"]
