"""`aggregate`: run selection, evidence, the video bootstrap, comparisons, tables, and the
entry point against a real `mlflow server` (generated predictions in the v1 format, plus a
slow integration test on real `train` runs)."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats
from sklearn.metrics import roc_auc_score

from pipi import analysis
from pipi import stats as pstats
from pipi.classes import CLASSES
from pipi.errors import DataError
from pipi.report import build_report
from pipi.stats import delong_macro_test, macro_auc_delta_bootstrap
from pipi.training.frames import predictions_frame, write_predictions
from pipi.workflows import aggregate as workflow

ROOT = Path(__file__).resolve().parent.parent
EVALUABLE = list(range(1, 12))  # 11 classes, as in the paper's split


# --------------------------------------------------------------------------- generated data
def make_frames(n_videos: int, per_video: int, seed: int, classes=EVALUABLE, split="test"):
    """A split's frame index: videos with their own class mix; every class in video 0."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(n_videos):
        lab = rng.choice(classes, size=per_video, p=rng.dirichlet(np.ones(len(classes))))
        if v == 0:
            lab[: len(classes)] = classes
        rows += [{"path": f"{split}/{CLASSES[k]}/{split}{v:02d}_{f:04d}.jpg",
                  "video_id": f"{split}{v:02d}", "frame_number": f, "class_index": int(k),
                  "class": CLASSES[k]} for f, k in enumerate(lab)]
    return pd.DataFrame(rows)


def make_probs(frames: pd.DataFrame, quality: float, seed: int) -> np.ndarray:
    """Softmax of noise plus `quality` on the true class (higher quality = better AUC)."""
    rng = np.random.default_rng(seed)
    y = frames["class_index"].to_numpy()
    logits = rng.normal(size=(len(y), 14)) + quality * np.eye(14)[y]
    return special.softmax(logits, axis=1)


def write_run(folder: Path, test: pd.DataFrame, val: pd.DataFrame, quality: float,
              seed: int) -> Path:
    """A predictions/ folder in the exact v1 format `train` writes."""
    preds = {"test": predictions_frame(test, make_probs(test, quality, seed)),
             "val": predictions_frame(val, make_probs(val, quality, seed + 10_000))}
    return write_predictions(preds, folder)


QUALITY = {"a": 1.0, "pi": 1.25, "distill": 1.1, "b": 1.2, "e_plus": 1.5}


