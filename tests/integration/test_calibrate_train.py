"""calibrate mode=train: each Optuna trial a tracked pi training run nested under the
calibrate parent (2 local workers on a PostgreSQL study); a second grid study over the same
grid trains nothing new (config-hash reuse); the same grid as a SLURM job array of 2 workers;
the same grid scored on a Galar system's calibration fold (reused runs, their logged models)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from pipi.tracking import resolved_param
from pipi.calibration.objective import calibration_fold
from pipi.calibration.study import open_storage
from pipi.data.staging import load_staged
from pipi.errors import PipiError
from pipi.predictions import PROB_COLUMNS, read_predictions
from pipi.workflows.calibrate import run_calibration
from pipi.runs.training import train

SMOKE = {"backbone": "resnet18", "profile": "smoke", "weights": "none", "seed": 41}


@pytest.fixture(scope="module")
def storage():
    """A PostgreSQL Optuna storage when PostgreSQL is installed, else a SQLite file."""
    from pipi.tracking.server import Postgres, pg_bin

    root = Path(tempfile.mkdtemp(prefix="pipi-caltrain-"))  # outside pytest's 0700 tree
    root.chmod(0o755)  # the postgres user must reach its folder
    pg = Postgres(root / "pg", databases=("optuna",)) if pg_bin() else None
    # the workers take only the URL (the cluster authenticates with a password)
    yield pg.uri("optuna", with_password=True) if pg else f"sqlite:///{root / 'optuna.db'}"
    if pg:
        pg.stop()
    shutil.rmtree(root, ignore_errors=True)


def _kw(storage: str, tiny_staged: Path) -> dict:
    return dict(mode="train", target="kvasir-val", trials=4, sampler="grid", pruner="median",
                search="alpha,lambda_eff", storage=storage, workers=2, data=str(tiny_staged),
                experiment="calibrate-train", train_fn=train, **SMOKE)


@pytest.fixture(scope="module")
def grid_study(mlflow_server, storage, tiny_staged):
    """The 2 x 2 grid trained once by 2 local workers (4 smoke pi runs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
        mlflow.set_tracking_uri(mlflow_server.uri)
        return run_calibration(study="caltrain-a", **_kw(storage, tiny_staged))


def _children(parent_id: str):
    return mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")


def _independent_auc(run_id: str, classes, tmp: Path) -> float:
    """The objective recomputed with scikit-learn from the run's val predictions."""
    got = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                              dst_path=str(tmp / run_id))
    df = read_predictions(Path(got), "val")
    y, p = df["label"].to_numpy(), df[list(PROB_COLUMNS)].to_numpy()
    return float(np.mean([roc_auc_score(y == c, p[:, c]) for c in classes]))


