"""The paper's zero-shot protocol by default (issue 19 §1): `galar` scores every staged video
unless a fold is asked for; folds stay for `calibrate` (`stage galar --calibration-fraction`);
a table built on a fold says so, and children of two folds are never mixed."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from click.testing import CliRunner
from fakes import probs_for, run_row, study  # noqa: F401  (study: the module fixture)

from pipi import analysis
from pipi.analysis.retention import build_cross_vendor, select_galar_runs, split_galar_runs
from pipi.calibration.objective import calibration_fold
from pipi.cli.stage import stage
from pipi.data import synth
from pipi.data.staging import load_staged
from pipi.data.staging.galar_release import vendor_folds
from pipi.errors import ConfigError, DataError
from pipi.predictions import predictions_frame, write_predictions
from pipi.report import build_report
from pipi.workflows import galar as workflow


def test_auto_fold_is_every_video_and_evaluation_with_a_calibrated_prior():
    assert workflow.resolve_fold("auto", calibrated=False) == "all"
    assert workflow.resolve_fold("auto", calibrated=True) == "evaluation"
    assert workflow.resolve_fold("all", calibrated=True) == "all"
    with pytest.raises(ConfigError, match="fold='half'"):
        workflow.resolve_fold("half", calibrated=False)
    frames = pd.DataFrame({"video_id": ["1", "1", "2", "3"],
                           "vendor_fold": ["calibration", "calibration", "evaluation",
                                           "evaluation"]})
    ev = workflow.galar_evaluation()
    assert dict(ev.options) == {"fold": "all"} and ev.tags[workflow.TAG_FOLD] == "all"
    assert ev.select(frames).all()
    assert workflow.fold_scope("all", frames).startswith("every staged video (3 videos")
    assert workflow.fold_scope("evaluation", frames).startswith(
        "the evaluation fold only (2 of 3 staged videos")


def test_calibration_fraction_is_a_stage_option_and_recorded(tmp_path):
    release = synth.synthesize_galar(tmp_path / "rel", preset="tiny", seed=2, progress=False)
    runner = CliRunner()
    for frac in ("0.25", "0"):
        out = tmp_path / f"st{frac}"
        r = runner.invoke(stage, ["galar", "--root", str(release), "--out", str(out),
                                  "--calibration-fraction", frac, "--no-mlflow"])
        assert r.exit_code == 0, r.output
        frames, m = load_staged(out)
        assert m["fold_rule"]["calibration_fraction"] == float(frac)
        systems = {int(v): s for v, s in m["capsule_systems"].items()}
        assert m["video_to_fold"] == {str(v): f for v, f in vendor_folds(
            systems, seed=0, calibration_fraction=float(frac)).items()}
    assert set(frames["vendor_fold"]) == {"evaluation"}  # fraction 0: no calibration fold
    system = min(set(frames["capsule_system"]))
    with pytest.raises(DataError, match="--calibration-fraction 0"):
        calibration_fold(frames, m, f"galar:{system}")
    r = runner.invoke(stage, ["galar", "--root", str(release), "--out", str(tmp_path / "x"),
                              "--calibration-fraction", "1", "--no-mlflow"])
    assert r.exit_code == 2 and not (tmp_path / "x").exists()


def _with_folds(study, tmp_path):  # noqa: F811
    """The study's Galar children relabelled fold `all`, plus children of the same Kvasir
    runs scored on an `evaluation` fold (half the videos): other frames."""
    runs = study["runs"].copy()
    galar = runs["study"] == "galar"
    runs.loc[galar, "params"] = json.dumps({"galar.fold": "all"})
    ga = study["ga"]
    half = ga[ga["video_id"].isin(sorted(set(ga["video_id"]))[:3])].reset_index(drop=True)
    dirs, extra = dict(study["dirs"]), []
    for r in runs[galar].itertuples(index=False):
        rid = ("e" + r.run_id[1:])[:32]
        dirs[rid] = write_predictions({"test": predictions_frame(
            half, probs_for(half, 1.0, int(r.seed)))}, tmp_path / rid)
        extra.append(run_row(rid, r.cell, int(r.seed), digest="g" * 64, study="galar",
                             base=r.base_run_id, params={"galar.fold": "evaluation"},
                             entry="galar"))
    both = pd.concat([runs, pd.DataFrame(extra)], ignore_index=True)
    both["seed"] = both["seed"].astype("Int64")
    return both, dirs, half


def test_zero_shot_table_uses_every_video_and_never_mixes_folds(study, tmp_path):  # noqa: F811
    runs, dirs, half = _with_folds(study, tmp_path)
    kruns, gruns = split_galar_runs(runs)
    kept, excluded = analysis.select_runs(kruns)
    ev = analysis.build_evidence(kept, dirs, excluded=excluded)
    gkept, _ = select_galar_runs(gruns)
    cv, out = build_cross_vendor(gkept, dirs, ev)
    assert cv.fold == "all" and len(cv.labels) == len(study["ga"])
    assert set(cv.videos) == set(study["ga"]["video_id"])
    fold_out = out[out["reason"].str.contains("scored fold evaluation")]
    assert len(fold_out) == len(gkept) // 2
    rep = build_report(replace(ev, cross_vendor=cv),
                       analysis.AggregateOptions(n_resamples=50, figures=False))
    t = rep.table("cross_vendor")
    assert t.title.endswith("(Δ_Galar / Δ_Kvasir)") and set(t.data["galar_fold"]) == {"all"}
    assert any("every staged video" in n for n in t.notes)
    # only evaluation-fold children: the table says so in its title, data and notes
    only = gkept[gkept["params"].str.contains("evaluation")]
    cv2, _ = build_cross_vendor(only, dirs, ev)
    assert cv2.fold == "evaluation" and len(cv2.labels) == len(half)
    t2 = build_report(replace(ev, cross_vendor=cv2),
                      analysis.AggregateOptions(n_resamples=50, figures=False)).table("cross_vendor")
    assert t2.title.endswith("Galar evaluation fold only")
    assert set(t2.data["galar_fold"]) == {"evaluation"}
    assert any("not the paper's whole-subset protocol" in n for n in t2.notes)
