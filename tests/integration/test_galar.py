"""The `galar` entry point: zero-shot children of Kvasir-trained runs on staged Galar frames,
their metrics (checked against scikit-learn on the logged predictions), reuse, the retention
tables of `aggregate` and `pipi galkva submission --experiment` on those runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from fakes import sk_macro

from pipi.classes import class_index
from pipi.errors import ConfigError, PipiError
from pipi.galkva import SCORING_SETS
from pipi.predictions import read_predictions
from pipi.workflows import galar as workflow

GALKVA = [class_index(c) for c in SCORING_SETS["v1.0"]]


def test_bad_runs_and_data_are_refused_before_anything_is_staged(tracking, tmp_path):
    with pytest.raises(ConfigError, match="runs: give comma-separated run ids"):
        workflow.run_galar(runs="", data=str(tmp_path))
    with pytest.raises(ConfigError, match="fold='x'"):
        workflow.run_galar(runs="0" * 32, fold="x")
    with pytest.raises(ConfigError, match="not a staged Galar folder"):
        workflow.load_galar_data(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown synthetic preset"):
        workflow.load_galar_data("synthetic-huge")


@pytest.mark.slow
def test_galar_children_aggregate_retention_and_submission(tracking, tiny_staged, tmp_path,
                                                           monkeypatch):
    """Smoke pair a / pi (two seeds) -> galar children -> aggregate -> GalKva submission."""
    from pipi import analysis
    from pipi import tracking as tr
    from pipi.cli import ENTRY_POINTS
    from pipi.cli.galkva import galkva
    from pipi.config import make_config
    from pipi.workflows import aggregate
    from pipi.runs import training as train_workflow

    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    exp = f"galar-{tmp_path.name}"
    src = {}
    for cell in ("a", "pi"):
        for seed in (41, 42):
            cfg = make_config(cell=cell, profile="smoke", weights="none", seed=seed)
            src[(cell, seed)] = train_workflow.train(
                cfg, data=str(tiny_staged), experiment=exp, register=False,
                progress=False).run_id
    with pytest.raises(PipiError, match="not found|evaluation run|sequence cell|FINISHED"):
        workflow.resolve_source_runs("0" * 32, experiment=exp)
    r = CliRunner().invoke(ENTRY_POINTS["galar"], [
        "--runs", ",".join(src.values()), "--data", "synthetic-tiny", "--experiment", exp])
    assert r.exit_code == 0, r.output  # the default fold: every staged video (issue 19)
    assert "scored on every staged video" in r.output
    res = workflow.run_galar(runs="tags.`pipi.entry_point` = 'train'", data="synthetic-tiny",
                             fold="all", experiment=exp, progress=False)
    assert res.table["reused"].all() and len(res.table) == 4  # found by filter, reused
    staged = tmp_path / "home" / "data" / "galar-synthetic-tiny-s0"
    for row in res.table.to_dict("records"):
        run = tr.get_run(row["galar_run_id"])
        t = run.tags
        assert t["pipi.source_run_id"] == row["source_run_id"] == src[(row["cell"],
        int(row["seed"]))]
        assert (t["pipi.dataset"], t["pipi.study"], t["pipi.galar_fold"]) == ("galar", "galar",
        "all")
        assert t["pipi.data_digest"] == json.loads((staged / "manifest.json").read_text())["data_digest"]
        folder = tr.download_artifact(row["galar_run_id"], "predictions",
        tmp_path / row["galar_run_id"])
        figs = {a.path for a in tr.runs.client().list_artifacts(row["galar_run_id"], "figures")}
        assert "figures/roc_per_capsule.png" in figs and "figures/confusion.png" in figs
        pred = read_predictions(folder)
        staged_frames = pd.read_parquet(staged / "frames.parquet")
        assert staged_frames["vendor_fold"].nunique() == 2  # folds exist, all of them scored
        assert len(pred) == row["n_frames"] == len(staged_frames)
        assert set(pred["video_id"].astype(str)) == set(staged_frames["video_id"].astype(str))
        assert t["pipi.galar_scope"].startswith(
            f"every staged video ({staged_frames['video_id'].nunique()} videos")
        assert set(pred["capsule_system"]) >= {"PillCam SB3",
        "Olympus"} or pred["capsule_system"].nunique() >= 2
        y, p = pred["label"].to_numpy(), pred[[f"prob_{i:02d}" for i in range(14)]].to_numpy()
        g = np.isin(y, GALKVA)
        assert run.metrics["test/galkva_macro_auc"] == pytest.approx(
            sk_macro(y[g], p[g], GALKVA), abs=1e-6)
        assert run.metrics["test/mapped_macro_auc"] == pytest.approx(
            sk_macro(y, p, sorted(set(y))), abs=1e-6)
    opts = analysis.AggregateOptions(n_resamples=50, figures=False)
    rep = aggregate.run_aggregate(experiment=exp, cache_dir=tmp_path / "cache", log_run=False,
                                  options=opts).report
    assert rep.table("per_frame").data.set_index("cell").loc["pi", "n_seeds"] == 2
    t = rep.table("cross_vendor")
    assert t.ok and set(t.data["capsule_system"]) >= {"all capsule systems"}
    head = t.data[(t.data["class_set"] == "galkva")
                  & (t.data["capsule_system"] == "all capsule systems")].iloc[0]
    assert head["n_seeds"] == 2 and isinstance(head["band"], str) and head["band"]
    k = head["kvasir_delta"]
    assert math.isnan(head["retention"]) if k == 0 else head["retention"] == pytest.approx(
        head["galar_delta"] / k)
    out = tmp_path / "sub.json"
    r = CliRunner().invoke(galkva, ["submission", "--experiment", exp, "--method", "pi",
                                    "--baseline", "a", "--submitter-name", "A. Tester",
                                    "--affiliation", "Lab", "--email", "a@example.org",
                                    "--n-resamples", "100", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(galkva, ["validate", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["provenance"]["runs"]["kvasir"]["method"]["41"] == src[("pi", 41)]
    assert doc["results"]["galar"]["delta_vs_rgb_baseline"] == pytest.approx(
        head["galar_delta"], abs=1e-4)

    # the pi runs again with another prior (as `calibrate` would give): aggregate puts the
    # calibrated retention beside the zero-shot one, and the zero-shot table is unchanged
    from pipi.calibration.objective import PriorParams, prior_params_document

    fitted = tmp_path / "prior_params.json"
    fitted.write_text(json.dumps(prior_params_document(PriorParams(9.0, 0.6), image_size=32)))
    cal = workflow.run_galar(runs=",".join(src[("pi", s)] for s in (41, 42)),
                             data="synthetic-tiny", fold="all", experiment=exp,
                             progress=False, prior_params=str(fitted))
    assert {tr.get_run(x).tags["pipi.variant"] for x in cal.table["galar_run_id"]} == \
        {"calibrated"}
    rep2 = aggregate.run_aggregate(experiment=exp, cache_dir=tmp_path / "cache", log_run=False,
                                   options=opts).report
    pd.testing.assert_frame_equal(rep2.table("cross_vendor").data, t.data)
    side = rep2.table("cross_vendor_calibrated")
    assert side.ok, side.notes
    row = side.data[(side.data["class_set"] == "galkva")
                    & (side.data["capsule_system"] == "all capsule systems")].iloc[0]
    assert row["zero_shot_retention"] == head["retention"] or (
        math.isnan(row["zero_shot_retention"]) and math.isnan(head["retention"]))
    assert row["zero_shot_galar_delta"] == pytest.approx(head["galar_delta"])
    # the calibrated side: the calibrated pi children against the zero-shot a children
    ids = side.run_ids[0]
    assert set(ids["galar pi (calibrated)"].values()) == set(cal.table["galar_run_id"])
    assert set(ids["galar a (calibrated)"].values()) == set(
        res.table[res.table["cell"] == "a"]["galar_run_id"])
    gm = {int(r["seed"]): r["galkva_macro_auc"] for r in cal.table.to_dict("records")}
    ga = {int(r["seed"]): r["galkva_macro_auc"] for r in res.table.to_dict("records")
          if r["cell"] == "a"}
    assert row["calibrated_galar_delta"] == pytest.approx(
        np.mean([gm[s] - ga[s] for s in (41, 42)]), abs=1e-6)