@pytest.mark.slow
def test_trials_are_training_runs_and_a_grid_restudy_trains_nothing(
        tracking, tiny_staged, storage, grid_study, tmp_path):
    kw, r = _kw(storage, tiny_staged), grid_study
    assert r.mode == "train" and r.trained == [0, 1, 2, 3] and r.reused == []
    study = optuna.load_study(study_name="caltrain-a", storage=open_storage(storage))
    trials = study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4
    assert len({t.user_attrs["worker"] for t in trials}) == 2       # two worker processes
    frames, manifest = load_staged(tiny_staged)
    classes = calibration_fold(frames, manifest, "kvasir-val").classes
    kids = {c.info.run_id: c for c in _children(r.run_id)}
    assert len(kids) == 4
    for t in trials:
        run = kids[t.user_attrs["run_id"]]
        assert run.info.status == "FINISHED"
        tags, params = run.data.tags, run.data.params
        assert tags["pipi.entry_point"] == "train" and tags["pipi.optuna_study"] == "caltrain-a"
        assert tags["pipi.trial_number"] == str(t.number) and tags["pipi.pruned"] == "false"
        assert params["cell"] == "pi" and params["backbone"] == "resnet18"
        assert float(params["alpha"]) == pytest.approx(t.params["alpha"])
        assert float(params["lambda_eff"]) == pytest.approx(t.user_attrs["lambda_eff"])
        assert "pipi.config_hash" in tags and "test/macro_auc" in run.data.metrics
        # the epoch's val macro-AUC went to Optuna (what the pruner decides on)
        assert t.intermediate_values == {0: pytest.approx(run.data.metrics["val/macro_auc"])}
        assert t.value == pytest.approx(_independent_auc(run.info.run_id, classes, tmp_path))
    # the grid: alpha in {1, 12} x lambda_eff_fraction in {0.1, 1.0}
    assert sorted((round(t.params["alpha"], 6), t.params["lambda_eff_fraction"])
                  for t in trials) == [(1.0, 0.1), (1.0, 1.0), (12.0, 0.1), (12.0, 1.0)]
    parent = mlflow.get_run(r.run_id)
    assert parent.data.params["mode"] == "train" and parent.data.tags[
        "pipi.calibrate_mode"] == "train"
    doc = json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=r.run_id, artifact_path="prior_params.json", dst_path=str(tmp_path))).read_text())
    best = max(trials, key=lambda t: t.value)
    assert doc["mode"] == "train" and doc["alpha"] == pytest.approx(best.params["alpha"])
    assert doc["best_run_id"] == best.user_attrs["run_id"]
    table = pd.read_csv(mlflow.artifacts.download_artifacts(
        run_id=r.run_id, artifact_path="optuna/trials.csv", dst_path=str(tmp_path)))
    assert sorted(table["run_id"]) == sorted(kids) and not table["reused"].any()
    assert "plots.html" in {Path(a.path).name for a in mlflow.MlflowClient().list_artifacts(
        r.run_id, "optuna")}

    # the same grid under another study name: every trial reuses a FINISHED run
    r2 = run_calibration(study="caltrain-b", **kw)
    assert r2.trained == [] and r2.reused == [0, 1, 2, 3]
    assert _children(r2.run_id) == []
    again = optuna.load_study(study_name="caltrain-b", storage=open_storage(storage)).trials
    assert {t.user_attrs["run_id"] for t in again} == set(kids)
    by_run = {t.user_attrs["run_id"]: t.value for t in trials}
    assert all(t.value == pytest.approx(by_run[t.user_attrs["run_id"]]) for t in again)


@pytest.mark.slow
def test_the_grid_as_a_slurm_array_of_two_workers(tracking, tiny_staged, storage, grid_study,
                                                  slurm):
    kw = {**_kw(storage, tiny_staged), "executor": "slurm"}
    r = run_calibration(study="caltrain-slurm", **kw)
    assert len(r.workers) == 2 and r.trained == [] and r.reused == [0, 1, 2, 3]
    trials = optuna.load_study(study_name="caltrain-slurm", storage=open_storage(storage)).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4
    workers = {t.user_attrs["worker"] for t in trials}     # hostname:pid:w<i>, one per task
    assert len(workers) == 2 and all(os.getpid() != int(w.split(":")[1]) for w in workers)
    jobs = Path(os.environ["PIPI_SLURM_DIR"]) / r.run_id / "calibrate"
    assert sorted(p.name for p in jobs.glob("worker-*.result.json")) == [
        "worker-0.result.json", "worker-1.result.json"]
    first = {
        t.user_attrs["run_id"] for t in optuna.load_study(
            study_name=grid_study.study, storage=open_storage(storage)).trials}
    assert {t.user_attrs["run_id"] for t in trials} == first


def _train_then_die(cfg, **kw):
    """``train``, but its worker process gets SIGTERM at the end of the first epoch."""
    def die(epoch, metrics, model):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # pipi's handler raises here

    return train(cfg, **{**kw, "epoch_hook": die})


