"""Cross-vendor retention in `aggregate` (pipi.analysis.retention, pipi.report.retention) and the
GalKva input built from runs, checked against brute-force computations with scikit-learn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from fakes import study  # noqa: F401  (the module fixture)
from fakes import (
    GALAR_CLASSES,
    GALAR_Q,
    GALKVA,
    KVASIR_CLASSES,
    RETENTION_SEEDS,
    SYSTEMS,
    brute_macro,
    evidence,
    probs_for,
    run_row,
)

from pipi import analysis
from pipi.analysis.retention import (
    ALL_SYSTEMS,
    build_cross_vendor,
    galkva_runs,
    retention_rows,
    split_galar_runs,
)
from pipi.errors import DataError
from pipi.galkva import (
    MethodInfo,
    Submitter,
    build_submission,
    recompute,
    retention_band,
    validate_submission,
)
from pipi.predictions import PROB_COLUMNS, predictions_frame, write_predictions
from pipi.report import build_report

#: Signal on the true class: Kvasir (a, pi); Galar per capsule system (a, pi).
SEEDS = RETENTION_SEEDS


def brute_deltas(study, dataset, classes, restrict, subset=None):
    df = study["kv"] if dataset == "kvasir" else study["ga"]
    m = np.ones(len(df), bool) if subset is None else (df["capsule_system"] == subset).to_numpy()
    y = df["class_index"].to_numpy()
    if restrict:
        m = m & np.isin(y, classes)
    # frames in the order of the predictions on disk (evidence sorts them; AUC does not care)
    return np.array([brute_macro(y[m], study["probs"][(dataset, "pi", s)][m], classes)
                     - brute_macro(y[m], study["probs"][(dataset, "a", s)][m], classes)
                     for s in SEEDS])


def test_galar_children_are_kept_out_of_the_kvasir_arms(study):
    kruns, gruns = split_galar_runs(study["runs"])
    assert set(gruns["study"]) == {"galar"} and "galar" not in set(kruns["study"])
    ev, cv, _ = evidence(study)
    assert set(ev.arms) == {("efficientnet_b0", "a"), ("efficientnet_b0", "pi")}
    assert cv.arm("efficientnet_b0", "pi").seeds == SEEDS
    assert cv.arm("efficientnet_b0", "pi").sources() == ev.arm("efficientnet_b0", "pi").runs()
    assert sorted(set(cv.systems)) == sorted(SYSTEMS)


def test_retention_rows_match_brute_force_deltas_ratio_and_band(study):
    ev, cv, _ = evidence(study)
    rows = retention_rows(ev, cv, n_resamples=60, seed=3)
    keys = {(r.class_set, r.subset) for r in rows}
    assert keys == {(cs, s) for cs in ("galkva", "all") for s in (ALL_SYSTEMS, *sorted(SYSTEMS))}
    for r in rows:
        restrict = r.class_set == "galkva"
        kcls, gcls = (GALKVA, GALKVA) if restrict else (KVASIR_CLASSES, GALAR_CLASSES)
        sub = None if r.subset == ALL_SYSTEMS else r.subset
        dk = brute_deltas(study, "kvasir", kcls, restrict)
        dg = brute_deltas(study, "galar", gcls, restrict, sub)
        np.testing.assert_allclose(r.kvasir.deltas, dk, atol=1e-6)
        np.testing.assert_allclose(r.galar.deltas, dg, atol=1e-6)
        np.testing.assert_allclose(r.per_seed_ratio, dg / dk, rtol=1e-5)
        assert r.retention.value == pytest.approx(dg.mean() / dk.mean(), rel=1e-5)
        assert r.retention.band == retention_band(dg.mean() / dk.mean())
        ci = r.retention.confidence_interval
        assert ci.low <= r.retention.value <= ci.high or r.subset != ALL_SYSTEMS
        # Kvasir's lift is clear here: a stable ratio whose CI comes from both bootstraps
        assert r.retention.stable and r.kvasir.bootstrap.confidence_interval.low > 0
        ratio = r.galar.distribution / r.kvasir.distribution
        assert ci.low == pytest.approx(np.quantile(ratio, 0.025))
        assert r.kvasir.bootstrap.unit == "videos" == r.galar.bootstrap.unit
    # the PillCam lift transfers better than the Olympus one (built into the data)
    by = {r.subset: r.retention.value for r in rows if r.class_set == "galkva"}
    assert by["PillCam SB3"] > by["Olympus"]


def test_children_of_another_kvasir_run_are_excluded_with_the_reason(study):
    runs = study["runs"].copy()
    i = runs.index[runs["run_id"] == "gpi42".ljust(32, "0")][0]
    runs.loc[i, "base_run_id"] = "f" * 32
    ev, cv, gout = evidence(study, runs)
    assert cv.arm("efficientnet_b0", "pi").seeds == (41, 43)
    why = gout.set_index("run_id").loc["gpi42".ljust(32, "0"), "reason"]
    assert f"it scored run {'f' * 32}, not the aggregated Kvasir run" in why


def test_children_that_scored_other_frames_are_refused(study, tmp_path):
    runs, dirs = study["runs"].copy(), dict(study["dirs"])
    gid = "ga41".ljust(32, "0")
    df = pd.read_parquet(dirs[gid] / "test.parquet").iloc[:-20]
    dirs[gid] = write_predictions({"test": df}, tmp_path / gid)
    kruns, gruns = split_galar_runs(runs)
    kept, _ = analysis.select_runs(kruns)
    ev = analysis.build_evidence(kept, dirs)
    with pytest.raises(DataError, match="scored different Galar frames"):
        build_cross_vendor(analysis.select_runs(gruns)[0], dirs, ev)


def test_report_tables_with_and_without_galar_runs(study):
    ev, cv, _ = evidence(study)
    opts = analysis.AggregateOptions(n_resamples=100, figures=False)
    rep = build_report(replace(ev, cross_vendor=cv), opts)
    t = rep.table("cross_vendor")
    assert t.ok and len(t.data) == 6 and set(t.data["band"]) <= {
        "Strong", "Positive", "Partial", "Null", "Negative"}
    row = t.data[(t.data["class_set"] == "galkva") & (t.data["capsule_system"] == ALL_SYSTEMS)]
    assert row["retention"].iloc[0] == pytest.approx(row["galar_delta"].iloc[0]
                                                     / row["kvasir_delta"].iloc[0])
    assert row["retention_ci_low"].iloc[0] < row["retention_ci_high"].iloc[0]
    assert t.run_ids[0]["galar pi"][41] == "gpi41".ljust(32, "0")
    seeds = rep.table("cross_vendor_seeds")
    assert len(seeds.data) == 6 * len(SEEDS)
    plain = build_report(ev, opts)
    assert plain.table("cross_vendor").status == "no runs"
    assert "-e galar" in plain.table("cross_vendor").notes[0]


def test_galkva_input_from_runs_gives_a_valid_submission_with_the_same_retention(study):
    ev, cv, _ = evidence(study)
    runs = galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a", method="pi")
    rec = recompute(runs, n_resamples=200, rng=0)
    row = next(r for r in retention_rows(ev, cv, n_resamples=100)
               if r.class_set == "galkva" and r.subset == ALL_SYSTEMS)
    assert rec.retention.value == pytest.approx(row.retention.value, rel=1e-5)
    doc = build_submission(rec, submitter=Submitter("A. Tester", "Lab", "a@example.org"),
                           method=MethodInfo("pipi pi vs a", "a long enough description here"))
    assert validate_submission(doc) == []
    assert doc["provenance"]["runs"]["galar"]["method"]["42"] == "gpi42".ljust(32, "0")
    assert doc["provenance"]["runs"]["kvasir"]["baseline"]["41"] == "ka41".ljust(32, "0")
    with pytest.raises(DataError, match="galar distill"):
        galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a", method="distill")
    assert PROB_COLUMNS[0] in runs["galar"].method[0].predictions


# --------------------------------------------------------------------------- calibrated prior
def with_calibrated_children(study, tmp):
    """The study plus `galar -P prior_params=` children of the pi runs (variant calibrated),
    whose prior makes pi better on Galar; -> (runs, dirs, their probabilities by seed)."""
    ga, rows, dirs, probs = study["ga"], [], dict(study["dirs"]), {}
    for s in SEEDS:
        cid, kid = f"gcpi{s}".ljust(32, "0"), f"kpi{s}".ljust(32, "0")
        q = ga["capsule_system"].map(lambda x: GALAR_Q[x]["pi"] + 0.5).to_numpy()
        probs[s] = probs_for(ga, q, 5000 + s)
        dirs[cid] = write_predictions({"test": predictions_frame(ga, probs[s])}, tmp / cid)
        row = run_row(cid, "pi@calibrated", s, digest="g" * 64, study="galar", base=kid,
                      params={"galar.fold": "evaluation"}, entry="galar")
        rows.append({**row, "variant": "calibrated", "start_time": 100 + s})
    runs = pd.concat([study["runs"], pd.DataFrame(rows)], ignore_index=True)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs, probs


def test_zero_shot_and_calibrated_retention_side_by_side(study, tmp_path):
    runs, dirs, cal_probs = with_calibrated_children(study, tmp_path)
    kruns, gruns = split_galar_runs(runs)
    kept, _ = analysis.select_runs(kruns)
    ev = analysis.build_evidence(kept, dirs)
    gkept, _ = analysis.select_runs(gruns)
    # the zero-shot table never takes a calibrated child, and says why
    cv, gout = build_cross_vendor(gkept, dirs, ev)
    assert cv.arm("efficientnet_b0", "pi").run_ids == tuple(
        f"gpi{s}".ljust(32, "0") for s in SEEDS)
    why = gout.set_index("run_id").loc["gcpi41".ljust(32, "0"), "reason"]
    assert "variant calibrated, not zero_shot" in why
    # the calibrated side: calibrated pi against the zero-shot RGB baseline
    cal, _ = build_cross_vendor(gkept, dirs, ev, variant="calibrated")
    assert cal.tuned == {("efficientnet_b0", "pi")}
    assert cal.arm("efficientnet_b0", "pi").run_ids == tuple(
        f"gcpi{s}".ljust(32, "0") for s in SEEDS)
    assert cal.arm("efficientnet_b0", "a").run_ids == tuple(f"ga{s}".ljust(32, "0") for s in SEEDS)

    opts = analysis.AggregateOptions(n_resamples=100, figures=False)
    rep = build_report(replace(ev, cross_vendor=cv, cross_vendor_calibrated=cal), opts)
    zero, side = rep.table("cross_vendor").data, rep.table("cross_vendor_calibrated")
    assert side.ok and len(side.data) == len(zero) == 6
    key = ["class_set", "capsule_system"]
    both = side.data.merge(zero, on=key, suffixes=("", "_zero_table"))
    np.testing.assert_allclose(both["zero_shot_retention"], both["retention"])
    np.testing.assert_allclose(both["kvasir_delta"], both["kvasir_delta_zero_table"])
    # the calibrated Δ_Galar against scikit-learn, on the GalKva frames of all systems
    y = study["ga"]["class_index"].to_numpy()
    m = np.isin(y, GALKVA)
    brute = np.mean([brute_macro(y[m], cal_probs[s][m], GALKVA)
                     - brute_macro(y[m], study["probs"][("galar", "a", s)][m], GALKVA)
                     for s in SEEDS])
    row = side.data.set_index(key).loc[("galkva", ALL_SYSTEMS)]
    assert row["calibrated_galar_delta"] == pytest.approx(brute, abs=1e-9)
    assert row["calibrated_retention"] == pytest.approx(brute / row["kvasir_delta"])
    assert row["calibrated_galar_delta"] > row["zero_shot_galar_delta"]  # the better prior
    assert side.run_ids[0]["galar pi (calibrated)"][41] == "gcpi41".ljust(32, "0")
    assert "retention calibrated [95% CI]" in side.display.columns
    # without calibrated children the table says how to make them
    plain = build_report(replace(ev, cross_vendor=cv), opts).table("cross_vendor_calibrated")
    assert plain.status == "no runs" and "-e calibrate" in plain.notes[0]