def local_runs(tmp: Path, arms: dict[str, list[int]], *, backbone="efficientnet_b0",
               digest="d" * 64, n_videos=7, per_video=60):
    """(runs frame as `load_runs` returns it, run id -> predictions folder)."""
    test, val = make_frames(n_videos, per_video, 0), make_frames(3, 40, 1, split="val")
    rows, dirs = [], {}
    for ci, (cell, seeds) in enumerate(arms.items()):
        for s in seeds:
            rid = f"{cell}-{backbone}-{s}".replace("_", "")[:32].ljust(32, "0")
            dirs[rid] = write_run(tmp / rid / "predictions", test, val, QUALITY.get(cell, 1.1),
                                  1000 * ci + s)
            rows.append({"run_id": rid, "experiment_id": "1", "run_name": rid,
                         "status": "FINISHED", "start_time": 1000 * ci + s,
                         "entry_point": "train", "cell": cell, "backbone": backbone, "seed": s,
                         "data_digest": digest, "dataset": "kvasir-capsule", "study": "",
                         "variant": "", "base_run_id": "", "parent_run_id": "",
                         "evaluable_classes": json.dumps([CLASSES[k] for k in EVALUABLE]),
                         "code_version": "", "test_macro_auc": float("nan")})
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agg")
    runs, dirs = local_runs(tmp, {"a": [41, 42, 43], "pi": [41, 42, 43], "distill": [41, 42],
                                  "b": [41, 42, 43], "e_plus": [41, 42, 43]})
    kept, excluded = analysis.select_runs(runs)
    return analysis.build_evidence(kept, dirs, excluded=excluded, experiment="exp", experiment_id="1",
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


def test_video_bootstrap_equals_the_stats_package_resample_by_resample(evidence):
    boot = video_bootstrap(evidence, n_resamples=300, rng=7)
    a, p = evidence.arm("efficientnet_b0", "a"), evidence.arm("efficientnet_b0", "pi")
    seeds = [41, 42, 43]
    for classes in (None, [evidence.classes[2]]):
        got = boot.delta(*pairs("efficientnet_b0", "a", "pi", seeds), classes=classes)
        ref = macro_auc_delta_bootstrap(
            evidence.labels, a.probs.astype(float), p.probs.astype(float),
            classes=classes or evidence.classes, clusters=evidence.videos, n_resamples=300,
            rng=7)
        b = ref.bootstrap
        assert got.unit == "videos" and got.n_units == 7
        assert got.statistic == pytest.approx(ref.statistic, abs=1e-12)
        assert got.pvalue == ref.pvalue
        np.testing.assert_allclose(got.percentile, b.percentile_interval, atol=1e-12)
        np.testing.assert_allclose(got.bca, b.bca_interval, atol=1e-12)
        assert got.z0 == pytest.approx(b.bias_correction, abs=1e-12)
        assert got.acceleration == pytest.approx(b.acceleration, abs=1e-9)


def test_single_video_falls_back_to_a_stratified_frame_bootstrap(tmp_path):
    runs, dirs = local_runs(tmp_path, {"a": [41, 42], "pi": [41, 42]}, n_videos=1,
                            per_video=200)
    ev = analysis.build_evidence(analysis.select_runs(runs)[0], dirs)
    got = video_bootstrap(ev, n_resamples=100, rng=1).delta(
        *pairs("efficientnet_b0", "a", "pi", [41, 42]))
    assert got.unit == "frames (stratified by class)"
    ref = macro_auc_delta_bootstrap(ev.labels, ev.arm("efficientnet_b0", "a").probs.astype(float),
                                    ev.arm("efficientnet_b0", "pi").probs.astype(float),
                                    classes=ev.classes, strata=ev.labels, n_resamples=100, rng=1)
    assert got.bca == ref.bootstrap.bca_interval


# --------------------------------------------------------------------------- selection, refusal
def _runs_frame(rows):
    from pipi.tracking import RUN_COLUMNS

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
    assert ec.ok and "no runs" in ec.display.set_index("Cell").loc[analysis.cell_label("d"), "seeds"]
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
    ct = rep.table("channel_train").data.set_index("arm")
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
def log_fake_run(client, exp_id: str, folder: Path | None, *, cell: str, seed: int,
                 digest: str = "d" * 64, status: str = "FINISHED",
                 backbone: str = "efficientnet_b0", entry_point: str = "train") -> str:
    """A run with the run contract's tags and (optionally) a predictions artifact."""
    from pipi import tracking

    tags = {tracking.TAG_ENTRY_POINT: entry_point, tracking.TAG_DATA_DIGEST: digest}
    if cell:
        tags |= {tracking.TAG_CELL: cell, tracking.TAG_BACKBONE: backbone,
                 tracking.TAG_SEED: str(seed),
                 "pipi.evaluable_classes": json.dumps([CLASSES[k] for k in EVALUABLE])}
    run = client.create_run(exp_id, tags=tags, run_name=f"{cell}-s{seed}")
    rid = run.info.run_id
    if folder is not None:
        client.log_artifacts(rid, str(folder), "predictions")
        df = pd.read_parquet(folder / "test.parquet")
        probs = df[[f"prob_{i:02d}" for i in range(14)]].to_numpy(float)
        auc = np.mean([roc_auc_score(df["label"] == k, probs[:, k]) for k in EVALUABLE])
        client.log_metric(rid, "test/macro_auc", float(auc))
    client.set_terminated(rid, status)
    return rid


@pytest.fixture(scope="module")
def server_runs(mlflow_server, tmp_path_factory):
    """An experiment with 2 arms x 3 seeds, a FAILED run, a run without predictions, a stage run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server.uri)
    tmp_path = tmp_path_factory.mktemp("server-runs")
    name = f"agg-{tmp_path.name}"
    exp_id = client.create_experiment(name)
    test, val = make_frames(5, 40, 0), make_frames(2, 30, 1, split="val")
    ids = {}
    for cell in ("a", "pi"):
        for s in (41, 42, 43):
            folder = write_run(tmp_path / f"{cell}{s}", test, val, QUALITY[cell], s)
            ids[(cell, s)] = log_fake_run(client, exp_id, folder, cell=cell, seed=s)
    ids["failed"] = log_fake_run(client, exp_id, write_run(tmp_path / "f", test, val, 1.0, 9),
                                 cell="pi", seed=44, status="FAILED")
    ids["nopred"] = log_fake_run(client, exp_id, None, cell="distill", seed=41)
    ids["stage"] = log_fake_run(client, exp_id, None, cell="", seed=0, entry_point="stage")
    return name, exp_id, ids


@pytest.mark.slow  # starts an mlflow server
def test_load_runs_reads_every_page(server_runs, tracking):
    from pipi import tracking

    name, _, ids = server_runs
    runs = tracking.load_runs(name, page_size=2)
    assert sorted(runs["run_id"]) == sorted(ids.values())
    assert list(runs.columns) == list(tracking.RUN_COLUMNS)
    pi42 = runs.set_index("run_id").loc[ids[("pi", 42)]]
    assert (pi42["cell"], pi42["seed"], pi42["status"]) == ("pi", 42, "FINISHED")
    sub = tracking.load_runs(name, "tags.`pipi.cell` = 'a'", page_size=1)
    assert sorted(sub["run_id"]) == sorted(ids[("a", s)] for s in (41, 42, 43))
    with pytest.raises(Exception, match="not found"):
        tracking.load_runs("no-such-experiment")


@pytest.mark.slow  # starts an mlflow server
def test_predictions_are_downloaded_once_per_run(server_runs, tracking, tmp_path, monkeypatch):
    from pipi import tracking

    _, _, ids = server_runs
    calls = []
    real = tracking.download_artifact
    monkeypatch.setattr("pipi.tracking.queries.download_artifact",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    first = tracking.download_predictions(ids[("a", 41)], tmp_path / "cache")
    again = tracking.download_predictions(ids[("a", 41)], tmp_path / "cache")
    assert first == again == tmp_path / "cache" / ids[("a", 41)] / "predictions"
    assert len(calls) == 1 and (first / "test.parquet").is_file()


@pytest.mark.slow  # starts an mlflow server
def test_run_aggregate_logs_every_output_and_writes_the_same_locally(server_runs, tracking,
                                                                   tmp_path):
    from mlflow.tracking import MlflowClient

    from pipi import tracking

    name, exp_id, ids = server_runs
    out = tmp_path / "out"
    res = workflow.run_aggregate(experiment=name, out=out, cache_dir=tmp_path / "cache",
                            options=analysis.AggregateOptions(n_resamples=100))
    client = MlflowClient()
    run = client.get_run(res.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[tracking.TAG_ENTRY_POINT] == "aggregate"

    def listing(path=None):
        files = []
        for f in client.list_artifacts(res.run_id, path):
            files += listing(f.path) if f.is_dir else [f.path]
        return files

    local = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(listing()) == [f for f in local if f != workflow.MARKER]
    assert json.loads((out / workflow.MARKER).read_text())["files"] == sorted(listing())
    assert {"dashboard.html", "aggregate.json", "report.md", "tables/per_frame.csv",
            "figures/roc.png"} <= set(local)
    doc = json.loads((out / "aggregate.json").read_text())
    assert doc["aggregate_run_id"] == res.run_id
    assert doc["arms"]["efficientnet_b0/pi"]["seeds"] == {str(s): ids[("pi", s)]
                                                         for s in (41, 42, 43)}
    why = {e["run_id"]: e["reason"] for e in doc["excluded"]}
    assert why[ids["failed"]] == "status FAILED"
    assert why[ids["nopred"]] == "no predictions artifact"
    assert why[ids["stage"]].startswith("not a model run")
    pf = doc["tables"]["per_frame"]["rows"]
    assert [r["cell"] for r in pf] == ["a", "pi", "distill"] and pf[2]["n_seeds"] == 0
    logged = {r: client.get_run(r).data.metrics["test/macro_auc"] for r in
              (ids[("a", s)] for s in (41, 42, 43))}
    runs_rows = {r["run_id"]: r for r in doc["tables"]["runs"]["rows"]}
    for rid, val in logged.items():
        assert runs_rows[rid]["macro_auc"] == pytest.approx(val, abs=1e-9)
    html = (out / "dashboard.html").read_text()
    assert f"{tracking.current_tracking_uri()}/#/experiments/{exp_id}/runs/{ids[('pi', 41)]}" in html
    assert "arms with no runs" in res.summary and "distill (efficientnet_b0) (" in res.summary


@pytest.mark.slow  # starts an mlflow server
def test_cli_refuses_mixed_digests_with_one_line(tracking, tmp_path):
    from click.testing import CliRunner
    from mlflow.tracking import MlflowClient

    from pipi.cli import ENTRY_POINTS

    client = MlflowClient(tracking)
    name = f"mixed-{tmp_path.name}"
    exp_id = client.create_experiment(name)
    test, val = make_frames(3, 30, 0), make_frames(2, 30, 1, split="val")
    log_fake_run(client, exp_id, write_run(tmp_path / "x", test, val, 1, 1), cell="a", seed=41,
                 digest="1" * 64)
    log_fake_run(client, exp_id, write_run(tmp_path / "y", test, val, 1, 2), cell="pi", seed=41,
                 digest="2" * 64)
    r = CliRunner().invoke(ENTRY_POINTS["aggregate"], ["--experiment", name])
    assert r.exit_code == 2
    err = r.output.strip()
    assert err.count("\n") == 0 and "refusing to pair runs trained on different data" in err


@pytest.mark.slow
def test_aggregate_real_train_runs_through_mlflow_run(tracking, tiny_staged, tmp_path):
    """Cells a and pi, 2 seeds, real `train` runs; then `mlflow run . -e aggregate`."""
    from pipi.config import make_config
    from pipi.workflows import train as train_workflow

    exp = f"real-{tmp_path.name}"
    summaries = {}
    for cell in ("a", "pi"):
        for seed in (41, 42):
            cfg = make_config(cell=cell, profile="smoke", weights="none", seed=seed)
            summaries[(cell, seed)] = train_workflow.train(
                cfg, data=str(tiny_staged), experiment=exp, register=False, progress=False)
    out = tmp_path / "out"
    # mlflow.set_experiment exports MLFLOW_EXPERIMENT_ID, which `mlflow run` would read
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID")}
    env |= {"MLFLOW_TRACKING_URI": tracking,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PIPI_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", "aggregate",
         "--env-manager", "local", "--experiment-name", exp, "-P", f"experiment={exp}",
         "-P", f"out={out}"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
        check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "aggregate.json").read_text())
    pf = {row["cell"]: row for row in doc["tables"]["per_frame"]["rows"]}
    assert pf["a"]["n_seeds"] == 2 and pf["pi"]["n_seeds"] == 2 and pf["distill"]["n_seeds"] == 0
    for (cell, seed), s in summaries.items():
        assert doc["arms"][f"efficientnet_b0/{cell}"]["seeds"][str(seed)] == s["run_id"]
        row = next(x for x in doc["tables"]["runs"]["rows"] if x["run_id"] == s["run_id"])
        assert row["macro_auc"] == pytest.approx(s["test_macro_auc"], abs=1e-6)
    pair = doc["tables"]["paired_tests"]["rows"][0]
    assert (pair["reference"], pair["new"], pair["n_seeds"]) == ("a", "pi", 2)
    assert (out / "dashboard.html").is_file() and (out / "figures" / "eight_cell.png").is_file()
    # a run of another recipe (the published code's checkpoint selection) joins arm a: refused,
    # and the filter the message suggests is valid MLflow search syntax that selects one recipe
    cfg = make_config(cell="a", profile="smoke", weights="none", seed=41,
                      select_metric="macro_f1")
    train_workflow.train(cfg, data=str(tiny_staged), experiment=exp, register=False,
                         progress=False)
    with pytest.raises(DataError, match="efficientnet_b0/a has runs of 2 recipes") as err:
        workflow.run_aggregate(experiment=exp, cache_dir=tmp_path / "cache", log_run=False,
                               options=analysis.AggregateOptions(n_resamples=20, figures=False))
    flt = str(err.value).split('--filter "')[1].rstrip('"')
    res = workflow.run_aggregate(experiment=exp, filter_string=flt, cache_dir=tmp_path / "cache",
                                 log_run=False,
                                 options=analysis.AggregateOptions(n_resamples=20, figures=False))
    assert res.report.meta["arms"]["efficientnet_b0/a"]["seeds"] == {
        41: summaries[("a", 41)]["run_id"], 42: summaries[("a", 42)]["run_id"]}
