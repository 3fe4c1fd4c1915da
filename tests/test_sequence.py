"""Sequence-aware cells: windows, C1/C3 streams, base-run reuse and the run contract."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch

from pipi.cells import SEQUENCE_CELLS
from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.data.cache import build_cache
from pipi.data.kvasir import load_staged
from pipi.models.sequence import SequenceModel
from pipi.training import sequence
from pipi.training.frames import PROB_COLUMNS, FrameInputs
from pipi.workflows import train as runner


# --------------------------------------------------------------------------- windows
def _frames(spec: dict[tuple[str, str], list[int]]) -> pd.DataFrame:
    rows = []
    for (split, video), numbers in spec.items():
        for n in numbers:
            rows.append({"split": split, "video_id": video, "frame_number": n})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)
    return df


def _reference_window(frames: pd.DataFrame, row: int, w: int) -> list[int]:
    """Brute force: frame numbers of the w nearest distinct frames, ties to the earlier."""
    r = frames.iloc[row]
    same = frames[(frames["split"] == r["split"]) & (frames["video_id"] == r["video_id"])]
    numbers = sorted(set(same["frame_number"]))
    nearest = sorted(numbers, key=lambda n: (abs(n - r["frame_number"]), n))[:w]
    return sorted(nearest)


def test_windows_match_a_brute_force_nearest_rule():
    frames = _frames({
        ("train", "v1"): list(range(100, 130)) + [200, 203, 204, 250],   # a run, then gaps
        ("train", "v2"): [5, 9],                                          # shorter than w
        ("test", "v3"): [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ("val", "v1"): [0, 1, 2],                                         # same id, other split
    })
    frames = pd.concat([frames, frames.iloc[[0, 3]]], ignore_index=True)  # multilabel rows
    w = 8
    win = sequence.build_windows(frames, window=w)
    nums = frames["frame_number"].to_numpy()
    for row in range(len(frames)):
        idx = win.index[row]
        valid = idx[~win.mask[row]]
        assert (idx[win.mask[row]] == -1).all()
        assert list(nums[valid]) == _reference_window(frames, row, w), row
        # same video and split only; the centre is the row's own frame
        assert set(frames.loc[valid, "video_id"]) == {frames.loc[row, "video_id"]}
        assert set(frames.loc[valid, "split"]) == {frames.loc[row, "split"]}
        assert nums[idx[win.centre[row]]] == nums[row]
        assert not win.mask[row, win.centre[row]]


def test_window_boundary_rule_examples():
    frames = _frames({("train", "v"): list(range(20)), ("train", "short"): [3, 7]})
    win = sequence.build_windows(frames, window=4)
    nums = frames["frame_number"].to_numpy()

    def at(video, number):
        row = int(np.flatnonzero((frames["video_id"] == video) & (nums == number))[0])
        idx = win.index[row]
        return [int(nums[i]) if i >= 0 else None for i in idx], int(win.centre[row])

    assert at("v", 10) == ([8, 9, 10, 11], 2)        # middle: w//2 before, the rest after
    assert at("v", 0) == ([0, 1, 2, 3], 0)           # start: shifted inwards
    assert at("v", 19) == ([16, 17, 18, 19], 3)      # end
    assert at("short", 7) == ([3, 7, None, None], 1)  # fewer frames than w: padded


# --------------------------------------------------------------------------- z-scores and heads
def test_zscore_train_and_per_patient():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (60, 8)).astype(np.float32)
    x[:, 5] = 1.0                                            # a constant feature
    train = np.arange(60) < 40
    z = sequence.zscore(x, x[train])
    np.testing.assert_allclose(z[train].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(np.delete(z[train].std(0), 5), 1, atol=1e-5)
    assert (z[:, 5] == 0).all()
    groups = np.repeat(["p1", "p2", "p3"], 20)
    zp = sequence.zscore_by_group(x, groups)
    for g in ("p1", "p2", "p3"):
        sel = groups == g
        ref = (x[sel] - x[sel].mean(0)) / np.where(x[sel].std(0) > 0, x[sel].std(0), 1)
        np.testing.assert_allclose(zp[sel], ref, atol=1e-5)


def test_head_width_is_the_concatenated_streams():
    # paper: C2 + C3 = 1280 + 192 for EfficientNet-B0
    m = SequenceModel(emb_dim=1280, window=16, temporal=True, c3_dim=192)
    assert m.head.in_dim == 1280 + 192
    m = SequenceModel(emb_dim=512, window=16, temporal=True, c1_dim=13)
    assert m.head.in_dim == 512 + 13
    out = m(torch.randn(3, 16, 512), torch.tensor([0, 8, 15]),
            torch.zeros(3, 16, dtype=torch.bool), c1=torch.randn(3, 13))
    assert out.shape == (3, len(CLASSES))


def test_base_config_takes_the_per_frame_recipe():
    seq = make_config(cell="e_plus", profile="smoke", seed=7, weights="none", alpha=3.0)
    base = sequence.base_config(seq)
    assert base == make_config(cell="pi", profile="smoke", seed=7, weights="none", alpha=3.0)
    demo = make_config(cell="b", profile="demo")
    assert demo.lr == 1e-4 and demo.batch_size == 64                   # temporal recipe
    assert sequence.base_config(demo).lr == 1e-3 and sequence.base_config(demo).batch_size == 32


def test_c1_streams_follow_the_cell(tiny_staged, tmp_path):
    frames, man = load_staged(tiny_staged)
    imgs = build_cache(tiny_staged, frames, size=32, digest=man["data_digest"],
                       cache_dir=tmp_path, progress=False)
    dev = torch.device("cpu")
    out = {}
    for cell in ("c", "c_prime", "c_dprime"):
        cfg = make_config(cell=cell, profile="smoke", weights="none")
        out[cell] = sequence.c1_stream(frames, imgs, cfg, cache_dir=tmp_path,
                                       digest=man["data_digest"], device=dev)
    train = frames["split"].to_numpy() == "train"
    assert out["c"].shape == (len(frames), 8) and out["c_dprime"].shape == (len(frames), 13)
    np.testing.assert_allclose(out["c"][train].mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(out["c_dprime"][:, :8], out["c"], atol=1e-5)
    for sel in frames.groupby("video_id").indices.values():
        np.testing.assert_allclose(out["c_prime"][sel].mean(0), 0, atol=1e-4)
    # independent route: the 8 scalars of the first frames from the prior of their images
    from pipi.prior import c1_features, prior_channels

    x = torch.from_numpy(np.asarray(imgs[:5])).float() / 255
    raw = c1_features(prior_channels(x)[:, 0], form=8).numpy()
    every = sequence.c1_raw(imgs, make_config(cell="c", profile="smoke"), form=8, device=dev)
    np.testing.assert_allclose(every[:5], raw, atol=1e-6)


# --------------------------------------------------------------------------- end to end
def _contract(run_id: str, staged: Path, cell: str, tmp: Path) -> mlflow.entities.Run:
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    p, t = run.data.params, run.data.tags
    assert p["cell"] == cell and p["window"] == "4" and float(p["lr"]) == 1e-4
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
    assert {"checkpoints/best_state.pt", "checkpoints/last.pt"} <= arts
    base = mlflow.get_run(t["pipi.base_run_id"])
    assert base.info.status == "FINISHED"
    for k in ("pipi.backbone", "pipi.seed", "pipi.data_digest"):
        assert base.data.tags[k] == t[k]
    return run


def test_b_plus_and_e_plus_train_and_share_their_pi_base(tracking, tiny_staged, tmp_path):
    # ResNet-18: an untrained EfficientNet in eval mode maps every frame to nearly the same
    # embedding (BatchNorm running statistics of two batches), which would test nothing here
    kw = {"profile": "smoke", "weights": "none", "seed": 11, "backbone": "resnet18"}
    s1 = runner.train(make_config(cell="b_plus", **kw), data=str(tiny_staged),
                      experiment="seq-fast", progress=False)
    s2 = runner.train(make_config(cell="e_plus", **kw), data=str(tiny_staged),
                      experiment="seq-fast", progress=False)
    r1 = _contract(s1["run_id"], tiny_staged, "b_plus", tmp_path / "1")
    r2 = _contract(s2["run_id"], tiny_staged, "e_plus", tmp_path / "2")
    base_id = r1.data.tags["pipi.base_run_id"]
    assert r2.data.tags["pipi.base_run_id"] == base_id          # reused, not retrained
    base = mlflow.get_run(base_id)
    assert base.data.tags["pipi.cell"] == "pi"
    assert base.data.tags["mlflow.parentRunId"] == s1["run_id"]  # trained first, nested
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
    py = mlflow.pyfunc.load_model(f"models:/{model_id}").unwrap_python_model()
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
    s = runner.train(cfg, data=str(tiny_staged), experiment="seq-all", progress=False,
                     register=False)
    run = _contract(s["run_id"], tiny_staged, cell, tmp_path)
    base = mlflow.get_run(run.data.tags["pipi.base_run_id"])
    assert base.data.tags["pipi.cell"] == cfg.cell_config.base_cell
    assert ("pipi.c3_run_id" in run.data.tags) == cfg.cell_config.c3


def test_interrupted_sequence_run_resumes_to_the_same_result(tracking, tiny_staged,
                                                              monkeypatch):
    cfg = make_config(cell="b_plus", profile="smoke", weights="none", seed=11,
                      backbone="resnet18", epochs=2, patience=5)
    full = runner.train(cfg, data=str(tiny_staged), experiment="seq-resume", progress=False)
    import pipi.tracking as tmod

    real = tmod.RunTracker.log_checkpoint

    def interrupt(self, state):
        real(self, state)
        raise KeyboardInterrupt  # Ctrl-C after epoch 0

    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        runner.train(cfg, data=str(tiny_staged), experiment="seq-resume", progress=False)
    monkeypatch.setattr(tmod.RunTracker, "log_checkpoint", real)
    killed = mlflow.search_runs(experiment_names=["seq-resume"],
                                filter_string="attributes.status = 'KILLED'")
    assert len(killed) == 1
    rid = killed["run_id"][0]
    resumed = runner.train(cfg, data=str(tiny_staged), resume=rid, progress=False)
    assert resumed["run_id"] == rid and mlflow.get_run(rid).info.status == "FINISHED"
    assert resumed["base_run_id"] == full["base_run_id"]
    assert resumed["test_macro_auc"] == full["test_macro_auc"]
    steps = [m.step for m in mlflow.tracking.MlflowClient().get_metric_history(rid, "train/loss")]
    assert steps == [0, 1]
