"""`train`: per-frame cells on three backbones, run contract, registry, failure behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from fakes import FakeTracker

from pipi.cells import PER_FRAME_CELLS
from pipi.config import make_config
from pipi.models.backbones import PAPER_ARCHS as ARCHS  # ResNet-50: the unit cell matrix
from pipi.training.frames import (
    PROB_COLUMNS,
    TrainingDiverged,
    run_frame_cell,
)
from pipi.runs import training as train_workflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backbone", ARCHS)
@pytest.mark.parametrize("cell", PER_FRAME_CELLS)
def test_every_per_frame_cell_trains_on_every_backbone(cell, backbone, tiny_staged, tmp_path):
    cfg = make_config(cell=cell, backbone=backbone, profile="smoke", weights="none", seed=41)
    tr = FakeTracker()
    out = run_frame_cell(cfg, data=tiny_staged, tracker=tr, progress=False,
                         cache_dir=tmp_path / "cache")
    test = out.predictions["test"]
    assert list(test.columns[-14:]) == list(PROB_COLUMNS)
    np.testing.assert_allclose(test[list(PROB_COLUMNS)].sum(axis=1), 1.0, atol=1e-4)
    assert len(test) == (out.frames["split"] == "test").sum()
    assert 0.0 <= out.metrics["test/macro_auc"] <= 1.0
    assert [s for s, _ in tr.metrics] == [0] and tr.checkpoints == [0]
    assert set(tr.metrics[0][1]) == {"train/loss", "val/macro_auc", "val/macro_f1", "train/lr"}


#: MLflow's fluent API exports these into os.environ (``mlflow.set_experiment``), so a session
#: or module fixture that runs before the per-test isolation (tests/conftest.py) may still see
#: another store's experiment there: a launched process must not inherit them
_RUN_ENV = ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID")


def _launch_env(uri: str, env=None) -> dict:
    return {**{k: v for k, v in os.environ.items() if k not in _RUN_ENV},
            "MLFLOW_TRACKING_URI": uri,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **(env or {})}


def test_a_launch_does_not_inherit_a_leaked_experiment(monkeypatch):
    """With MLFLOW_EXPERIMENT_ID left in os.environ by an earlier fixture, `mlflow run
    --experiment-name` stopped at "Specify only one of 'experiment-name' or 'experiment-id'"
    (seen when the module's launches moved into a fixture)."""
    for k in _RUN_ENV:
        monkeypatch.setenv(k, "leaked")
    env = _launch_env("http://127.0.0.1:9", {"X": "1"})
    assert not set(_RUN_ENV) & set(env)
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:9" and env["X"] == "1"


def _run_train(uri: str, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", "train",
         "--env-manager", "local", *args],
        check=False, capture_output=True, text=True, cwd=ROOT, env=_launch_env(uri, env),
        timeout=600,
    )


#: the request both launchers run: the contract's `mlflow run` and the `pipi train` it is
#: compared with (same params, same predictions bit for bit)
REQUEST = {"cell": "pi", "seed": "42", "profile": "smoke", "weights": "none"}


@dataclass(frozen=True)
class Launches:
    """The module's launches of one request, each made once: `pipi train` into ``launchers``,
    then `mlflow run` into ``contract`` (so the registry's ``candidate`` alias moves from the
    first's version to the second's). The pair serves the reproducibility check too: it used
    to take a second `mlflow run` of the same request."""

    pipi_train: subprocess.CompletedProcess
    mlflow_run: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def launches(mlflow_server, tiny_staged) -> Launches:
    request = {**REQUEST, "data": str(tiny_staged)}
    pipi_train = subprocess.run(
        [str(Path(sys.executable).parent / "pipi"), "train", "--experiment", "launchers",
         *[x for k, v in request.items() for x in (f"--{k}", v)]],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=600,
        env=_launch_env(mlflow_server.uri))
    args = [*[x for k, v in request.items() for x in ("-P", f"{k}={v}")],
            "--experiment-name", "contract"]
    return Launches(pipi_train, _run_train(mlflow_server.uri, *args))


