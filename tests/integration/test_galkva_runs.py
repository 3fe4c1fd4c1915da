"""GalKva-2026: schema validation, scoring, recomputation from predictions, submissions, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from pipi.classes import CLASSES, class_index
from pipi.cli.galkva import galkva
from pipi.galkva import (
    LEADERBOARD_HEADER,
    SCORING_SETS,
)
from pipi.predictions import predictions_frame, write_predictions

SCORING = SCORING_SETS["v1.0"]


def paper_example() -> dict:
    """The paper's EfficientNet-B0 headline numbers in the datasets.md submission format."""
    return {
        "submitter": {"name": "Lab X", "affiliation": "University Y", "email": "x@lab.org"},
        "method": {"name": "EffB0 + PI input fusion", "trained_on": "Kvasir-Capsule",
                   "description": "5-channel input fusion of RGB, P_blood and Phi",
                   "code_url": "https://github.com/lab-x/method"},
        "benchmark_version": "v1.0",
        "n_seeds": 6,
        "results": {
            "kvasir": {"macro_auc": {"mean": 0.783, "sd": 0.024}, "n_test_frames": 6423,
                       "per_class_auc": {"Ulcer": {"mean": 0.91, "sd": 0.02, "n_positive": 120}},
                       "delta_vs_rgb_baseline": 0.023, "sign_positive_seeds": "5/6"},
            "galar": {"macro_auc": {"mean": 0.638, "sd": 0.044}, "n_test_frames": 15298,
                      "per_class_auc": {}, "delta_vs_rgb_baseline": 0.002,
                      "sign_positive_seeds": "4/6"},
        },
    }


# --------------------------------------------------------------------------- schema
def _frames(rng, n_videos: int, per_video: int) -> pd.DataFrame:
    labels = rng.choice([class_index(c) for c in SCORING] + [class_index("Pylorus")],
                        size=n_videos * per_video)
    vids = np.repeat([f"v{i:02d}" for i in range(n_videos)], per_video)
    return pd.DataFrame({
        "path": [f"test/{CLASSES[c]}/{v}_{i}.png" for i, (v, c) in enumerate(zip(vids, labels))],
        "video_id": vids, "frame_number": np.arange(len(vids)), "class_index": labels,
        "class": [CLASSES[c] for c in labels],
    })


def _probs(rng, frames: pd.DataFrame, signal: float) -> np.ndarray:
    logits = rng.normal(size=(len(frames), len(CLASSES)))
    logits[np.arange(len(frames)), frames["class_index"].to_numpy()] += signal
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def make_prediction_dir(root: Path, *, seeds=("1", "2"), signals=None, seed: int = 0) -> Path:
    """DIR/{kvasir,galar}/{baseline,method}/<seed>/predictions + run.json."""
    rng = np.random.default_rng(seed)
    signals = signals or {"kvasir": (1.0, 1.6), "galar": (0.6, 0.9)}
    for ds, (sb, sm) in signals.items():
        frames = _frames(rng, 8, 30)
        for arm, sig in (("baseline", sb), ("method", sm)):
            for s in seeds:
                d = root / ds / arm / s
                write_predictions({"test": predictions_frame(frames, _probs(rng, frames, sig))},
                                  d / "predictions")
                (d / "run.json").write_text(json.dumps({"run_id": f"{ds}-{arm}-{s}"}))
    return root


@pytest.fixture(scope="module")
def pred_dir(tmp_path_factory) -> Path:
    return make_prediction_dir(tmp_path_factory.mktemp("preds"))


def test_cli_validate(tmp_path):
    runner = CliRunner()
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(paper_example()))
    doc = paper_example()
    doc["submitter"].pop("email")
    bad.write_text(json.dumps(doc))
    r = runner.invoke(galkva, ["validate", str(good)])
    assert r.exit_code == 0 and "valid" in r.output
    r = runner.invoke(galkva, ["validate", str(bad)])
    assert r.exit_code == 1 and "$.submitter.email" in r.output and "INVALID" in r.output


def test_cli_score_self_reported(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(paper_example()))
    r = CliRunner().invoke(galkva, ["score", str(f)])
    assert r.exit_code == 0, r.output
    assert "self-reported" in r.output and "Retention" in r.output and "Null" in r.output
    r = CliRunner().invoke(galkva, ["score", str(f), "--markdown"])
    assert r.exit_code == 0 and r.output.splitlines()[0] == LEADERBOARD_HEADER.splitlines()[0]
    assert len(r.output.strip().splitlines()) == 3
    r = CliRunner().invoke(galkva, ["score"])
    assert r.exit_code == 2


def test_cli_submission_then_score_predictions(tmp_path, pred_dir):
    runner = CliRunner()
    out = tmp_path / "sub.json"
    r = runner.invoke(galkva, [
        "submission", "--predictions", str(pred_dir), "--out", str(out),
        "--submitter-name", "A", "--affiliation", "B", "--email", "a@b.org",
        "--method-name", "pi", "--description", "five-channel input fusion (test)",
        "--n-resamples", "200",
    ])
    assert r.exit_code == 0, r.output
    assert runner.invoke(galkva, ["validate", str(out)]).exit_code == 0
    r = runner.invoke(galkva, ["score", "--predictions", str(pred_dir), "--n-resamples", "200"])
    assert r.exit_code == 0, r.output
    assert "recomputed" in r.output and "DeLong" in r.output
    doc = json.loads(out.read_text())
    doc["results"]["kvasir"]["delta_vs_rgb_baseline"] = 0.5
    out.write_text(json.dumps(doc))
    r = runner.invoke(galkva, ["score", str(out), "--predictions", str(pred_dir),
                               "--n-resamples", "200"])
    assert r.exit_code == 1 and "MISMATCH $.results.kvasir.delta_vs_rgb_baseline" in r.output


def test_cli_submission_bad_email(tmp_path, pred_dir):
    r = CliRunner().invoke(galkva, [
        "submission", "--predictions", str(pred_dir), "--out", str(tmp_path / "x.json"),
        "--submitter-name", "A", "--affiliation", "B", "--email", "nope",
        "--method-name", "pi", "--description", "five-channel input fusion (test)",
        "--n-resamples", "100",
    ])
    assert r.exit_code == 1 and "$.submitter.email" in r.output
    assert not (tmp_path / "x.json").exists()


