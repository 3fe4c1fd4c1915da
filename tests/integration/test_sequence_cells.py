"""Sequence-aware cells: windows, C1/C3 streams, base-run reuse and the run contract."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch

from pipi.tracking import resolved_param
from pipi.cells import SEQUENCE_CELLS
from pipi.config import make_config
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.training.frames import PROB_COLUMNS, FrameInputs
from pipi.runs import training as train_workflow


# --------------------------------------------------------------------------- windows
def _contract(run_id: str, staged: Path, cell: str, tmp: Path) -> mlflow.entities.Run:
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    p, t = run.data.params, run.data.tags
    assert p["cell"] == cell and p["window"] == "4"
    assert float(resolved_param(p, "lr")) == 1e-4   # lr=auto beside lr.resolved
    for tag in ("pipi.entry_point", "pipi.data_digest", "pipi.code_version", "pipi.config_hash",
                "pipi.base_run_id", "pipi.evaluable_classes", "pipi.cell", "pipi.seed"):
        assert tag in t, tag
    manifest = json.loads((staged / "manifest.json").read_text())
    assert t["pipi.data_digest"] == manifest["data_digest"]
    hist = mlflow.tracking.MlflowClient().get_metric_history(run_id, "val/macro_auc")
    assert [m.step for m in hist] == [0]
    assert {"train/loss", "train/lr", "test/macro_auc"} <= set(run.data.metrics)
    folder = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                      dst_path=str(tmp)))
    assert json.loads((folder / "schema.json").read_text())["version"] == 1
    test = pd.read_parquet(folder / "test.parquet")
    frames = pd.read_parquet(staged / "frames.parquet")
    assert len(test) == (frames["split"] == "test").sum()
    assert list(test.columns[-14:]) == list(PROB_COLUMNS)
    np.testing.assert_allclose(test[list(PROB_COLUMNS)].sum(axis=1), 1.0, atol=1e-4)
    arts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(run_id, "checkpoints")}
    assert arts == {"checkpoints/best_state.pt"}   # the resumable one went at FINISHED
    base = mlflow.get_run(t["pipi.base_run_id"])
    assert base.info.status == "FINISHED"
    for k in ("pipi.backbone", "pipi.seed", "pipi.data_digest"):
        assert base.data.tags[k] == t[k]
    return run


def test_b_plus_and_e_plus_train_and_share_their_pi_base(tracking, tiny_staged, tmp_path):
    # ResNet-18: an untrained EfficientNet in eval mode maps every frame to nearly the same
    # embedding (BatchNorm running statistics of two batches), which would test nothing here
    kw = {"profile": "smoke", "weights": "none", "seed": 11, "backbone": "resnet18"}
    s1 = train_workflow.train(make_config(cell="b_plus", **kw), data=str(tiny_staged),
                      experiment="seq-fast", progress=False)
    s2 = train_workflow.train(make_config(cell="e_plus", **kw), data=str(tiny_staged),
                      experiment="seq-fast", progress=False)
    r1 = _contract(s1.run_id, tiny_staged, "b_plus", tmp_path / "1")
    r2 = _contract(s2.run_id, tiny_staged, "e_plus", tmp_path / "2")
    base_id = r1.data.tags["pipi.base_run_id"]
    assert r2.data.tags["pipi.base_run_id"] == base_id          # reused, not retrained
    base = mlflow.get_run(base_id)
    assert base.data.tags["pipi.cell"] == "pi"
    assert base.data.tags["mlflow.parentRunId"] == s1.run_id  # trained first, nested
    pis = mlflow.search_runs(experiment_names=["seq-fast"],
                             filter_string="tags.`pipi.cell` = 'pi'")
    assert len(pis) == 1
    # C3: an autoencoder run of its own, recorded on the e_plus run
    ae = mlflow.get_run(r2.data.tags["pipi.c3_run_id"])
    assert ae.data.tags["pipi.entry_point"] == "c3_autoencoder" and ae.info.status == "FINISHED"
    # the embedding cache is an artifact of the base run and equals the backbone of the
    # logged model applied to the staged frames (loaded through MLflow's own pyfunc loader)
    emb_dir = Path(mlflow.artifacts.download_artifacts(
        run_id=base_id, artifact_path="embeddings", dst_path=str(tmp_path / "e")))
    emb = np.load(emb_dir / "embeddings.npy")
    frames, man = load_staged(tiny_staged)
    assert emb.shape[0] == len(frames)
    model_id = base.outputs.model_outputs[0].model_id
    py = mlflow.pyfunc.load_model(f"models:/{model_id}").unwrap_python_model().predictor
    imgs = build_cache(tiny_staged, frames, size=32, digest=man["data_digest"],
                       cache_dir=tmp_path / "c", progress=False)
    x = torch.from_numpy(np.asarray(imgs[:6])).float() / 255
    with torch.no_grad():
        ref = py.model.embed(FrameInputs(py.cfg)(x, train=False)[0]).numpy()
    assert emb[:6].std(0).mean() > 1e-2                          # frames do differ
    np.testing.assert_allclose(emb[:6], ref, rtol=1e-4, atol=1e-5)


# about 1.5 min on 2 CPU cores: the a and distill bases are trained once (nested, by the first
# cell that needs them) and every later cell reuses them and their embedding cache
@pytest.mark.parametrize("cell", [c for c in SEQUENCE_CELLS if c not in ("b_plus", "e_plus")])
def test_every_sequence_cell_trains_end_to_end(cell, tracking, tiny_staged, tmp_path):
    cfg = make_config(cell=cell, profile="smoke", weights="none", seed=11)
    s = train_workflow.train(cfg, data=str(tiny_staged), experiment="seq-all", progress=False,
                     register=False)
    run = _contract(s.run_id, tiny_staged, cell, tmp_path)
    base = mlflow.get_run(run.data.tags["pipi.base_run_id"])
    assert base.data.tags["pipi.cell"] == cfg.cell_config.base_cell
    assert ("pipi.c3_run_id" in run.data.tags) == cfg.cell_config.c3


def test_interrupted_sequence_run_resumes_to_the_same_result(tracking, tiny_staged,
                                                              monkeypatch):
    cfg = make_config(cell="b_plus", profile="smoke", weights="none", seed=11,
                      backbone="resnet18", epochs=2, patience=5)
    full = train_workflow.train(cfg, data=str(tiny_staged), experiment="seq-resume", progress=False)
    import pipi.tracking as tmod

    real = tmod.RunTracker.log_checkpoint

    def interrupt(self, state):
        real(self, state)
        raise KeyboardInterrupt  # Ctrl-C after epoch 0

    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_workflow.train(cfg, data=str(tiny_staged), experiment="seq-resume", progress=False)
    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", real)
    killed = mlflow.search_runs(experiment_names=["seq-resume"],
                                filter_string="attributes.status = 'KILLED'")
    assert len(killed) == 1
    rid = killed["run_id"][0]
    resumed = train_workflow.train(cfg, data=str(tiny_staged), resume=rid, progress=False)
    assert resumed.run_id == rid and mlflow.get_run(rid).info.status == "FINISHED"
    assert resumed.base_run_id == full.base_run_id
    assert resumed.test_macro_auc == full.test_macro_auc
    steps = [m.step for m in mlflow.tracking.MlflowClient().get_metric_history(rid, "train/loss")]
    assert steps == [0, 1]