def _test_predictions(run_id: str, dst: Path) -> pd.DataFrame:
    p = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                            dst_path=str(dst))
    assert json.loads((Path(p) / "schema.json").read_text())["version"] == 1
    return pd.read_parquet(Path(p) / "test.parquet")


def test_mlflow_run_train_contract_registry_and_reproducibility(tracking, tiny_staged, launches,
                                                                tmp_path):
    r1, r2 = launches.pipi_train, launches.mlflow_run
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "test macro-AUC" in r2.stdout and "models:/pipi-efficientnet_b0-pi@candidate" in r2.stdout
    runs = mlflow.search_runs(experiment_names=["contract"])
    assert len(runs) == 1 and set(runs["status"]) == {"FINISHED"}
    by_pipi = mlflow.search_runs(experiment_names=["launchers"])
    assert len(by_pipi) == 1 and set(by_pipi["status"]) == {"FINISHED"}
    run = mlflow.get_run(runs["run_id"][0])
    # params, tags, metrics of the run contract
    for p in ("seed", "cell", "backbone", "lr", "alpha", "lambda_eff", "image_size", "profile"):
        assert p in run.data.params, p
    assert run.data.params["cell"] == "pi" and run.data.params["seed"] == "42"
    for t in ("pipi.entry_point", "pipi.dataset", "pipi.data_digest", "pipi.code_version",
              "mlflow.project.entryPoint"):
        assert t in run.data.tags, t
    assert run.data.tags["pipi.entry_point"] == "train"
    manifest = json.loads((tiny_staged / "manifest.json").read_text())
    assert run.data.tags["pipi.data_digest"] == manifest["data_digest"]
    hist = mlflow.tracking.MlflowClient().get_metric_history(run.info.run_id, "val/macro_auc")
    assert [m.step for m in hist] == [0]
    assert "test/macro_auc" in run.data.metrics
    evaluable = json.loads(run.data.tags["pipi.evaluable_classes"])
    assert any(k.startswith("test/auc/") for k in run.data.metrics)
    assert set(k.removeprefix("test/auc/") for k in run.data.metrics if k.startswith("test/auc/")) <= set(evaluable)
    arts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"predictions", "config.json"} <= arts
    # FINISHED: resume refuses the run, so its checkpoint (and the emptied folder) went
    assert "checkpoints" not in arts
    # identical seed -> identical test predictions, bit for bit (whichever launcher ran it)
    p1 = _test_predictions(by_pipi["run_id"][0], tmp_path / "a")
    p2 = _test_predictions(runs["run_id"][0], tmp_path / "b")
    assert len(p1) == (pd.read_parquet(tiny_staged / "frames.parquet")["split"] == "test").sum()
    pd.testing.assert_frame_equal(p1, p2)
    # registry: version tags point back at the run, alias candidate moved to the newest
    c = mlflow.tracking.MlflowClient()
    mv = c.get_model_version_by_alias("pipi-efficientnet_b0-pi", "candidate")
    assert mv.tags["run_id"] == runs["run_id"][0]
    assert abs(float(mv.tags["test_macro_auc"]) - run.data.metrics["test/macro_auc"]) < 1e-6
    first = [v for v in c.search_model_versions("name='pipi-efficientnet_b0-pi'")
             if v.tags.get("run_id") == by_pipi["run_id"][0]]
    assert len(first) == 1 and int(first[0].version) < int(mv.version)
    # a fresh process loads the registered model and predicts on plain RGB images
    code = (
        "import mlflow, numpy as np\n"
        "m = mlflow.pyfunc.load_model('models:/pipi-efficientnet_b0-pi@candidate')\n"
        "img = np.random.default_rng(1).integers(0, 256, (50, 70, 3), dtype=np.uint8)\n"
        "out = m.predict({'pixels': [img]})\n"
        "small = np.zeros((20, 20, 3), np.uint8)\n"
        "assert len(m.predict({'pixels': [img, small]})) == 2\n"
        "assert abs(out.iloc[0, :14].sum() - 1) < 1e-4, out\n"
        "strip = m.predict({'pixels': [img, img]}, params={'strip_prior': True})\n"
        "assert len(strip) == 2\n"
        "print(list(out.columns)[:2], out['predicted_class'][0])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "MLFLOW_TRACKING_URI": tracking}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "['Ampulla of Vater', 'Angiectasia']" in r.stdout


def test_pipi_train_and_mlflow_run_log_the_same_params(tracking, launches):
    """Issue 30: one form per option whichever launcher ran it, so that the UI's "show diff
    only" shows nothing for the same request (booleans lower-case, `auto` as requested with
    the resolved value beside it). The `mlflow run` is the contract test's."""
    r1, r2 = launches.mlflow_run, launches.pipi_train
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert r2.returncode == 0, r2.stderr[-3000:]
    by_mlflow = mlflow.search_runs(experiment_names=["contract"])
    by_pipi = mlflow.search_runs(experiment_names=["launchers"])
    assert len(by_pipi) == 1
    a, b = (mlflow.get_run(r).data.params for r in (by_mlflow["run_id"][0], by_pipi["run_id"][0]))
    assert a == b
    assert a["compile"] == "false" and a["deterministic"] == "true"
    assert a["batch_size"] == "auto" and int(a["batch_size.resolved"]) > 0


def test_failure_marks_run_failed_with_reason(tracking, tiny_staged, monkeypatch):

    def boom(*a, **k):
        raise TrainingDiverged("loss is nan at epoch 0, batch 1")

    monkeypatch.setattr(train_workflow, "run_frame_cell", boom)
    cfg = make_config(cell="a", profile="smoke", weights="none")
    with pytest.raises(TrainingDiverged):
        train_workflow.train(cfg, data=str(tiny_staged), experiment="failures", progress=False)
    runs = mlflow.search_runs(experiment_names=["failures"])
    assert runs["status"][0] == "FAILED"
    assert "loss is nan" in runs["tags.pipi.failure_reason"][0]


def test_interrupted_run_resumes_to_the_same_result(tracking, tiny_staged, monkeypatch):
    cfg = make_config(cell="a", profile="smoke", weights="none", epochs=2, patience=5)
    full = train_workflow.train(cfg, data=str(tiny_staged), experiment="resume", progress=False,
                        register=False)
    import pipi.tracking as tmod

    real = tmod.RunTracker.log_checkpoint

    def interrupt(self, state):
        real(self, state)
        raise KeyboardInterrupt  # the user presses Ctrl-C after epoch 0

    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_workflow.train(cfg, data=str(tiny_staged), experiment="resume", progress=False,
                     register=False)
    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", real)
    killed = mlflow.search_runs(experiment_names=["resume"], filter_string="attributes.status = 'KILLED'")
    assert len(killed) == 1
    rid = killed["run_id"][0]
    resumed = train_workflow.train(cfg, data=str(tiny_staged), resume=rid, progress=False, register=False)
    assert resumed.run_id == rid
    assert mlflow.get_run(rid).info.status == "FINISHED"
    assert resumed.test_macro_auc == full.test_macro_auc
    steps = [m.step for m in mlflow.tracking.MlflowClient().get_metric_history(rid, "train/loss")]
    assert steps == [0, 1]


def test_unreachable_server_fails_fast_naming_the_uri():
    r = subprocess.run([sys.executable, str(ROOT / "entrypoints" / "train.py"), "--profile", "smoke"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"})
    assert r.returncode != 0
    assert "cannot reach the MLflow tracking server at http://127.0.0.1:9" in r.stderr