@pytest.mark.slow
def test_a_worker_killed_mid_trial_fails_it_and_a_restart_continues(
        tracking, tiny_staged, storage, grid_study):
    kw = {**_kw(storage, tiny_staged), "workers": 1, "study": "caltrain-kill"}
    # trial 0 is the default prior (tpe enqueues it): not in the grid, so it trains
    with pytest.raises(PipiError, match="worker 0"):
        run_calibration(**{**kw, "sampler": "tpe", "trials": 1, "train_fn": _train_then_die})
    (t0,) = optuna.load_study(study_name="caltrain-kill", storage=open_storage(storage)).trials
    assert t0.state == optuna.trial.TrialState.FAIL and t0.params["alpha"] == 4.0
    run = mlflow.get_run(t0.user_attrs["run_id"])
    assert run.info.status == "KILLED"
    assert "SIGTERM" in run.data.tags["pipi.failure_reason"]
    parents = mlflow.search_runs(experiment_names=["calibrate-train"], output_format="list",
                                 filter_string="tags.`pipi.optuna_study` = 'caltrain-kill' and "
                                 "tags.`pipi.entry_point` = 'calibrate'")
    assert [p.info.status for p in parents] == ["FAILED"]
    # the restart continues the same study (the grid's points reuse the finished runs)
    r = run_calibration(**kw)
    trials = optuna.load_study(study_name="caltrain-kill", storage=open_storage(storage)).trials
    assert [t.state.name for t in trials] == ["FAIL"] + ["COMPLETE"] * 4
    assert r.trained == [] and r.reused == [1, 2, 3, 4] and r.n_total == 5


@pytest.mark.slow
def test_the_grid_scored_on_a_galar_calibration_fold_reuses_every_run(
        tracking, tiny_staged, storage, grid_study, galar_staged):
    from pipi.data.cache import build_cache

    gframes, gman = load_staged(galar_staged)
    system = sorted(set(gframes["capsule_system"]))[-1]
    kw = {**_kw(storage, tiny_staged), "workers": 1, "target": f"galar:{system}",
          "target_data": str(galar_staged)}
    # a kvasir-val study is bound to its target: a Galar call on it is refused, nothing runs
    with pytest.raises(PipiError, match="belongs to another calibration"):
        run_calibration(**{**kw, "study": grid_study.study})
    r = run_calibration(study="caltrain-galar", **kw)
    assert r.trained == [] and r.reused == [0, 1, 2, 3] and _children(r.run_id) == []
    study = optuna.load_study(study_name="caltrain-galar", storage=open_storage(storage))
    assert study.user_attrs["pipi.target_data_digest"] == gman["data_digest"]
    first = {t.user_attrs["run_id"] for t in optuna.load_study(
        study_name=grid_study.study, storage=open_storage(storage)).trials}
    assert {t.user_attrs["run_id"] for t in study.trials} == first
    # each value, recomputed: the run's logged pyfunc model predicts the fold's images (it
    # computes its own prior), scikit-learn scores the fold's headline classes
    fold = calibration_fold(gframes, gman, f"galar:{system}")
    assert set(fold.rows) <= set(np.flatnonzero(gframes["vendor_fold"] == "calibration"))
    # read as every run is read (the request form image_size=auto beside .resolved)
    size = int(resolved_param(mlflow.get_run(r.run_id).data.params, "image_size"))
    images = build_cache(galar_staged, gframes, size=size, digest=gman["data_digest"],
                         cache_dir=Path(os.environ["PIPI_HOME"]) / "cache", progress=False)
    values = set()
    for t in study.trials:
        run = mlflow.get_run(t.user_attrs["run_id"])
        assert int(resolved_param(run.data.params, "image_size")) == size
        py = mlflow.pyfunc.load_model(f"models:/{run.outputs.model_outputs[0].model_id}")
        rgb = np.asarray(images[fold.rows]).transpose(0, 2, 3, 1)   # the cache is N x 3 x S x S
        p = py.predict(pd.DataFrame({"pixels": list(rgb)})).to_numpy()
        want = np.mean([roc_auc_score(fold.labels == c, p[:, c]) for c in fold.classes])
        assert t.value == pytest.approx(want, abs=1e-5)
        values.add(round(t.value, 6))
    assert len(values) > 1                           # the four models do score differently
    parent = mlflow.get_run(r.run_id)
    assert parent.data.params["target_data_digest"] == gman["data_digest"]
    assert parent.data.params["fold_frames"] == str(len(fold.rows))
