"""`aggregate`: run selection, evidence, the video bootstrap, comparisons, tables, and the
entry point against a real `mlflow server` (generated predictions in the v1 format, plus a
slow integration test on real `train` runs)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from brute import replay_delta_bootstrap
from fakes import EVALUABLE, local_runs
from scipy import stats
from sklearn.metrics import roc_auc_score

from pipi import analysis
from pipi import stats as pstats
from pipi.classes import CLASSES
from pipi.errors import DataError
from pipi.report import build_report
from pipi.stats import delong_macro_test
from pipi.workflows import aggregate as workflow

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_aggregate_analysis")


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agg")
    runs, dirs = local_runs(tmp, {"a": [41, 42, 43], "pi": [41, 42, 43], "distill": [41, 42],
                                  "b": [41, 42, 43], "e_plus": [41, 42, 43]})
    kept, excluded = analysis.select_runs(runs)
    return analysis.build_evidence(kept, dirs, excluded=excluded, experiment="exp",
    experiment_id="1",
                              tracking_uri="http://127.0.0.1:5000")


@pytest.fixture(scope="module")
def report(evidence):
    return build_report(evidence, analysis.AggregateOptions(n_resamples=200))


# --------------------------------------------------------------------------- the fast bootstrap
def video_bootstrap(ev, *, n_resamples: int, rng: int,
                    resample: str = "video") -> pstats.PairedAUCBootstrap:
    """The paired bootstrap of every (backbone, cell, seed) column of the evidence."""
    columns = {(a.backbone, a.cell, s): a.probs[i] for a in ev.arms.values()
               for i, s in enumerate(a.seeds)}
    return pstats.PairedAUCBootstrap(ev.labels, ev.videos, columns, ev.classes,
                                     resample=resample, n_resamples=n_resamples, rng=rng)


def pairs(backbone, reference, new, seeds):
    return [(backbone, reference, s) for s in seeds], [(backbone, new, s) for s in seeds]


def weighted_auc_bruteforce(s, pos, w):
    """Sum_{i pos, j neg} w_i w_j psi(s_i, s_j) / (W_pos W_neg): the O(n^2) definition."""
    x, y, wx, wy = s[pos], s[~pos], w[pos], w[~pos]
    psi = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    return float(wx @ psi @ wy / (wx.sum() * wy.sum()))


def test_pair_counts_give_the_weighted_auc_of_any_video_weights():
    rng = np.random.default_rng(3)
    n, v = 300, 6
    s = np.round(rng.normal(size=n), 1)          # many ties
    pos = rng.random(n) < 0.3
    g = rng.integers(0, v, n)
    k, p, q = pstats.pair_counts(s, pos, g, v)
    for c in [np.ones(v), rng.integers(0, 3, v).astype(float), np.eye(v)[0] + np.eye(v)[3]]:
        w = c[g]
        if w[pos].sum() == 0 or w[~pos].sum() == 0:
            continue
        assert c @ k @ c / ((c @ p) * (c @ q)) == pytest.approx(
            weighted_auc_bruteforce(s, pos, w), abs=1e-12)
    c = np.ones(v)
    assert c @ k @ c / ((c @ p) * (c @ q)) == pytest.approx(roc_auc_score(pos, s), abs=1e-12)


def test_video_bootstrap_equals_a_replay_resample_by_resample(evidence):
    """Every draw of the video bootstrap replayed with the rng, each statistic recomputed from
    the repeated frames (ranks), z0, a and BCa from their definitions."""
    # 100 draws: the replay below is brute force (12 s for 300 draws on the loaded machine),
    # and no draw of this evidence is redrawn at 100 or at 300
    boot = video_bootstrap(evidence, n_resamples=100, rng=7)
    a, p = evidence.arm("efficientnet_b0", "a"), evidence.arm("efficientnet_b0", "pi")
    seeds = [41, 42, 43]
    for classes in (None, [evidence.classes[2]]):
        got = boot.delta(*pairs("efficientnet_b0", "a", "pi", seeds), classes=classes)
        ref = replay_delta_bootstrap(
            evidence.labels, a.probs.astype(float), p.probs.astype(float),
            classes or evidence.classes, videos=evidence.videos, n_resamples=100, rng=7)
        assert got.unit == "videos" and got.n_units == 7
        assert got.n_redrawn == ref["redrawn"]
        assert got.statistic == pytest.approx(ref["statistic"], abs=1e-12)
        assert got.pvalue == ref["pvalue"]
        np.testing.assert_allclose(got.percentile_interval, ref["percentile"], atol=1e-12)
        np.testing.assert_allclose(got.bca_interval, ref["bca"], atol=1e-12)
        assert got.bias_correction == pytest.approx(ref["z0"], abs=1e-12)
        assert got.acceleration == pytest.approx(ref["a"], abs=1e-9)


def test_single_video_falls_back_to_a_stratified_frame_bootstrap(tmp_path):
    runs, dirs = local_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]}, n_videos=1,
                            per_video=200)
    ev = analysis.build_evidence(analysis.select_runs(runs)[0], dirs)
    got = video_bootstrap(ev, n_resamples=100, rng=1).delta(
        *pairs("efficientnet_b0", "a", "pi", [41, 42]))
    assert got.unit == "frames (stratified by class)"
    ref = replay_delta_bootstrap(ev.labels, ev.arm("efficientnet_b0", "a").probs.astype(float),
                                 ev.arm("efficientnet_b0", "pi").probs.astype(float),
                                 ev.classes, strata=ev.labels, n_resamples=100, rng=1)
    np.testing.assert_allclose(got.bca_interval, ref["bca"], atol=1e-12)


# --------------------------------------------------------------------------- selection, refusal
def _runs_frame(rows):
    from pipi.tracking.queries import RUN_COLUMNS

    df = pd.DataFrame([{c: "" for c in RUN_COLUMNS} | r for r in rows])
    df["seed"] = df["seed"].astype("Int64")
    return df


def test_select_runs_keeps_finished_model_runs_and_says_why_others_are_left_out():
    base = {"experiment_id": "1", "run_name": "", "data_digest": "d", "backbone": "efficientnet_b0",
            "entry_point": "train", "evaluable_classes": "", "test_macro_auc": 0.5}
    runs = _runs_frame([
        {**base, "run_id": "r1", "status": "FINISHED", "cell": "a", "seed": 41, "start_time": 1},
        {**base, "run_id": "r2", "status": "FINISHED", "cell": "a", "seed": 41, "start_time": 5},
        {**base, "run_id": "r3", "status": "FAILED", "cell": "pi", "seed": 41, "start_time": 2},
        {**base, "run_id": "r4", "status": "FINISHED", "cell": "", "seed": None, "start_time": 3,
         "entry_point": "stage"},
        {**base, "run_id": "r5", "status": "FINISHED", "cell": "pi", "seed": None,
         "start_time": 4},
        {**base, "run_id": "r6", "status": "RUNNING", "cell": "pi", "seed": 42, "start_time": 6},
        {**base, "run_id": "r7", "status": "FINISHED", "cell": "pi", "seed": 41, "start_time": 7},
    ])
    kept, excluded = analysis.select_runs(runs)
    assert sorted(kept["run_id"]) == ["r2", "r7"]
    why = dict(zip(excluded["run_id"], excluded["reason"]))
    assert why == {"r1": "superseded by newer run r2 (same backbone, cell, seed, recipe)",
                   "r3": "status FAILED", "r4": "not a model run (entry point stage)",
                   "r5": "no pipi.seed tag", "r6": "status RUNNING"}


def test_runs_of_different_data_digests_are_refused(tmp_path):
    r1, d1 = local_runs(tmp_path / "x", {"a": [41]}, digest="1" * 64)
    r2, d2 = local_runs(tmp_path / "y", {"pi": [41]}, digest="2" * 64)
    runs = pd.concat([r1, r2], ignore_index=True)
    with pytest.raises(DataError, match=r"different data \(2 data digests.*pipi.data_digest"):
        analysis.check_single_dataset(runs)
    with pytest.raises(DataError, match="refusing to pair"):
        analysis.build_evidence(runs, {**d1, **d2})


def test_runs_with_different_class_lists_or_frames_are_refused(tmp_path):
    runs, dirs = local_runs(tmp_path, {"a": [41], "pi": [41]})
    pi = runs.index[runs["cell"] == "pi"][0]
    schema = dirs[runs.loc[pi, "run_id"]] / "schema.json"
    original = schema.read_text()
    bad = json.loads(original)
    bad["classes"] = sorted(bad["classes"], reverse=True)
    schema.write_text(json.dumps(bad))
    with pytest.raises(DataError, match="class list"):
        analysis.build_evidence(runs, dirs)
    schema.write_text(original)
    tagged = runs.copy()
    tagged.loc[pi, "evaluable_classes"] = json.dumps(["Erosion", "Ulcer"])
    with pytest.raises(DataError, match="different class lists in pipi.evaluable_classes"):
        analysis.build_evidence(tagged, dirs)
    test = dirs[runs.loc[pi, "run_id"]] / "test.parquet"
    df = pd.read_parquet(test)
    df.iloc[:-1].to_parquet(test)
    with pytest.raises(DataError, match="test frames differ"):
        analysis.build_evidence(runs, dirs)


# --------------------------------------------------------------------------- tidy and tests
def test_tidy_metrics_and_cross_seed_summary_match_sklearn(evidence):
    tidy = analysis.tidy_metrics(evidence)
    summary = analysis.aggregate_over_seeds(tidy).set_index("cell")
    y = evidence.labels
    for cell in ("a", "pi"):
        arm = evidence.arm("efficientnet_b0", cell)
        per_seed = [np.mean([roc_auc_score(y == k, p[:, k]) for k in EVALUABLE])
                    for p in arm.probs.astype(float)]
        row = summary.loc[cell]
        assert row["n_seeds"] == 3 and row["seeds"] == (41, 42, 43)
        assert row["run_ids"] == arm.run_ids
        assert row["mean"] == pytest.approx(np.mean(per_seed), abs=1e-12)
        assert row["sd"] == pytest.approx(np.std(per_seed, ddof=1), abs=1e-12)
    one = analysis.aggregate_over_seeds(tidy[tidy["seed"] == 41]).set_index("cell")
    assert math.isnan(one.loc["a", "sd"])


def test_compare_cells_statistics_against_independent_computations(evidence):
    an = analysis.Analysis(evidence, analysis.AggregateOptions(n_resamples=100))
    comps = analysis.compare_cells(an, baseline="a", cells=["a", "pi", "distill", "e_plus"],
                              family="test")
    assert [c.new for c in comps] == ["pi", "distill", "e_plus"]
    y = evidence.labels
    for c in comps:
        ra, na = evidence.arm(c.backbone, "a"), evidence.arm(c.backbone, c.new)
        assert c.seeds == tuple(sorted(set(ra.seeds) & set(na.seeds)))
        z = []
        for i, s in enumerate(c.seeds):
            d = delong_macro_test(y, ra.probs[ra.index(s)].astype(float),
                                  na.probs[na.index(s)].astype(float), classes=evidence.classes)
            assert c.delong_z[i] == pytest.approx(d.statistic, abs=1e-12)
            z.append(d.statistic)
        assert c.stouffer_z == pytest.approx(sum(z) / math.sqrt(len(z)), abs=1e-12)
        assert c.stouffer_p == pytest.approx(2 * stats.norm.sf(abs(c.stouffer_z)), abs=1e-12)
        d = c.deltas
        null = [np.mean(np.array(sg) * d) for sg in itertools.product([-1, 1], repeat=len(d))]
        assert c.sign_flip_exact
        assert c.sign_flip_p == pytest.approx(
            np.mean(np.abs(null) >= abs(d.mean()) - 1e-15), abs=1e-12)
    distill = comps[1]
    assert distill.seeds == (41, 42) and any("seeds [43]" in n for n in distill.notes)
    raw = np.array([c.sign_flip_p for c in comps])
    np.testing.assert_allclose([c.adjusted["sign_flip_bonferroni"] for c in comps],
                               np.minimum(1, 3 * raw))
    np.testing.assert_allclose([c.adjusted["sign_flip_bh"] for c in comps],
                               stats.false_discovery_control(raw, method="bh"))


# --------------------------------------------------------------------------- tables and files
def test_tables_report_missing_arms_and_seeds(report):
    cov = report.table("coverage")
    row = cov.data.set_index("cell").loc["distill"]
    assert row["seed_43"] == "" and "missing" in cov.display.to_string()
    assert "distill" in report.summary and "MISSING seeds [43]" in report.summary
    pf = report.table("per_frame")
    assert list(pf.data["cell"]) == ["a", "pi", "distill"]
    assert pf.data.set_index("cell").loc["distill", "n_paired"] == 2
    ec = report.table("eight_cell")
    assert ec.ok and "no runs" in ec.display.set_index("Cell").loc[analysis.cell_label("d"),
    "seeds"]
    assert "d (efficientnet_b0): no runs" in ec.notes
    for key in ("channel_train", "channel_infer", "transplant", "robustness", "cross_vendor"):
        t = report.table(key)
        assert t.status == "no runs" and t.notes
    assert "tables without runs" in report.summary and "arms with no runs" in report.summary


def test_channel_and_cross_backbone_tables(tmp_path):
    arms = {"a": [41, 42, 43], "pi": [41, 42, 43], "pblood_only": [41, 42, 43],
            "phi_only": [41, 42], "pi@zero_phi": [41, 42, 43], "pi@zero_both": [41, 42, 43]}
    r1, d1 = local_runs(tmp_path / "b0", arms)
    pi_runs = r1[r1["cell"] == "pi"].set_index("seed")["run_id"]
    variants = r1["cell"].str.startswith("pi@")
    r1.loc[variants, "base_run_id"] = r1.loc[variants, "seed"].map(pi_runs)
    r1.loc[variants & (r1["seed"] == 43) & (r1["cell"] == "pi@zero_phi"), "base_run_id"] = "x" * 32
    r2, d2 = local_runs(tmp_path / "r18", {"a": [41, 42], "pi": [41, 42]}, backbone="resnet18")
    ev = analysis.build_evidence(pd.concat([r1, r2], ignore_index=True), {**d1, **d2})
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=50, figures=False))
    for t in rep.tables:
        text = t.display.to_string()
        assert "nan" not in text.replace("n/a", ""), t.key
        assert len(t.display.columns) == len(set(t.display.columns)), t.key
    ct = rep.table("channel_train").data
    ct = ct[ct["reference"].isin(["", "pi"])].set_index("arm")
    macro = {c: ev.arm("efficientnet_b0", c).macro for c in arms}
    assert ct.loc["pblood_only", "delta"] == pytest.approx(
        np.mean(macro["pblood_only"] - macro["pi"]), abs=1e-12)
    assert ct.loc["phi_only", "n_paired"] == 2
    ci = rep.table("channel_infer")
    assert list(ci.data["arm"]) == ["pi", "pi@zero_phi", "pi@zero_pblood", "pi@zero_both",
                                    "pi@zero_both"]
    last = ci.data.iloc[-1]
    assert last["reference"] == "a" and last["delta"] == pytest.approx(
        np.mean(macro["pi@zero_both"] - macro["a"]), abs=1e-12)
    assert "pi@zero_pblood (efficientnet_b0): no runs" in ci.notes
    mismatch = [n for n in ci.notes if n.startswith("WARNING")]
    assert len(mismatch) == 1 and "pi@zero_phi seed 43" in mismatch[0] and "x" * 32 in mismatch[0]
    cb = rep.table("cross_backbone").data.set_index("backbone")
    assert cb.loc["resnet18", "n_paired"] == 2 and cb.loc["convnext_tiny", "n_paired"] == 0
    r18 = {c: ev.arm("resnet18", c).macro for c in ("a", "pi")}
    assert cb.loc["resnet18", "delta"] == pytest.approx(np.mean(r18["pi"] - r18["a"]), abs=1e-12)
    assert rep.table("per_frame").data["n_seeds"].tolist() == [3, 3, 0]


def test_per_class_table_uses_e_plus_vs_b_with_family_wise_markers(report, evidence):
    t = report.table("per_class")
    assert "cell (b) vs cell (e_plus)" in t.title
    d = t.data
    assert sorted(d["class"]) == sorted(CLASSES[k] for k in EVALUABLE)
    assert list(d["delta"]) == sorted(d["delta"], reverse=True)
    p = d["p"].to_numpy(float)
    np.testing.assert_allclose(d["p_bonferroni"], np.minimum(1, len(p) * p))
    np.testing.assert_allclose(d["p_bh"], stats.false_discovery_control(p, method="bh"))
    b, e = evidence.arm("efficientnet_b0", "b"), evidence.arm("efficientnet_b0", "e_plus")
    k = CLASSES.index(d["class"].iloc[0])
    want = np.mean([roc_auc_score(evidence.labels == k, e.probs[i][:, k]) -
                    roc_auc_score(evidence.labels == k, b.probs[i][:, k]) for i in range(3)])
    assert d["delta"].iloc[0] == pytest.approx(want, abs=1e-12)


def test_calibration_and_operating_points_tables(report, evidence):
    from pipi.stats import expected_calibration_error

    cal = report.table("calibration").data.set_index("cell")
    a = evidence.arm("efficientnet_b0", "a")
    eces = [expected_calibration_error(evidence.labels, p.astype(float), n_bins=15,
                                       classes=evidence.classes).statistic for p in a.probs]
    assert cal.loc["a", "ece_mean"] == pytest.approx(np.mean(eces), abs=1e-12)
    briers = [np.mean([np.mean((p[:, k] - (evidence.labels == k)) ** 2) for k in EVALUABLE])
              for p in a.probs.astype(float)]
    assert cal.loc["a", "brier_mean"] == pytest.approx(np.mean(briers), abs=1e-12)
    op = report.table("operating_points").data
    assert set(op["cell"]) == {"a", "pi", "b", "e_plus"}
    row = op[(op["cell"] == "a") & (op["class"] == CLASSES[EVALUABLE[0]])].iloc[0]
    assert row["auc_mean"] == pytest.approx(a.auc[:, 0].mean(), abs=1e-12)


def test_write_report_traces_every_number_to_run_ids(report, evidence, tmp_path):
    workflow.write_report(report, tmp_path, aggregate_run_id="agg123")
    doc = json.loads((tmp_path / "aggregate.json").read_text())
    run_ids = set(evidence.runs["run_id"])
    assert {r["run_id"] for r in doc["runs"]} == run_ids
    for key, arm in doc["arms"].items():
        b, c = key.split("/")
        assert arm["seeds"] == {str(s): r for s, r in evidence.arm(b, c).runs().items()}
    assert doc["arms"]["efficientnet_b0/distill"]["missing_seeds"] == [43]
    pf = doc["tables"]["per_frame"]
    assert pf["run_ids"][1]["pi"] == {"41": evidence.arm("efficientnet_b0", "pi").runs()[41],
                                      "42": evidence.arm("efficientnet_b0", "pi").runs()[42],
                                      "43": evidence.arm("efficientnet_b0", "pi").runs()[43]}
    seen = {r for t in doc["tables"].values() for row in t["run_ids"] for s in row.values()
            for r in s.values()}
    assert seen == run_ids
    csv = pd.read_csv(tmp_path / "tables" / "paired_tests.csv")
    assert csv["run_ids"].str.contains(evidence.arm("efficientnet_b0", "a").run_ids[0]).any()
    md = (tmp_path / "report.md").read_text()
    assert "## Per-frame test macro-AUC" in md and "| (a) RGB-only per-frame baseline |" in md
    for name in ("eight_cell", "roc", "pr", "per_class_lift", "per_patient_lift"):
        png = (tmp_path / "figures" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
        assert doc["figures"][name]["run_ids"]
    assert (tmp_path / "dashboard.html").stat().st_size > 50_000


def test_mean_roc_is_the_step_roc_of_the_micro_average(evidence):
    arm = evidence.arm("efficientnet_b0", "pi")
    tpr, _ = pstats.mean_roc(evidence.labels, arm.probs[:1], evidence.classes)
    y = (evidence.labels[:, None] == np.array(evidence.classes)).ravel()
    s = arm.probs[0][:, list(evidence.classes)].astype(float).ravel()
    thr = np.unique(s)
    fpr_t = np.array([((s >= t) & ~y).sum() for t in thr]) / (~y).sum()
    tpr_t = np.array([((s >= t) & y).sum() for t in thr]) / y.sum()
    for x in (0.0, 0.05, 0.1, 0.5, 1.0):
        i = int(np.argmin(np.abs(pstats.ROC_GRID - x)))
        best = max([0.0, *tpr_t[fpr_t <= pstats.ROC_GRID[i]]])  # best TPR within the FPR budget
        assert tpr[i] == pytest.approx(best, abs=1e-12)


# --------------------------------------------------------------------------- MLflow




def test_per_patient_table_gives_each_patient_a_seed_bca_interval(report, evidence):
    """Issue 42 item 5: each patient's cross-seed mean lift with its 95 % bootstrap interval
    (the seeds resampled), checked against scipy.stats.bootstrap (BCa, the same generator)
    on per-seed lifts recomputed here with scikit-learn."""
    from scipy.stats import bootstrap

    d = report.table("per_patient").data
    rows = d[d["classes_scored"] > 0]
    assert len(rows) and rows["lift_ci_low"].notna().all()
    for _, row in rows.head(3).iterrows():
        ra = evidence.arm("efficientnet_b0", row["reference"])
        na = evidence.arm("efficientnet_b0", row["new"])
        seeds = sorted(set(ra.seeds) & set(na.seeds))
        m = evidence.videos == row["video_id"]
        y = evidence.labels[m]
        cls = [k for k in evidence.classes if 0 < (y == k).sum() < y.size]

        def macro(arm, s):
            p = arm.probs[arm.index(s)][m]
            return np.mean([roc_auc_score(y == k, p[:, k]) for k in cls])

        lifts = np.array([macro(na, s) - macro(ra, s) for s in seeds])
        assert row["lift"] == pytest.approx(lifts.mean(), abs=1e-12)
        want = bootstrap((lifts,), np.mean, n_resamples=200, method="BCa",
                         confidence_level=0.95, rng=np.random.default_rng(0))
        assert row["lift_ci_low"] == pytest.approx(want.confidence_interval.low, abs=1e-9)
        assert row["lift_ci_high"] == pytest.approx(want.confidence_interval.high, abs=1e-9)
    shown = report.table("per_patient").display
    assert "95% CI (seeds, BCa)" in shown.columns
