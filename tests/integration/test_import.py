"""`import`: outside checkpoints and prediction files as MLflow runs (docs/import.md).

Checkpoints are fresh torchvision models (weights=None) saved in the forms released code
writes (plain, DataParallel's ``module.``, a Lightning-style ``model.``); prediction files
are written here with pandas/numpy, never by pipi. Each run is checked against the file
and the staged test split, with expectations computed here (torchvision forward pass,
scikit-learn AUC), and a bad file must leave the tracking store untouched.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from mlflow.tracking import MlflowClient
from PIL import Image
from sklearn.metrics import roc_auc_score

from pipi.classes import CLASSES
from pipi.errors import ConfigError, DataError
from pipi.workflows.importer import import_file

IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
SIZE = 32  # the smoke profile's resolution


def _frames(staged: Path) -> pd.DataFrame:
    return pd.read_parquet(staged / "frames.parquet")


def _digest(staged: Path) -> str:
    return json.loads((staged / "manifest.json").read_text())["data_digest"]


def _tv_model(in_channels: int = 3, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torchvision.models.efficientnet_b0(weights=None, num_classes=14)
    if in_channels != 3:
        old = m.features[0][0]
        m.features[0][0] = torch.nn.Conv2d(in_channels, old.out_channels, old.kernel_size,
                                           old.stride, old.padding, bias=False)
    # A fresh EfficientNet at 32 px gives every image the same output; BatchNorm statistics
    # of a few random batches (as a trained model has its own) make the outputs differ, and
    # make the running statistics part of what the import must carry over.
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None  # cumulative average
    with torch.no_grad():
        m.train()
        for _ in range(2):
            m(torch.randn(16, in_channels, SIZE, SIZE))
        m.classifier[1].weight.mul_(0.05)
    return m.eval()


def _save(model: torch.nn.Module, path: Path, prefix: str = "") -> Path:
    torch.save({prefix + k: v for k, v in model.state_dict().items()}, path)
    return path


def _experiment_runs(name: str) -> list:
    exp = mlflow.get_experiment_by_name(name)
    if exp is None:
        return []
    return MlflowClient().search_runs([exp.experiment_id], max_results=1000)


def _test_predictions(run_id: str, tmp_path: Path, split: str = "test") -> pd.DataFrame:
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(tmp_path / run_id))
    return pd.read_parquet(Path(folder) / f"{split}.parquet")


def _sklearn_macro(df: pd.DataFrame, frames: pd.DataFrame, split: str = "test") -> float:
    classes = sorted(set(frames.loc[frames["split"] == split, "class_index"]))
    probs = df[[f"prob_{k:02d}" for k in range(14)]].to_numpy(np.float64)
    y = df["label"].to_numpy()
    return float(np.mean([roc_auc_score(y == k, probs[:, k]) for k in classes]))


def _decoded(path: Path) -> np.ndarray:
    """A JPEG decoded as pipi's frame cache decodes it: PIL at the smallest scale >= SIZE."""
    with Image.open(path) as im:
        im.draft("RGB", (SIZE, SIZE))
        return np.asarray(im.convert("RGB"))


def _expected_rgb_probs(model, staged: Path, paths) -> np.ndarray:
    """torchvision forward pass on the staged images: PIL bilinear resize, ImageNet norm."""
    ims = [np.asarray(Image.fromarray(_decoded(staged / p)).resize((SIZE, SIZE), Image.BILINEAR))
           for p in paths]
    x = torch.from_numpy(np.stack(ims)).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        return torch.softmax(model((x - IMAGENET_MEAN) / IMAGENET_STD), 1).numpy()


