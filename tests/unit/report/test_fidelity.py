"""`aggregate` fidelity (issue 9: headline classes, recipes, statistics, missing tables) and bad
`out` folders and FAILED runs (issue 10), on generated predictions, without a server."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fakes import B0, PAPER, evidence_of, make_frames, make_runs, recipe
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.metrics import confusion_matrix as sk_confusion

from pipi import analysis
from pipi.classes import CLASSES
from pipi.errors import ConfigError, DataError
from pipi.report import build_report

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_fidelity")

TEST_CLASSES = list(range(1, 12))
NO_VAL = CLASSES.index("Blood - fresh")     # paper: 0 val frames, 424 test frames


def no_val_frames():
    """Test frames with every class of TEST_CLASSES; val frames without Blood - fresh."""
    test = make_frames(7, 60, 0)
    val = make_frames(3, 40, 1, split="val",
                      classes=[k for k in TEST_CLASSES if k != NO_VAL])
    return test, val


# --------------------------------------------------------------------------- 9.1 headline classes
@pytest.mark.parametrize("tags", ["test", "none"])
def test_a_class_with_test_but_no_val_positives_is_in_the_headline_and_every_table(tmp_path,
                                                                                   tags):
    test, val = no_val_frames()
    runs, dirs = make_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]}, test=test, val=val,
                           tags=tags)
    ev = evidence_of(runs, dirs)
    assert ev.classes == tuple(TEST_CLASSES) and NO_VAL in ev.classes
    assert ("pipi.test_classes" in ev.class_source) == (tags == "test")
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=30, figures=False))
    pc = rep.table("per_class_per_frame").data
    assert "Blood - fresh" in set(pc["class"]) and len(pc) == 11
    p = pc["p"].to_numpy(float)    # the Bonferroni family is the 11 classes
    np.testing.assert_allclose(pc["p_bonferroni"], np.minimum(1, 11 * p))
    assert "Blood - fresh" in set(rep.table("operating_points").data["class"])
    a = ev.arm(B0, "a")
    macro = [np.mean([roc_auc_score(ev.labels == k, pr[:, k]) for k in TEST_CLASSES])
             for pr in a.probs.astype(float)]
    runs_t = rep.table("runs").data.set_index("run_id")
    assert runs_t.loc[a.run_ids[0], "macro_auc"] == pytest.approx(macro[0], abs=1e-12)
    briers = [np.mean([np.mean((pr[:, k] - (ev.labels == k)) ** 2) for k in TEST_CLASSES])
              for pr in a.probs.astype(float)]
    cal = rep.table("calibration").data.set_index("cell")
    assert cal.loc["a", "brier_mean"] == pytest.approx(np.mean(briers), abs=1e-12)
    assert "Blood - fresh" in rep.summary and "headline classes" in rep.summary


def test_older_runs_fall_back_to_their_evaluable_classes_tag_and_say_so(tmp_path):
    test, val = no_val_frames()
    runs, dirs = make_runs(tmp_path, {"a": [41], "pi": [41]}, test=test, val=val,
                           tags="evaluable")
    ev = evidence_of(runs, dirs)
    assert NO_VAL not in ev.classes and len(ev.classes) == 10
    assert "pipi.evaluable_classes" in ev.class_source and "val and test" in ev.class_source


# --------------------------------------------------------------------------- 9.3 recipes
def test_an_arm_with_runs_of_two_recipes_is_refused_with_a_filter_that_selects_one(tmp_path):
    runs, _ = make_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]})
    f1, _ = make_runs(tmp_path / "f1", {"a": [41]}, start=10_000, extra={("a", 41): {
        "recipe": recipe("a", 41, select_metric="macro_f1"),
        "params": json.dumps({**PAPER, "select_metric": "macro_f1", "seed": "41"})}})
    mixed = pd.concat([runs, f1], ignore_index=True)    # the macro_f1 run is the newest
    with pytest.raises(DataError) as err:
        analysis.select_runs(mixed)
    msg = str(err.value)
    assert "\n" not in msg and "efficientnet_b0/a has runs of 2 recipes" in msg
    assert "select_metric=macro_auc" in msg and "select_metric=macro_f1" in msg
    flt = msg.split('--filter "')[1].rstrip('"')
    assert flt == "params.select_metric = 'macro_auc'"
    chosen = mixed[[json.loads(p)["select_metric"] == "macro_auc" for p in mixed["params"]]]
    kept, _ = analysis.select_runs(chosen)
    assert sorted(kept["run_id"]) == sorted(runs["run_id"])


def test_seeds_of_one_arm_with_different_recipes_are_refused(tmp_path):
    runs, _ = make_runs(tmp_path, {"a": [41, 42]}, extra={("a", 42): {
        "recipe": recipe("a", 42, alpha="6.0")}})
    with pytest.raises(DataError, match=r"alpha=4.0 .*seeds 41.*alpha=6.0 .*seeds 42"):
        analysis.select_runs(runs)


def test_repeats_of_one_recipe_keep_the_newest_and_untagged_runs_compare_params(tmp_path):
    runs, _ = make_runs(tmp_path, {"a": [41, 42]})
    again, _ = make_runs(tmp_path / "again", {"a": [41]}, start=50_000)
    kept, excluded = analysis.select_runs(pd.concat([runs, again], ignore_index=True))
    assert again["run_id"].iloc[0] in set(kept["run_id"])
    assert excluded["reason"].iloc[0].endswith("(same backbone, cell, seed, recipe)")
    old = runs.assign(recipe="")                       # logged before pipi.recipe: params
    old.loc[1, "params"] = json.dumps({**PAPER, "cell": "a", "seed": "42",
                                       "data_dir": "/elsewhere", "prior_mask": "none"})
    assert len(analysis.select_runs(old)[0]) == 2
    old.loc[1, "params"] = json.dumps({**PAPER, "cell": "a", "seed": "42", "epochs": "10"})
    with pytest.raises(DataError, match="epochs=30.*epochs=10"):
        analysis.select_runs(old)
    hashed = pd.concat([runs, again], ignore_index=True)
    hashed["recipe_hash"] = ["1" * 16, "2" * 16, "3" * 16]   # same command, different hash
    with pytest.raises(DataError, match="seed 41 has runs of different pipi.recipe_hash"):
        analysis.select_runs(hashed)


# --------------------------------------------------------------------------- 9.5 statistics
def test_per_class_intervals_are_defined_for_classes_in_few_test_videos(tmp_path):
    test = make_frames(7, 60, 0)
    rare = CLASSES.index("Lymphangiectasia")
    test.loc[(test["class_index"] == rare) & (test["video_id"] != "test00"), "class_index"] = 1
    test["class"] = [CLASSES[k] for k in test["class_index"]]
    runs, dirs = make_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]}, test=test)
    ev = evidence_of(runs, dirs)
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=40, figures=False))
    pc = rep.table("per_class_per_frame").data.set_index("class")
    row = pc.loc["Lymphangiectasia"]
    assert row["test_videos"] == 1 and row["bootstrap_unit"] == "frames (stratified by class)"
    assert np.isfinite([row["ci_bca_low"], row["ci_bca_high"]]).all()
    others = pc.drop("Lymphangiectasia")
    assert set(others["bootstrap_unit"]) == {"videos"}
    assert np.isfinite(others[["ci_bca_low", "ci_bca_high"]].to_numpy(float)).all()
    shown = rep.table("per_class_per_frame").display
    assert shown["95% BCa CI (videos)"].str.contains(r"\[frames \(stratified by class\)\]").sum() == 1
    # the macro interval: one class in a single video -> stratified frames, said in the row
    pf = rep.table("per_frame").data.set_index("cell")
    assert pf.loc["pi", "bootstrap_unit"] == "frames (stratified by class)"


def test_resample_frame_is_an_option_labelled_in_the_tables(tmp_path):
    runs, dirs = make_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]})
    ev = evidence_of(runs, dirs)
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=30, figures=False,
                                                     resample="frame"))
    pt = rep.table("paired_tests")
    assert set(pt.data["bootstrap_unit"]) == {"frames"}
    assert "95% BCa CI (frames)" in pt.display.columns
    assert any("resample=frame" in n for n in pt.notes) and rep.meta["resample"] == "frame"
    with pytest.raises(ConfigError, match="resample must be one of"):
        analysis.AggregateOptions(resample="patient")


# --------------------------------------------------------------------------- 9.6 tables
@pytest.fixture(scope="module")
def full(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    arms = {"a": [41, 42, 43], "pi": [41, 42, 43], "b": [41, 42], "e_plus": [41, 42],
            "a@tta_aux_sgd": [41, 42, 43], "a@tta_bn_tent": [41, 42, 43]}
    runs, dirs = make_runs(tmp, arms)
    a_runs = runs[runs["cell"] == "a"].set_index("seed")["run_id"]
    for cell in ("a@tta_aux_sgd", "a@tta_bn_tent"):
        sel = runs["cell"] == cell
        runs.loc[sel, "base_run_id"] = runs.loc[sel, "seed"].map(a_runs)
        runs.loc[sel, "study"] = "pi_tta"
        runs.loc[sel, "tta_loss_before"], runs.loc[sel, "tta_loss_after"] = 0.5, 0.4
    for rid in runs.loc[runs["cell"] == "a@tta_aux_sgd", "run_id"]:   # null by construction
        seed = int(runs.set_index("run_id").loc[rid, "seed"])
        src = dirs[a_runs[seed]] / "test.parquet"
        (dirs[rid] / "test.parquet").write_bytes(src.read_bytes())
    ev = evidence_of(runs, dirs)
    return ev, build_report(ev, analysis.AggregateOptions(n_resamples=40))


def test_both_per_class_tables_are_built(full):
    ev, rep = full
    assert "cell (b) vs cell (e_plus)" in rep.table("per_class").title
    t = rep.table("per_class_per_frame")
    assert "cell (a) vs cell (pi)" in t.title and len(t.data) == len(ev.classes)
    k = CLASSES.index(t.data["class"].iloc[0])
    a, pi = ev.arm(B0, "a"), ev.arm(B0, "pi")
    want = np.mean([roc_auc_score(ev.labels == k, pi.probs[i][:, k])
                    - roc_auc_score(ev.labels == k, a.probs[i][:, k]) for i in range(3)])
    assert t.data["delta"].iloc[0] == pytest.approx(want, abs=1e-12)
    assert {"per_class_lift", "per_class_lift_per_frame"} <= set(rep.figures)


def test_pi_tta_table_shows_the_null_result_and_the_non_paper_probe(full):
    ev, rep = full
    t = rep.table("pi_tta")
    d = t.data.set_index("probe")
    assert d.loc["a@tta_aux_sgd", "delta_mean"] == 0.0
    assert d.loc["a@tta_aux_sgd", "max_abs_prob_diff"] == 0.0
    assert d.loc["a@tta_aux_sgd", "paper_probe"] and not d.loc["a@tta_bn_tent", "paper_probe"]
    bn, a = ev.arm(B0, "a@tta_bn_tent"), ev.arm(B0, "a")
    assert d.loc["a@tta_bn_tent", "delta_mean"] == pytest.approx(
        np.mean(bn.macro - a.macro), abs=1e-12)
    assert d.loc["a@tta_bn_tent", "logged_loss_before"] == 0.5
    assert any(n.startswith("Null by construction") for n in t.notes)
    assert not any(n.startswith("WARNING") for n in t.notes)


def test_focal_classes_operating_points_pr_curves_and_confusion(full):
    ev, rep = full
    op = rep.table("operating_points").data
    focal = [c for c in analysis.FOCAL_CLASSES if CLASSES.index(c) in ev.classes]
    assert list(dict.fromkeys(op["class"]))[:len(focal)] == focal
    assert op[op["focal"]]["class"].isin(analysis.FOCAL_CLASSES).all()
    assert {"pr_focal", "confusion", "pr"} <= set(rep.figures)
    pi = ev.arm(B0, "pi")
    for name, f in rep.curves["focal_pr"].items():
        k = CLASSES.index(name)
        want = average_precision_score(np.tile(ev.labels == k, 3), pi.probs[:, :, k].ravel())
        assert f["arms"]["pi"]["ap"] == pytest.approx(want, abs=1e-12)
    conf = rep.curves["confusion"]
    classes = [CLASSES.index(c) for c in conf["classes"]]
    want = sum(sk_confusion(ev.labels, p.argmax(1), labels=range(14)) for p in pi.probs)
    got = conf["arms"]["pi"]["counts"]
    np.testing.assert_array_equal(got[:, :-1], want[np.ix_(classes, classes)])
    np.testing.assert_allclose(conf["arms"]["pi"]["normalised"].sum(1), 1.0)


# --------------------------------------------------------------------------- 10: out, FAILED
def test_failed_runs_are_excluded_with_their_failure_reason(tmp_path):
    runs, dirs = make_runs(tmp_path, {"a": [41, 42], "pi": [41]}, extra={("pi", 41): {
        "status": "FAILED", "failure_reason": "ConfigError: image_size=7 must be >= 16"}})
    kept, excluded = analysis.select_runs(runs)
    why = dict(zip(excluded["run_id"], excluded["reason"], strict=True))
    assert list(why.values()) == ["status FAILED: ConfigError: image_size=7 must be >= 16"]
    ev = analysis.build_evidence(kept, dirs, excluded=excluded)
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=20, figures=False))
    ex = rep.table("excluded")
    assert "image_size=7" in ex.display["reason"].iloc[0]
    assert "1 run(s): status FAILED" in ex.notes and "excluded: 1 status FAILED" in rep.summary


