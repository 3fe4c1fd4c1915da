"""`promote` on runs of another class set than Kvasir's 14 (a staged `images` dataset): the
per-class rows, the recorded per-class tag and the model card name the runs' own classes."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from fakes import fake_version_tags, log_fake_run
from scipy import special
from sklearn.metrics import roc_auc_score

from pipi.cli import main
from pipi.predictions import predictions_frame, write_predictions

pytestmark = pytest.mark.slow  # a few seconds: bootstraps of 3 seeds x 3 classes
NAMES = ("Bleeding", "Normal", "Worms")  # not Kvasir's: index 0..2 are other classes there
SEEDS = (41, 42, 43)
QUALITY = {"a": 1.0, "pi": 2.0}


def _frames(n_videos: int, per_video: int, seed: int, split: str) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(n_videos):
        lab = rng.integers(0, len(NAMES), per_video)
        lab[: len(NAMES)] = range(len(NAMES))  # every class in every video
        rows += [{"path": f"{split}/{NAMES[k]}/KID/p{v}-{f}.jpg", "video_id": f"KID/{v}",
                  "frame_number": f, "class_index": int(k), "class": NAMES[k]}
                 for f, k in enumerate(lab)]
    return pd.DataFrame(rows)


def _probs(frames: pd.DataFrame, quality: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = frames["class_index"].to_numpy()
    k = len(NAMES)
    return special.softmax(rng.normal(size=(len(y), k)) + quality * np.eye(k)[y], axis=1)


@pytest.fixture(scope="module")
def runs(sqlite_store, tmp_path_factory):
    client = mlflow.tracking.MlflowClient(sqlite_store)
    tmp = tmp_path_factory.mktemp("promote-classes")
    exp_id = client.create_experiment(f"promote-classes-{tmp.name}")
    test, val = _frames(6, 40, 0, "test"), _frames(2, 30, 1, "val")
    ids, folders = {}, {}
    for cell, quality in QUALITY.items():
        for s in SEEDS:
            noise = s + (500 if cell == "pi" else 0)
            preds = {"test": predictions_frame(test, _probs(test, quality, noise)),
                     "val": predictions_frame(val, _probs(val, quality, noise + 1))}
            folders[cell, s] = write_predictions(preds, tmp / f"{cell}{s}", classes=NAMES)
            ids[cell, s] = log_fake_run(client, exp_id, folders[cell, s], cell=cell, seed=s,
                                        digest="c" * 64, class_names=NAMES)
    name = "pipi-efficientnet_b0-pi"
    client.create_registered_model(name)
    mv = client.create_model_version(name, f"runs:/{ids['pi', 41]}/predictions",
                                     run_id=ids["pi", 41],
                                     tags=fake_version_tags(client, ids["pi", 41]))
    return {"name": name, "version": mv.version, "folders": folders}


def _class_auc(folder, k: int) -> float:
    df = pd.read_parquet(folder / "test.parquet")
    return float(roc_auc_score(df["label"] == k, df[f"prob_{k:02d}"]))


def test_promote_names_the_runs_own_classes(runs, sqlite_tracking):
    r = CliRunner().invoke(main, ["promote", "--model", runs["name"], "--version",
                                  runs["version"], "--min-sign-positive", "2"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    for n in NAMES:
        assert f"| {n} |" in r.output
    assert "Ampulla" not in r.output and "Angiectasia" not in r.output
    client = mlflow.tracking.MlflowClient()
    mv = client.get_model_version(runs["name"], runs["version"])
    per_class = json.loads(mv.tags["pipi.promote.class_p_bh"])
    assert list(per_class) == list(NAMES)
    # each row's delta is the cross-seed mean of that class's AUC deltas (sklearn)
    f = runs["folders"]
    for k, n in enumerate(NAMES):
        expect = np.mean([_class_auc(f["pi", s], k) - _class_auc(f["a", s], k) for s in SEEDS])
        assert per_class[n][0] == pytest.approx(expect, abs=1e-6)
    card = client.get_registered_model(runs["name"]).description
    assert "(3: Bleeding, Normal, Worms)" in card and "Kvasir" not in card