# --------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("prefix", ["", "module.", "model."])
def test_checkpoint_import_logs_a_run_like_train(prefix, tiny_staged, sqlite_tracking,
                                                 tmp_path):
    exp = f"import-ckpt-{prefix or 'plain'}"
    model = _tv_model(seed=len(prefix))
    ckpt = _save(model, tmp_path / "released_a_s41.pth", prefix)
    res = import_file(kind="checkpoint", file=ckpt, cell="a", backbone="efficientnet_b0",
                      seed=41, data=str(tiny_staged), profile="smoke", experiment=exp,
                      progress=False)
    run = mlflow.get_run(res.run_id)
    p, t = run.data.params, run.data.tags
    sha = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    assert run.info.status == "FINISHED"
    assert (p["cell"], p["seed"], p["backbone"], p["profile"], p["image_size"]) == \
        ("a", "41", "efficientnet_b0", "smoke", str(SIZE))
    assert {"lr", "epochs", "alpha", "hb_index"} <= set(p)          # the recipe, as train logs
    assert p["import.sha256"] == sha and p["import.kind"] == "checkpoint"
    assert t["pipi.entry_point"] == "import" and t["pipi.source"] == "external"
    assert t["pipi.source_sha256"] == sha and t["pipi.source_label"] == "released"
    assert (t["pipi.cell"], t["pipi.seed"], t["pipi.backbone"]) == ("a", "41", "efficientnet_b0")
    assert t["pipi.data_digest"] == _digest(tiny_staged)
    assert t["pipi.dataset"] and t["pipi.code_version"] and t["pipi.recipe"]
    assert t["pipi.import.key_form"].startswith(f"prefix {prefix}" if prefix else "no prefix")
    # the predictions: every staged test frame, scored as torchvision scores it
    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"]
    df = _test_predictions(res.run_id, tmp_path)
    assert sorted(df["path"]) == sorted(test["path"])
    want = _expected_rgb_probs(model, tiny_staged, df["path"])
    got = df[[f"prob_{k:02d}" for k in range(14)]].to_numpy()
    assert got.std(0).max() > 1e-3  # the images are told apart
    np.testing.assert_allclose(got, want, atol=2e-5)
    lab = test.set_index("path").loc[df["path"]]
    assert (df["label"].to_numpy() == lab["class_index"].to_numpy()).all()
    assert run.data.metrics["test/macro_auc"] == pytest.approx(_sklearn_macro(df, frames),
                                                               abs=1e-6)
    # a registered version of the family, as train registers
    assert res.registered and res.registered.startswith("models:/pipi-efficientnet_b0-a/")
    version = res.registered.rsplit("/", 1)[1]
    mv = MlflowClient().get_model_version("pipi-efficientnet_b0-a", version)
    assert mv.run_id == res.run_id and mv.tags["source"] == "external"
    assert mv.tags["source_sha256"] == sha


def test_five_channel_checkpoint_is_served_by_its_registered_model(tiny_staged,
                                                                   sqlite_tracking, tmp_path):
    model = _tv_model(in_channels=5, seed=3)
    ckpt = _save(model, tmp_path / "pi.pt", "module.")
    res = import_file(kind="checkpoint", file=ckpt, cell="pi", backbone="efficientnet_b0",
                      seed=42, data=str(tiny_staged), profile="smoke", experiment="import-pi",
                      progress=False)
    assert mlflow.get_run(res.run_id).data.params["input_channels"] == "5"
    df = _test_predictions(res.run_id, tmp_path).head(6)
    served = mlflow.pyfunc.load_model(res.registered).predict(
        {"pixels": [_decoded(tiny_staged / p) for p in df["path"]]})
    assert df[[f"prob_{k:02d}" for k in range(14)]].to_numpy().std(0).max() > 1e-3
    np.testing.assert_allclose(served[list(CLASSES)].to_numpy(),
                               df[[f"prob_{k:02d}" for k in range(14)]].to_numpy(), atol=1e-4)
    # what galar, robustness and transplant load: the imported weights, as a pi run
    from pipi.runs.evaluate import load_run_model
    from pipi.runs.runsets import resolve_runs

    loaded, cfg = load_run_model(res.run_id)
    x = torch.randn(2, 5, SIZE, SIZE)
    with torch.no_grad():
        np.testing.assert_allclose(torch.softmax(loaded(x), 1), torch.softmax(model(x), 1),
                                   atol=1e-6)
    assert (cfg.cell, cfg.image_size) == ("pi", SIZE)
    (src,) = resolve_runs(res.run_id, cells=("pi",))
    assert (src.cell, src.seed, src.data_dir) == ("pi", 42, str(tiny_staged.resolve()))
    # the same file for the same arm and data again: the FINISHED run is reused
    again = import_file(kind="checkpoint", file=ckpt, cell="pi", backbone="efficientnet_b0",
                        seed=42, data=str(tiny_staged), profile="smoke",
                        experiment="import-pi", progress=False)
    assert again.reused and again.run_id == res.run_id


