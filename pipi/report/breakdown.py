"""Breakdowns of the headline arms: per patient, operating points (focal classes first),
calibration."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from pipi.analysis import (
    ABLATION_CELLS,
    BREAKDOWN_PAIRS,
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    FOCAL_CLASSES,
    PER_FRAME_CELLS,
    Analysis,
    cell_label,
    is_mechanism_arm,
    missing_notes,
)
from pipi.classes import CLASSES
from pipi.report.rows import no_runs, present_pairs
from pipi.report.tables import Table, fmt_auc, fmt_delta, fmt_mean_sd
from pipi.stats import (
    operating_points,
    per_class_auc,
)

__all__ = ["calibration_table", "group_macro_aucs", "operating_points_table", "per_patient_table"]


def group_macro_aucs(ev, ra, na, seeds, groups: np.ndarray):
    """Per group of frames (sorted; a video, a source): (group, its frame mask, the classes
    scored there (positives and negatives), the reference and new arms' macro-AUC per seed
    (NaN where no class is scorable))."""
    for g in sorted(set(groups.tolist())):
        m = groups == g
        y = ev.labels[m]
        cls = [k for k in ev.classes if 0 < (y == k).sum() < y.size]
        r = n = np.full(len(seeds), np.nan)
        if cls:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = np.array([np.mean(per_class_auc(y, ra.probs[ra.index(s)][m], classes=cls))
                              for s in seeds])
                n = np.array([np.mean(per_class_auc(y, na.probs[na.index(s)][m], classes=cls))
                              for s in seeds])
        yield g, m, cls, r, n


def per_patient_table(an: Analysis) -> Table:
    """Per-patient (per-video) macro-AUC lift, averaged over seeds, for the breakdown pairs."""
    ev, b = an.evidence, an.headline
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS, b)
    title = f"Per-patient lift (per-video macro-AUC, mean over seeds) ({b})"
    level = an.options.confidence_level
    if not pairs:
        return no_runs("per_patient", title, "fig:per-patient",
                        f"none of the pairs {BREAKDOWN_PAIRS} has runs of both arms")
    rows, ids = [], []
    for ref, new in pairs:
        ra, na = ev.arm(b, ref), ev.arm(b, new)
        seeds = sorted(set(ra.seeds) & set(na.seeds))
        for vid, m, cls, r, n in group_macro_aucs(ev, ra, na, seeds, ev.videos):
            ci = an.seed_bca(n - r) if cls else None   # the seeds resampled (the paper's BCa)
            rows.append({"reference": ref, "new": new, "video_id": vid, "n_frames": int(m.sum()),
                         "classes_scored": len(cls), "n_seeds": len(seeds),
                         "ref_macro_auc": float(np.mean(r)), "new_macro_auc": float(np.mean(n)),
                         "lift": float(np.mean(n - r)), "n_positive": int(((n - r) > 0).sum()),
                         "lift_ci_low": ci.confidence_interval.low if ci else np.nan,
                         "lift_ci_high": ci.confidence_interval.high if ci else np.nan,
                         "ci_unstable": bool(ci.unstable) if ci else False})
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
                        zip(data["n_positive"], data["n_seeds"], data["classes_scored"])],
        f"{level:.0%} CI (seeds, BCa)": [
            "" if not np.isfinite(lo) else
            f"[{fmt_delta(lo)}, {fmt_delta(hi)}]" + (" (unstable)" if u else "")
            for lo, hi, u in zip(data["lift_ci_low"], data["lift_ci_high"],
                                 data["ci_unstable"])]})
    notes = [("Per-video macro-AUC over the headline classes that have positive and negative "
              "frames in that video, per seed, then averaged over the paired seeds."),
             (f"CI: BCa bootstrap of the patient's mean lift, resampling the paired seeds "
              f"({an.options.n_resamples} resamples; the test frames held fixed); with few "
              "seeds it can be unstable and says so.")]
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
    index = {n: k for k, n in enumerate(ev.names)}
    # the paper's focal classes are Kvasir-Capsule's; another class set has none
    focal_names = FOCAL_CLASSES if tuple(ev.names) == CLASSES else ()
    focal = [index[n] for n in focal_names if index.get(n, -1) in ev.classes]
    order = focal + [k for k in ev.classes if k not in focal]
    for k in order:
        j = ev.classes.index(k)
        for c in arms:
            res = per[c]
            vals = {"auc": np.array([r.auc[j] for r in res]),
                    "ap": np.array([r.average_precision[j] for r in res]),
                    **{col: np.array([r.sensitivity_at_fpr[j, t] for r in res])
                       for t, col in enumerate(fpr_cols)},
                    "fpr_at_sens": np.array([r.fpr_at_sensitivity[j] for r in res])}
            row = {"class": ev.names[k], "focal": k in focal, "cell": c, "n_seeds": len(res)}
            for name, v in vals.items():
                row[f"{name}_mean"] = float(v.mean())
                row[f"{name}_sd"] = float(v.std(ddof=1)) if len(v) > 1 else float("nan")
            rows.append(row)
            disp.append({"class": ev.names[k] + (" (focal)" if k in focal else ""),
                         "arm": cell_label(c),
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
             (f"The paper's focal classes ({', '.join(FOCAL_CLASSES)}) come first, marked "
              "(focal); then the other headline classes." if focal_names else
              "The data's own classes (not Kvasir-Capsule's): no focal classes; the headline "
              "classes in index order."),
             *[f"focal class {n}: no test positives in this data, so no row"
               for n in focal_names if index.get(n, -1) not in focal],
             *missing_notes(ev, b, arms)]
    return Table("operating_points", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:operating-point")


def calibration_table(an: Analysis) -> Table:
    """ECE (15 bins) and Brier score per arm, mean ± sd over seeds; paired delta vs (a)."""
    ev, b = an.evidence, an.headline
    tidy = an.tidy[an.tidy["backbone"] == b]
    cells = [c for c in (*PER_FRAME_CELLS, *ABLATION_CELLS[1:], *CHANNEL_TRAIN_ARMS[1:],
                         *CHANNEL_INFER_ARMS) if ev.arm(b, c)]
    cells += [c for c in ev.cells(b) if c not in cells and not is_mechanism_arm(c)]
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
    notes = [("ECE: one-vs-rest, 15 equal-width bins, averaged over the headline classes; Brier: "
              "one-vs-rest mean over the headline classes, and the multi-class Brier score over "
              f"all {len(ev.names)} columns. Δ vs (a) paired by seed; lower is better.")]
    if not ev.arm(b, "a"):
        notes.append(f"a ({b}): no runs, so no deltas")
    return Table("calibration", f"Calibration on the test split ({b})", pd.DataFrame(rows),
                 pd.DataFrame(disp), tuple(ids), tuple(notes), paper="calibration_summary")
