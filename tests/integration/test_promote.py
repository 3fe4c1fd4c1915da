"""`promote`: the champion alias moves only on cross-seed evidence, recorded on the version."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from fakes import EVALUABLE, fake_version_tags, log_fake_run, make_frames, write_run
from sklearn.metrics import roc_auc_score

from pipi.cli import main

pytestmark = pytest.mark.slow  # about 1 min: bootstraps of 5 seeds x 11 classes
SEEDS = (41, 42, 43, 44, 45)
#: quality of each arm's synthetic predictions (signal on the true class); b_plus clearly
#: beats a; e_plus is a with other noise (no evidence); c has only two seeds
ARMS = {"a": (1.0, SEEDS), "b_plus": (1.8, SEEDS), "e_plus": (1.0, SEEDS),
        "c": (1.8, SEEDS[:2])}


@pytest.fixture(scope="module")
def registry(sqlite_store, tmp_path_factory):
    """An experiment of synthetic train runs per arm and seed; one registered version of each
    new arm (its seed-41 run), a second b_plus version (seed 42)."""
    client = mlflow.tracking.MlflowClient(sqlite_store)
    tmp = tmp_path_factory.mktemp("promote-runs")
    exp_id = client.create_experiment(f"promote-{tmp.name}")
    test, val = make_frames(6, 50, 0), make_frames(2, 30, 1, split="val")
    runs, folders = {}, {}
    for cell, (quality, seeds) in ARMS.items():
        for s in seeds:
            noise_seed = s + (1000 if cell == "e_plus" else 0)
            folders[cell, s] = write_run(tmp / f"{cell}{s}", test, val, quality, noise_seed)
            runs[cell, s] = log_fake_run(client, exp_id, folders[cell, s], cell=cell, seed=s)
    versions = {}
    for cell, seed in (("b_plus", 41), ("e_plus", 41), ("c", 41), ("b_plus", 42)):
        name = f"pipi-efficientnet_b0-{cell}"
        if not client.search_registered_models(f"name = '{name}'"):
            client.create_registered_model(name)
        mv = client.create_model_version(name, f"runs:/{runs[cell, seed]}/predictions",
                                         run_id=runs[cell, seed],
                                         tags=fake_version_tags(client, runs[cell, seed]))
        versions[cell, seed] = mv.version
    return {"runs": runs, "folders": folders, "versions": versions, "test": test}


def _cli(*args: str):
    return CliRunner().invoke(main, ["promote", *args], catch_exceptions=False)


def _macro(folder) -> float:
    df = pd.read_parquet(folder / "test.parquet")
    probs = df[[f"prob_{i:02d}" for i in range(14)]].to_numpy(float)
    return float(np.mean([roc_auc_score(df["label"] == k, probs[:, k]) for k in EVALUABLE]))


def test_promote_gates_records_keeps_the_previous_champion_and_rolls_back(registry,
                                                                         sqlite_tracking):
    c = mlflow.tracking.MlflowClient()
    name = "pipi-efficientnet_b0-b_plus"
    v1, v2 = registry["versions"]["b_plus", 41], registry["versions"]["b_plus", 42]
    evidence = "Training evidence: run `r41` (seed 41), **test macro-AUC 0.9000**"  # train's
    c.update_model_version(name, v1, description=evidence)
    r = _cli("--model", name, "--version", v1)
    assert r.exit_code == 0, r.output
    assert "| mean macro-AUC delta |" in r.output and "@champion ->" in r.output
    assert c.get_model_version_by_alias(name, "champion").version == v1
    # the model card's serve command names the alias that now exists
    assert f"mlflow models serve -m models:/{name}@champion " in c.get_registered_model(
        name).description
    mv = c.get_model_version(name, v1)
    assert mv.tags["pipi.promote.decision"] == "promoted"
    assert "Evidence: b_plus vs a" in mv.description
    assert mv.description.endswith("\n\n" + evidence)  # the gate above, training evidence kept
    # the recorded delta is the cross-seed mean of the per-seed macro-AUC deltas (sklearn)
    f = registry["folders"]
    expect = np.mean([_macro(f["b_plus", s]) - _macro(f["a", s]) for s in SEEDS])
    assert float(mv.tags["pipi.promote.delta"]) == pytest.approx(expect, abs=1e-6)
    lo, hi = json.loads(mv.tags["pipi.promote.ci"])
    assert 0 < lo < expect < hi
    runs = json.loads(mv.tags["pipi.promote.runs"])
    assert runs["new"] == {str(s): registry["runs"]["b_plus", s] for s in SEEDS}
    # a second version: the first becomes previous-champion; rollback restores it
    assert _cli("--model", name, "--version", v2).exit_code == 0
    assert c.get_model_version_by_alias(name, "champion").version == v2
    assert c.get_model_version_by_alias(name, "previous-champion").version == v1
    r = _cli("--model", name, "--rollback", "true")
    assert r.exit_code == 0 and "rolled back" in r.output
    assert c.get_model_version_by_alias(name, "champion").version == v1
    assert c.get_model_version_by_alias(name, "previous-champion").version == v2


def test_promote_refuses_without_evidence_and_forces_with_a_reason(registry, sqlite_tracking):
    c = mlflow.tracking.MlflowClient()
    name = "pipi-efficientnet_b0-e_plus"
    v = registry["versions"]["e_plus", 41]
    r = _cli("--model", name, "--version", v)
    assert r.exit_code == 1, r.output
    assert "refused" in r.output and "excludes 0" in r.output
    mv = c.get_model_version(name, v)
    assert mv.tags["pipi.promote.decision"] == "refused" and "Evidence" in mv.description
    with pytest.raises(mlflow.exceptions.MlflowException):
        c.get_model_version_by_alias(name, "champion")
    r = _cli("--model", name, "--version", v, "--force-reason", "clinical pilot, ticket 12")
    assert r.exit_code == 0 and "FORCED" in r.output and "clinical pilot" in r.output
    mv = c.get_model_version(name, v)
    assert mv.tags["pipi.promote.force_reason"] == "clinical pilot, ticket 12"
    assert mv.tags["pipi.promote.decision"] == "promoted (forced)"
    assert c.get_model_version_by_alias(name, "champion").version == v


def test_too_few_seeds_is_a_refusal_with_the_count(registry, sqlite_tracking):
    r = _cli("--model", "pipi-efficientnet_b0-c", "--version", registry["versions"]["c", 41])
    assert r.exit_code == 1, r.output
    assert "paired seeds = 2 (need >= 4)" in r.output
    r = _cli("--model", "pipi-efficientnet_b0-c", "--version", registry["versions"]["c", 41],
             "--min-sign-positive", "2")
    assert r.exit_code == 0, r.output


def test_bad_model_name_is_one_line(sqlite_tracking):
    r = CliRunner().invoke(main, ["promote", "--model", "resnet"])
    assert r.exit_code == 2 and "<prefix>-<backbone>-<cell>" in r.output