def test_mismatched_keys_are_one_error_listing_them_and_nothing_is_logged(
        tiny_staged, sqlite_tracking, tmp_path):
    sd = _tv_model().state_dict()
    sd["features.0.0.weights"] = sd.pop("features.0.0.weight")   # a renamed key
    sd["extra_head.weight"] = torch.zeros(3)                      # a key of another model
    ckpt = tmp_path / "bad.pth"
    torch.save({"module." + k: v for k, v in sd.items()}, ckpt)
    with pytest.raises(DataError) as err:
        import_file(kind="checkpoint", file=ckpt, cell="a", backbone="efficientnet_b0", seed=1,
                    data=str(tiny_staged), profile="smoke", experiment="import-bad",
                    progress=False)
    msg = str(err.value)
    assert "\n" not in msg and str(ckpt) in msg
    assert "missing 1: [features.0.0.weight]" in msg
    assert "module.features.0.0.weights" in msg and "module.extra_head.weight" in msg
    # a 3-channel checkpoint for the 5-channel cell, and a resnet for an efficientnet
    rgb = _save(_tv_model(), tmp_path / "rgb.pth")
    with pytest.raises(DataError, match="takes 3 input channels; cell pi needs 5"):
        import_file(kind="checkpoint", file=rgb, cell="pi", backbone="efficientnet_b0", seed=1,
                    data=str(tiny_staged), profile="smoke", experiment="import-bad",
                    progress=False)
    with pytest.raises(DataError, match="keys do not match the resnet18 model"):
        import_file(kind="checkpoint", file=rgb, cell="a", backbone="resnet18", seed=1,
                    data=str(tiny_staged), profile="smoke", experiment="import-bad",
                    progress=False)
    garbage = tmp_path / "notes.pth"
    garbage.write_text("not a checkpoint")
    with pytest.raises(DataError, match="cannot read it as a torch state dict"):
        import_file(kind="checkpoint", file=garbage, cell="a", backbone="efficientnet_b0",
                    seed=1, data=str(tiny_staged), profile="smoke", experiment="import-bad",
                    progress=False)
    with pytest.raises(ConfigError, match="sequence cell"):
        import_file(kind="checkpoint", file=rgb, cell="e_plus", backbone="efficientnet_b0",
                    seed=1, data=str(tiny_staged), experiment="import-bad")
    assert _experiment_runs("import-bad") == []


# --------------------------------------------------------------------------- prediction files
def _released_probs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(14), size=n)
    return p


def _csv(test: pd.DataFrame, probs: np.ndarray, path: Path) -> Path:
    """The release's CSV form: file name, class-named columns in its own spelling, a label."""
    names = [c.replace(" - ", "_").replace(" ", "_").lower() for c in CLASSES]  # blood_fresh
    df = pd.DataFrame(np.round(probs, 6), columns=names)
    df.insert(0, "filename", test["filename"].to_numpy())
    df["label"] = test["class"].to_numpy()
    df.sample(frac=1, random_state=0).to_csv(path, index=False)   # any row order
    return path


def _parquet(test: pd.DataFrame, probs: np.ndarray, path: Path) -> Path:
    df = pd.DataFrame(probs, columns=list(CLASSES))
    df.insert(0, "frame_number", test["frame_number"].to_numpy())
    df.insert(0, "video_id", test["video_id"].to_numpy())
    df.to_parquet(path, index=False)
    return path


def _npz(test: pd.DataFrame, probs: np.ndarray, path: Path) -> Path:
    np.savez(path, filenames=test["filename"].to_numpy().astype(str),
             probs=probs.astype(np.float32))
    return path


