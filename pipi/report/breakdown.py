"""Breakdowns of one comparison: per class, per patient, operating points, calibration."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from pipi.analysis import (
    ABLATION_CELLS,
    BREAKDOWN_PAIRS,
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    PER_FRAME_CELLS,
    Analysis,
    cell_label,
    collect_warnings,
    compare_pairs,
    missing_notes,
    seeds_text,
)
from pipi.classes import CLASSES
from pipi.report.rows import breakdown_pair, no_runs, present_pairs
from pipi.report.tables import Table, fmt_auc, fmt_ci, fmt_delta, fmt_mean_sd, fmt_p, fmt_z
from pipi.stats import (
    Family,
    adjust_families,
    operating_points,
    per_class_auc,
    sign_flip_test,
    significance_marker,
    stouffer_combine,
)

__all__ = ["calibration_table", "operating_points_table", "per_class_table", "per_patient_table"]


def per_class_table(an: Analysis) -> Table:
    """Paper Table per-class: AUC per class of two arms, delta with Bonferroni/BH markers."""
    ev, b = an.evidence, an.headline
    pair = breakdown_pair(an)
    if pair is None:
        return no_runs("per_class", f"Per-class test AUC ({b})", "tab:perclass",
                        f"none of the pairs {BREAKDOWN_PAIRS} has runs of both arms")
    ref, new = pair
    notes: list[str] = []
    comp = compare_pairs(an, [pair], family="per_class_macro", backbone=b, notes=notes)[0]
    ra, na = ev.arm(b, ref), ev.arm(b, new)
    ri = [ra.index(s) for s in comp.seeds]
    ni = [na.index(s) for s in comp.seeds]
    a_ref, a_new = ra.auc[ri], na.auc[ni]            # (S, K)
    d = a_new - a_ref
    rows = []
    with collect_warnings(notes):
        for j, k in enumerate(ev.classes):
            z = comp.per_class_z[:, j]
            st = stouffer_combine(z) if np.isfinite(z).all() else None
            sf = sign_flip_test(d[:, j], n_resamples=an.options.n_permutations,
                                rng=an.options.seed)
            bt = an.delta_ci(b, ref, new, comp.seeds, classes=[k])
            rows.append({"class": CLASSES[k], "ref_mean": a_ref[:, j].mean(),
                         "ref_sd": a_ref[:, j].std(ddof=1) if len(ri) > 1 else float("nan"),
                         "new_mean": a_new[:, j].mean(),
                         "new_sd": a_new[:, j].std(ddof=1) if len(ri) > 1 else float("nan"),
                         "delta": d[:, j].mean(), "n_positive": int((d[:, j] > 0).sum()),
                         "n_seeds": len(ri),
                         "stouffer_z": st.statistic if st else float("nan"),
                         "p": st.pvalue if st else float("nan"), "sign_flip_p": sf.pvalue,
                         "ci_percentile_low": bt.percentile.low,
                         "ci_percentile_high": bt.percentile.high,
                         "ci_bca_low": bt.bca.low, "ci_bca_high": bt.bca.high})
    data = pd.DataFrame(rows)
    fam = {r["class"]: r["p"] for r in rows}
    for method, col in (("bonferroni", "p_bonferroni"), ("bh", "p_bh")):
        if np.isnan(np.asarray(list(fam.values()), float)).all():
            data[col] = np.nan
            continue
        res = adjust_families([Family(f"per_class/{b}/{ref}_vs_{new}", fam)], method=method)
        data[col] = list(next(iter(res.values())).adjusted)
    data["marker_bonferroni"] = significance_marker(data["p_bonferroni"].to_numpy(float))
    data["marker_bh"] = significance_marker(data["p_bh"].to_numpy(float))
    data = data.sort_values("delta", ascending=False, kind="stable").reset_index(drop=True)
    display = pd.DataFrame({
        "Class": data["class"],
        f"cell ({ref})": [fmt_mean_sd(m, s) for m, s in zip(data["ref_mean"], data["ref_sd"])],
        f"cell ({new})": [fmt_mean_sd(m, s) for m, s in zip(data["new_mean"], data["new_sd"])],
        "Δ (Bonferroni)": [fmt_delta(x) + m for x, m in zip(data["delta"],
                                                               data["marker_bonferroni"])],
        "k/n +": [f"{p}/{n}" for p, n in zip(data["n_positive"], data["n_seeds"])],
        "Stouffer z": data["stouffer_z"].map(fmt_z),
        "p (Bonf / BH)": [f"{fmt_p(p)} ({fmt_p(pb)} / {fmt_p(ph)}{mb})" for p, pb, ph, mb in
                          zip(data["p"], data["p_bonferroni"], data["p_bh"], data["marker_bh"])],
        "sign-flip p": data["sign_flip_p"].map(fmt_p),
        "95% BCa CI (videos)": [fmt_ci(lo, hi) for lo, hi in zip(data["ci_bca_low"],
                                                                  data["ci_bca_high"])]})
    ids = tuple(comp.run_ids() for _ in range(len(data)))
    notes = [(f"cell ({ref}) vs cell ({new}) over seeds {seeds_text(comp.seeds)}; AUC mean ± sd "
              "over seeds; Δ = mean over seeds of the per-class delta."),
             ("p: per-class paired DeLong z per seed combined by Stouffer (assumes independent "
              f"seeds); adjusted over the {len(ev.classes)} classes (one family) by Bonferroni "
              "(markers on Δ) and BH (marker after BH p): * < 0.05, ** < 0.01, *** < 0.001."),
             *comp.notes, *notes]
    return Table("per_class", f"Per-class test AUC: cell ({ref}) vs cell ({new}) ({b})", data,
                 display, ids, tuple(notes), paper="tab:perclass")


def per_patient_table(an: Analysis) -> Table:
    """Per-patient (per-video) macro-AUC lift, averaged over seeds, for the breakdown pairs."""
    ev, b = an.evidence, an.headline
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS, b)
    title = f"Per-patient lift (per-video macro-AUC, mean over seeds) ({b})"
    if not pairs:
        return no_runs("per_patient", title, "fig:per-patient",
                        f"none of the pairs {BREAKDOWN_PAIRS} has runs of both arms")
    rows, ids = [], []
    for ref, new in pairs:
        ra, na = ev.arm(b, ref), ev.arm(b, new)
        seeds = sorted(set(ra.seeds) & set(na.seeds))
        for vid in sorted(set(ev.videos)):
            m = ev.videos == vid
            y = ev.labels[m]
            cls = [k for k in ev.classes if 0 < (y == k).sum() < y.size]
            if cls:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = np.array([np.mean(per_class_auc(y, ra.probs[ra.index(s)][m], classes=cls))
                                  for s in seeds])
                    n = np.array([np.mean(per_class_auc(y, na.probs[na.index(s)][m], classes=cls))
                                  for s in seeds])
            else:
                r = n = np.full(len(seeds), np.nan)
            rows.append({"reference": ref, "new": new, "video_id": vid, "n_frames": int(m.sum()),
                         "classes_scored": len(cls), "n_seeds": len(seeds),
                         "ref_macro_auc": float(np.mean(r)), "new_macro_auc": float(np.mean(n)),
                         "lift": float(np.mean(n - r)), "n_positive": int(((n - r) > 0).sum())})
            ids.append({ref: {s: ra.runs()[s] for s in seeds}, new: {s: na.runs()[s] for s in seeds}})
    data = pd.DataFrame(rows)
    order = data.sort_values(["reference", "new", "lift"], ascending=[True, True, False],
                             kind="stable").index
    data = data.loc[order].reset_index(drop=True)
    ids = tuple(ids[i] for i in order)
    display = pd.DataFrame({
        "Comparison": [f"({r}) vs ({n})" for r, n in zip(data["reference"], data["new"])],
        "patient (video)": data["video_id"], "frames": data["n_frames"],
        "classes scored": data["classes_scored"],
        "ref macro-AUC": data["ref_macro_auc"].map(fmt_auc),
        "new macro-AUC": data["new_macro_auc"].map(fmt_auc),
        "lift": [fmt_delta(x) if c else "not scorable (one class)"
                 for x, c in zip(data["lift"], data["classes_scored"])],
        "k/n seeds +": [f"{p}/{n}" if c else "" for p, n, c in
                        zip(data["n_positive"], data["n_seeds"], data["classes_scored"])]})
    notes = [("Per-video macro-AUC over the evaluable classes that have positive and negative "
              "frames in that video, per seed, then averaged over the paired seeds.")]
    for (r, n), g in data.groupby(["reference", "new"], sort=False):
        ok = g[g["classes_scored"] > 0]
        notes.append(f"({r}) vs ({n}): lift positive on {int((ok['lift'] > 0).sum())} of "
                     f"{len(ok)} scorable patients (mean {fmt_delta(ok['lift'].mean())})")
    return Table("per_patient", title, data, display, ids, tuple(notes), paper="fig:per-patient")


def operating_points_table(an: Analysis) -> Table:
    """Paper Table operating-point: per class and arm, AUC, AP, Sens@FPR, FPR@Sens."""
    ev, b, o = an.evidence, an.headline, an.options
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS[::-1], b)
    arms = list(dict.fromkeys(c for p in pairs for c in p))
    title = f"Operating points per class, mean ± sd over seeds ({b})"
    if not arms:
        return no_runs("operating_points", title, "tab:operating-point",
                        f"none of the pairs {BREAKDOWN_PAIRS} has runs of both arms")
    per: dict[str, list] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in arms:
            arm = ev.arm(b, c)
            per[c] = [operating_points(ev.labels, arm.probs[i].astype(np.float64),
                                       classes=ev.classes, fpr_targets=o.fpr_targets,
                                       sensitivity_target=o.sensitivity_target)
                      for i in range(len(arm.seeds))]
    rows, disp, ids = [], [], []
    fpr_cols = [f"sens_at_fpr_{round(t * 100)}" for t in o.fpr_targets]
    for j, k in enumerate(ev.classes):
        for c in arms:
            res = per[c]
            vals = {"auc": np.array([r.auc[j] for r in res]),
                    "ap": np.array([r.average_precision[j] for r in res]),
                    **{col: np.array([r.sensitivity_at_fpr[j, t] for r in res])
                       for t, col in enumerate(fpr_cols)},
                    "fpr_at_sens": np.array([r.fpr_at_sensitivity[j] for r in res])}
            row = {"class": CLASSES[k], "cell": c, "n_seeds": len(res)}
            for name, v in vals.items():
                row[f"{name}_mean"] = float(v.mean())
                row[f"{name}_sd"] = float(v.std(ddof=1)) if len(v) > 1 else float("nan")
            rows.append(row)
            disp.append({"class": CLASSES[k], "arm": cell_label(c),
                         "AUC": fmt_mean_sd(row["auc_mean"], row["auc_sd"]),
                         "AP": fmt_mean_sd(row["ap_mean"], row["ap_sd"]),
                         **{f"Sens @ {round(t * 100)}% FPR":
                            fmt_mean_sd(row[f"{col}_mean"], row[f"{col}_sd"])
                            for t, col in zip(o.fpr_targets, fpr_cols)},
                         f"FPR @ {round(o.sensitivity_target * 100)}% Sens":
                             fmt_mean_sd(row["fpr_at_sens_mean"], row["fpr_at_sens_sd"])})
            ids.append({c: ev.arm(b, c).runs()})
    notes = [("Sens @ x% FPR: sensitivity at the threshold with the largest FPR not above x; "
              "FPR @ 90% Sens: smallest FPR reaching 90% sensitivity; AP: step-wise area under "
              "the precision-recall curve. One-vs-rest per class, per seed, then mean ± sd."),
             *missing_notes(ev, b, arms)]
    return Table("operating_points", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:operating-point")


def calibration_table(an: Analysis) -> Table:
    """ECE (15 bins) and Brier score per arm, mean ± sd over seeds; paired delta vs (a)."""
    ev, b = an.evidence, an.headline
    tidy = an.tidy[an.tidy["backbone"] == b]
    cells = [c for c in (*PER_FRAME_CELLS, *ABLATION_CELLS[1:], *CHANNEL_TRAIN_ARMS[1:],
                         *CHANNEL_INFER_ARMS) if ev.arm(b, c)]
    cells += [c for c in ev.cells(b) if c not in cells]
    base = tidy[tidy["cell"] == "a"].set_index(["metric", "seed"])["value"]
    rows, disp, ids = [], [], []
    for c in cells:
        t = tidy[tidy["cell"] == c]
        row = {"cell": c}
        for m in ("ece", "brier", "brier_multiclass"):
            v = t[t["metric"] == m].sort_values("seed")
            x = v["value"].to_numpy(float)
            row[f"{m}_mean"] = float(x.mean())
            row[f"{m}_sd"] = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
            paired = [(s, val) for s, val in zip(v["seed"], x) if (m, s) in base.index]
            row[f"{m}_delta_vs_a"] = (float(np.mean([val - base[(m, s)] for s, val in paired]))
                                      if paired and c != "a" else float("nan"))
        row["n_seeds"] = int((t["metric"] == "ece").sum())
        rows.append(row)
        disp.append({"arm": cell_label(c), "seeds": row["n_seeds"],
                     "ECE (15 bins)": fmt_mean_sd(row["ece_mean"], row["ece_sd"]),
                     "Δ ECE vs (a)": fmt_delta(row["ece_delta_vs_a"]) if c != "a" else "—",
                     "Brier (one-vs-rest)": fmt_mean_sd(row["brier_mean"], row["brier_sd"]),
                     "Δ Brier vs (a)": fmt_delta(row["brier_delta_vs_a"]) if c != "a" else "—",
                     "Brier (multi-class)": fmt_mean_sd(row["brier_multiclass_mean"],
                                                        row["brier_multiclass_sd"])})
        ids.append({c: ev.arm(b, c).runs()})
    notes = [("ECE: one-vs-rest, 15 equal-width bins, averaged over the evaluable classes; Brier: "
              "one-vs-rest mean over the evaluable classes, and the multi-class Brier score over "
              "all 14 columns. Δ vs (a) paired by seed; lower is better.")]
    if not ev.arm(b, "a"):
        notes.append(f"a ({b}): no runs, so no deltas")
    return Table("calibration", f"Calibration on the test split ({b})", pd.DataFrame(rows),
                 pd.DataFrame(disp), tuple(ids), tuple(notes), paper="calibration_summary")