@pytest.mark.parametrize("form", ["csv", "parquet", "npz"])
def test_prediction_file_becomes_a_run_with_its_probabilities(form, tiny_staged,
                                                              sqlite_tracking, tmp_path):
    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    probs = _released_probs(len(test), seed=7)
    write = {"csv": _csv, "parquet": _parquet, "npz": _npz}[form]
    path = write(test, probs, tmp_path / f"yang2026_pi_s43.{form}")
    res = import_file(kind="predictions", file=path, cell="pi", backbone="efficientnet_b0",
                      seed=43, data=str(tiny_staged), experiment=f"import-preds-{form}")
    run = mlflow.get_run(res.run_id)
    t = run.data.tags
    assert t["pipi.source"] == "external" and t["pipi.source_kind"] == "predictions"
    assert t["pipi.source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (t["pipi.cell"], t["pipi.seed"]) == ("pi", "43")
    assert t["pipi.data_digest"] == _digest(tiny_staged)
    assert t["pipi.import.splits"] == "test"
    df = _test_predictions(res.run_id, tmp_path).set_index("path")
    got = df.loc[test["path"], [f"prob_{k:02d}" for k in range(14)]].to_numpy()
    np.testing.assert_allclose(got, probs, atol=1e-6 if form == "csv" else 1e-7)
    assert (df.loc[test["path"], "label"].to_numpy() == test["class_index"].to_numpy()).all()
    assert run.data.metrics["test/macro_auc"] == pytest.approx(
        _sklearn_macro(df.reset_index(), frames), abs=1e-6)
    assert not MlflowClient().search_logged_models([run.info.experiment_id])  # no model


def test_prediction_file_errors_are_one_line_and_log_nothing(tiny_staged, sqlite_tracking,
                                                             tmp_path):
    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    probs = _released_probs(len(test), seed=1)
    good = pd.DataFrame(probs, columns=list(CLASSES))
    good.insert(0, "filename", test["filename"].to_numpy())
    train_name = frames.loc[frames["split"] == "train", "filename"].iloc[0]
    cases = {
        "missing": (good.iloc[1:], "1 of the {n} staged test frames are missing"),
        "extra": (pd.concat([good, good.iloc[[0]].assign(filename="no_such_frame.jpg")]),
                  "1 frames are not in the staged release (e.g. no_such_frame.jpg)"),
        "train": (pd.concat([good, good.iloc[[0]].assign(filename=train_name)]),
                  "1 frames are in the staged train split"),
        "sum": (good.assign(Ulcer=good["Ulcer"] + 0.05),
                "rows have probabilities that do not sum to 1"),
        "unknown": (good.rename(columns={"Polyp": "Tumour"}), "unknown class columns ['Tumour']"),
        "lacking": (good.drop(columns=["Polyp"]), "no probability column for classes ['Polyp']"),
        "duplicate": (pd.concat([good, good.iloc[[0]].assign(Ulcer=good["Polyp"].iloc[0],
                                                             Polyp=good["Ulcer"].iloc[0])]),
                      "1 frames are listed more than once with different probabilities"),
    }
    for name, (df, message) in cases.items():
        path = tmp_path / f"{name}.csv"
        df.to_csv(path, index=False)
        with pytest.raises(DataError) as err:
            import_file(kind="predictions", file=path, cell="a", backbone="efficientnet_b0",
                        seed=1, data=str(tiny_staged), experiment="import-bad-preds")
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(str(path)), msg
        assert message.format(n=len(test)) in msg, (name, msg)
    logits = tmp_path / "logits.npz"
    np.savez(logits, filenames=test["filename"].to_numpy().astype(str), probs=probs * 3 - 1)
    with pytest.raises(DataError, match="outside \\[0, 1\\]"):
        import_file(kind="predictions", file=logits, cell="a", backbone="efficientnet_b0",
                    seed=1, data=str(tiny_staged), experiment="import-bad-preds")
    nameless = tmp_path / "nameless.npz"
    np.savez(nameless, probs=probs)
    with pytest.raises(DataError, match="lacks arrays \\['filenames'\\]"):
        import_file(kind="predictions", file=nameless, cell="a", backbone="efficientnet_b0",
                    seed=1, data=str(tiny_staged), experiment="import-bad-preds")
    assert _experiment_runs("import-bad-preds") == []


# --------------------------------------------------------------------------- aggregate
@pytest.mark.slow
def test_imported_and_trained_runs_are_separate_arms_in_aggregate(tiny_staged, sqlite_tracking,
                                                                  tmp_path):
    from pipi.config import make_config
    from pipi.workflows.aggregate import run_aggregate
    from pipi.runs.training import train

    exp = "import-aggregate"
    cfg = make_config(cell="a", seed=42, profile="smoke", weights="none")
    trained = train(cfg, data=str(tiny_staged), experiment=exp, register=False,
                    progress=False).run_id
    ckpt = import_file(kind="checkpoint", file=_save(_tv_model(seed=5), tmp_path / "a.pth"),
                       cell="a", backbone="efficientnet_b0", seed=42, data=str(tiny_staged),
                       profile="smoke", experiment=exp, progress=False).run_id
    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    preds = import_file(kind="predictions",
                        file=_npz(test, _released_probs(len(test), 2), tmp_path / "pi.npz"),
                        cell="pi", backbone="efficientnet_b0", seed=42, data=str(tiny_staged),
                        profile="smoke", experiment=exp).run_id
    res = run_aggregate(experiment=exp, cache_dir=tmp_path / "cache", log_run=False)
    coverage = res.report.table("coverage").data
    arms = dict(zip(coverage["cell"], coverage["seed_42"], strict=True))
    assert arms == {"a": trained, "a (released)": ckpt, "pi (released)": preds}
    runs = res.report.table("runs").data.set_index("run_id")
    assert runs.loc[ckpt, "cell"] == "a (released)" and runs.loc[trained, "cell"] == "a"
    # the released arms get their own per-frame table, paired with the released a
    released = res.report.table("per_frame_released")
    assert released.data["cell"].tolist() == ["a (released)", "pi (released)",
                                              "distill (released)"]
    pi_row = released.data.set_index("cell").loc["pi (released)"]
    assert pi_row["n_paired"] == 1
    assert released.run_ids[1] == {"pi (released)": {42: preds}, "a (released)": {42: ckpt}}
    assert res.report.table("per_frame").data.set_index("cell").loc["pi", "n_paired"] == 0
    # the paper's a-vs-pi test never pairs the trained a with the released pi
    for t in res.report.tables:
        for ids in t.run_ids:
            assert not ({"a", "pi (released)"} <= set(ids)), t.key
    # asked to pair: the imported runs join their cells, and the a arm mixing a trained and
    # an imported run is refused as two recipes
    with pytest.raises(DataError, match="refusing to mix recipes within an arm"):
        run_aggregate(experiment=exp, cache_dir=tmp_path / "cache", log_run=False,
                      pair_imported=True)
    paired = run_aggregate(experiment=exp, filter_string=f"attributes.run_id != '{ckpt}'",
                           cache_dir=tmp_path / "cache", log_run=False, pair_imported=True)
    cov = paired.report.table("coverage").data
    assert dict(zip(cov["cell"], cov["seed_42"], strict=True)) == {"a": trained, "pi": preds}


# --------------------------------------------------------------------------- the join alone
def _signal_probs(test: pd.DataFrame, quality: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(len(test), 14))
    logits[np.arange(len(test)), test["class_index"].to_numpy()] += quality
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_promote_judges_an_imported_version_against_imported_baseline_runs(
        tiny_staged, sqlite_tracking, tmp_path):
    from fakes import log_fake_run

    from pipi.analysis import AggregateOptions
    from pipi.predictions import predictions_frame, write_predictions
    from pipi.workflows.promote import _runs_of_version, gather_evidence

    exp, seeds = "import-promote", (41, 42)
    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    ids = {}
    for cell, quality in (("a", 0.5), ("pi", 2.0)):
        for s in seeds:
            f = _npz(test, _signal_probs(test, quality, s), tmp_path / f"{cell}{s}.npz")
            ids[cell, s] = import_file(kind="predictions", file=f, cell=cell,
                                       backbone="efficientnet_b0", seed=s,
                                       data=str(tiny_staged), experiment=exp).run_id
    # trained a runs of the same data, far better: a promote that paired the imported pi
    # with them would see a large negative delta
    exp_id = mlflow.get_experiment_by_name(exp).experiment_id
    trained = {}
    for s in seeds:
        folder = write_predictions({"test": predictions_frame(test, _signal_probs(test, 6, s))},
                                   tmp_path / f"trained{s}")
        trained[s] = log_fake_run(MlflowClient(), exp_id, folder, cell="a", seed=s,
                                  digest=_digest(tiny_staged))
    name = "pipi-efficientnet_b0-pi"
    c = MlflowClient()
    if not c.search_registered_models(f"name = '{name}'"):
        c.create_registered_model(name)
    mv = c.create_model_version(name, f"runs:/{ids['pi', 41]}/predictions",
                                run_id=ids["pi", 41])
    src = _runs_of_version(mv)
    assert src["cell"] == "pi (released)"
    ev = gather_evidence(src, baseline="a", min_sign_positive=2,
                         options=AggregateOptions(n_resamples=200), cache_dir=tmp_path / "c")
    assert (ev.cell, ev.baseline) == ("pi (released)", "a (released)")
    assert ev.baseline_runs == {s: ids["a", s] for s in seeds}
    assert ev.new_runs == {s: ids["pi", s] for s in seeds}
    assert ev.delta > 0


def test_galar_scores_an_imported_checkpoint_like_a_trained_run(tiny_staged, galar_staged,
                                                                sqlite_tracking, tmp_path):
    """End to end: a released RGB checkpoint imported, then `galar` zero-shot on it. The
    child's Galar probabilities are torchvision's forward of the released model on the staged
    Galar frames; it carries the import's source tags. An imported prediction file has no
    model: galar refuses it in one line."""
    from pipi.predictions import PROB_COLUMNS
    from pipi.workflows.galar import run_galar

    model = _tv_model(seed=6)
    ckpt = _save(model, tmp_path / "released_a_s45.pth", "module.")
    res = import_file(kind="checkpoint", file=ckpt, cell="a", backbone="efficientnet_b0",
                      seed=45, data=str(tiny_staged), profile="smoke", experiment="import-galar",
                      progress=False, register=False)
    out = run_galar(runs=res.run_id, data=str(galar_staged), experiment="import-galar",
                    progress=False)
    child = out.table.iloc[0]["galar_run_id"]
    t = mlflow.get_run(child).data.tags
    assert t["pipi.source"] == "external" and t["pipi.source_label"] == "released"
    assert t["pipi.source_sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()
    folder = mlflow.artifacts.download_artifacts(run_id=child, artifact_path="predictions",
                                                 dst_path=str(tmp_path / "g"))
    df = pd.read_parquet(Path(folder) / "test.parquet")
    assert len(df) == len(_frames(galar_staged))       # the default: every staged frame
    want = _expected_rgb_probs(model, galar_staged, df["path"])
    # the frames are told apart (issue 42: an equality on a model that answers every frame
    # alike proves nothing); float32 convolutions of other batch compositions: a few values
    # differ by ~5e-5
    assert df[list(PROB_COLUMNS)].to_numpy().std(0).max() > 1e-3
    np.testing.assert_allclose(df[list(PROB_COLUMNS)].to_numpy(), want, atol=1e-4)

    frames = _frames(tiny_staged)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    preds = import_file(kind="predictions", file=_csv(test, _released_probs(len(test), 3),
                                                      tmp_path / "p.csv"),
                        cell="a", backbone="efficientnet_b0", seed=46, data=str(tiny_staged),
                        experiment="import-galar")
    with pytest.raises(ConfigError, match="imported prediction file, with no model"):
        run_galar(runs=preds.run_id, data=str(galar_staged), experiment="import-galar",
                  progress=False)


def test_an_evaluation_child_of_an_imported_run_is_imported_too(tiny_staged, sqlite_tracking,
                                                                 tmp_path):
    from pipi.analysis import mark_imported
    from pipi.runs.evaluate import channel_evaluation, evaluate_run
    from pipi.tracking import load_runs

    ckpt = _save(_tv_model(in_channels=5, seed=4), tmp_path / "pi_s44.pth")
    res = import_file(kind="checkpoint", file=ckpt, cell="pi", backbone="efficientnet_b0",
                      seed=44, data=str(tiny_staged), profile="smoke", experiment="import-child",
                      progress=False, register=False)
    # no study around it: the child goes into its source run's experiment
    child = evaluate_run(res.run_id, channel_evaluation("zero_phi"), data=tiny_staged)
    t = mlflow.get_run(child).data.tags
    assert t["pipi.source"] == "external" and t["pipi.source_label"] == "released"
    assert t["pipi.source_sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()
    runs = mark_imported(load_runs("import-child")).set_index("run_id")["cell"]
    assert runs[res.run_id] == "pi (released)" and runs[child] == "pi (released)@zero_phi"


def test_cli_refuses_a_bad_file_in_one_line(tiny_staged, sqlite_tracking, tmp_path):
    from click.testing import CliRunner

    from pipi.cli import main

    bad = tmp_path / "preds.csv"
    pd.DataFrame({"filename": ["x.jpg"], "Tumour": [1.0]}).to_csv(bad, index=False)
    for args in (["import", "predictions"], ["import", "--kind", "predictions"]):
        r = CliRunner().invoke(main, [*args, "--file", str(bad), "--cell", "a",
                                      "--data", str(tiny_staged), "--experiment", "import-cli"])
        assert r.exit_code == 2
        assert r.output.strip() == f"error: {bad}: unknown class columns ['Tumour']; " \
            f"probability columns are named by class: {list(CLASSES)}"
    assert _experiment_runs("import-cli") == []


