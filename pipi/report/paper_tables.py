"""The paper's tables (and the curve data of its figures), built from an ``Analysis``.

One function per table; each returns a :class:`pipi.report.tables.Table` with numeric
``data``, formatted ``display`` rows, the run ids behind every row and notes that name
missing arms and seeds. A table whose runs do not exist is returned with status
``"no runs"`` and the reason, never dropped. Pure: no MLflow, no files.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from pipi.aggregate import (
    ABLATION_CELLS,
    BACKBONES,
    BREAKDOWN_PAIRS,
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    OTHER_STUDIES,
    PAIRED_TESTS,
    PER_FRAME_CELLS,
    STOUFFER_LABEL,
    Analysis,
    Arm,
    Comparison,
    Evidence,
    _collect_warnings,
    _missing_notes,
    _seeds_text,
    adjust_comparisons,
    cell_label,
    compare_cells,
    compare_pairs,
    mixed_profile_note,
)
from pipi.classes import CLASSES
from pipi.report.tables import (
    NO_RUNS,
    Table,
    fmt_auc,
    fmt_ci,
    fmt_delta,
    fmt_mean_sd,
    fmt_p,
    fmt_z,
)
from pipi.stats import (
    Family,
    adjust_families,
    average_precision,
    operating_points,
    per_class_auc,
    roc_points,
    sign_flip_test,
    significance_marker,
    stouffer_combine,
)


# --------------------------------------------------------------------------- table helpers
def _run_map(arm: Arm | None) -> dict[int, str]:
    return arm.runs() if arm is not None else {}


def _no_runs(key: str, title: str, paper: str, *notes: str) -> Table:
    return Table(key, title, notes=tuple(notes), status=NO_RUNS, paper=paper)


def _arm_summary(arm: Arm | None) -> dict:
    if arm is None:
        return {"n_seeds": 0, "seeds": "", "mean": float("nan"), "sd": float("nan")}
    m = arm.macro
    return {"n_seeds": len(m), "seeds": _seeds_text(arm.seeds), "mean": float(m.mean()),
            "sd": float(m.std(ddof=1)) if len(m) > 1 else float("nan")}


def _ci_cols(c: Comparison | None, prefix: str = "") -> dict:
    b = c.bootstrap if c is not None else None
    nan = float("nan")
    return {f"{prefix}ci_percentile_low": b.percentile.low if b else nan,
            f"{prefix}ci_percentile_high": b.percentile.high if b else nan,
            f"{prefix}ci_bca_low": b.bca.low if b else nan,
            f"{prefix}ci_bca_high": b.bca.high if b else nan,
            f"{prefix}bootstrap_p": b.pvalue if b else nan}


# --------------------------------------------------------------------------- tables
def coverage_table(an: Analysis) -> Table:
    """Arm x seed matrix of the runs used; 'missing' where an arm lacks a seed."""
    ev = an.evidence
    rows, disp, ids = [], [], []
    for b in ev.backbones():
        seeds = ev.seed_universe(b)
        for c in ev.cells(b):
            arm = ev.arm(b, c)
            runs = arm.runs()
            rows.append({"backbone": b, "cell": c, "n_seeds": len(arm.seeds),
                         **{f"seed_{s}": runs.get(s, "") for s in seeds}})
            disp.append({"backbone": b, "cell": c, "seeds": f"{len(arm.seeds)}/{len(seeds)}",
                         **{f"seed {s}": runs[s][:8] if s in runs else "missing" for s in seeds}})
            ids.append({c: runs})
    data, display = pd.DataFrame(rows), pd.DataFrame(disp).fillna("")
    missing = [f"{r['cell']} ({r['backbone']}): missing seeds "
               f"{[int(c.split(' ')[1]) for c, v in r.items() if v == 'missing']}"
               for r in disp if "missing" in r.values()]
    notes = ["Each cell shows the first 8 characters of the run id (full ids in the CSV)."]
    mixed = mixed_profile_note(ev.runs)
    if mixed:
        notes.append(f"WARNING: {mixed}")
    return Table("coverage", "Runs used per arm and seed", data, display, tuple(ids),
                 tuple(notes + missing))


def runs_table(an: Analysis) -> Table:
    """Every included run with its recomputed and logged test macro-AUC."""
    ev = an.evidence
    rec = {rid: float(a.macro[i]) for a in ev.arms.values() for i, rid in enumerate(a.run_ids)}
    data = ev.runs.reindex(columns=["backbone", "cell", "seed", "run_id", "entry_point",
                                    "test_macro_auc"]).copy()
    data = data.rename(columns={"test_macro_auc": "logged_test_macro_auc"})
    data["macro_auc"] = data["run_id"].map(rec)
    data["abs_diff"] = (data["macro_auc"] - data["logged_test_macro_auc"]).abs()
    display = pd.DataFrame({
        "backbone": data["backbone"], "cell": data["cell"], "seed": data["seed"],
        "run id": data["run_id"], "macro-AUC (recomputed)": data["macro_auc"].map(fmt_auc),
        "logged test/macro_auc": data["logged_test_macro_auc"].map(lambda x: fmt_auc(x, 4))})
    notes = [(f"{len(data)} runs; test macro-AUC recomputed from predictions over "
              f"{len(ev.classes)} evaluable classes: {', '.join(ev.class_names)}.")]
    off = data[data["abs_diff"] > 1e-4]
    if len(off):
        notes.append(f"recomputed macro-AUC differs from the logged metric by > 1e-4 for runs "
                      f"{list(off['run_id'])} (tables use the recomputed values)")
    ids = tuple({r.cell: {int(r.seed): r.run_id}} for r in data.itertuples())
    return Table("runs", "Runs aggregated", data.reset_index(drop=True), display, ids,
                 tuple(notes))


def excluded_table(an: Analysis) -> Table:
    ex = an.evidence.excluded
    if ex is None or ex.empty:
        return Table("excluded", "Runs not aggregated (and why)",
                     pd.DataFrame({"run_id": [], "reason": []}),
                     pd.DataFrame({"run id": ["none"], "reason": ["no run was excluded"]})
                     .iloc[:0], notes=("no run was excluded",))
    data = ex[["run_id", "status", "entry_point", "backbone", "cell", "seed", "reason"]].copy()
    data["seed"] = data["seed"].astype(object).where(data["seed"].notna(), "")
    display = data.astype(str).rename(columns={"run_id": "run id", "entry_point": "entry point"})
    counts = data["reason"].str.replace(r" \(.*| by newer run.*", "", regex=True).value_counts()
    notes = [f"{n} run(s): {r}" for r, n in counts.items()]
    return Table("excluded", "Runs not aggregated (and why)", data.reset_index(drop=True),
                 display.reset_index(drop=True), (), tuple(notes))


def per_frame_table(an: Analysis) -> Table:
    """Paper Table per-frame: cross-seed macro-AUC of a, pi, distill; paired delta vs a."""
    ev, b = an.evidence, an.headline
    title = f"Per-frame test macro-AUC, mean ± sd over seeds ({b})"
    if not any(ev.arm(b, c) for c in PER_FRAME_CELLS):
        return _no_runs("per_frame", title, "tab:per-frame", f"no runs of cells {PER_FRAME_CELLS}")
    notes = _missing_notes(ev, b, PER_FRAME_CELLS)
    comps = {c.new: c for c in compare_cells(an, baseline="a", cells=PER_FRAME_CELLS,
                                             family="per_frame_vs_a", backbone=b, notes=notes)}
    rows, disp, ids = [], [], []
    for cell in PER_FRAME_CELLS:
        arm, comp = ev.arm(b, cell), comps.get(cell)
        s = _arm_summary(arm)
        ok = comp is not None and comp.available
        rows.append({"cell": cell, "configuration": cell_label(cell), **s,
                     "delta_vs_a": comp.mean_delta if ok else float("nan"),
                     "n_positive": comp.n_positive if ok else None,
                     "n_paired": len(comp.seeds) if ok else 0,
                     "sign_flip_p": comp.sign_flip_p if ok else float("nan"),
                     **_ci_cols(comp if ok else None)})
        disp.append({"Configuration": cell_label(cell),
                     "seeds": s["seeds"] or "no runs",
                     "Macro-AUC": fmt_mean_sd(s["mean"], s["sd"]) if arm else "no runs",
                     "paired Δ vs (a)": (f"{fmt_delta(comp.mean_delta)} ({comp.sign_text} +)"
                                         if ok else ("—" if cell == "a" else "n/a")),
                     "sign-flip p": fmt_p(comp.sign_flip_p) if ok else "",
                     "95% BCa CI (videos)": (fmt_ci(*comp.bootstrap.bca) if ok else "")})
        ids.append({cell: _run_map(arm)} | ({"a": dict(comp.ref_runs)} if ok else {}))
    notes.append("sd: sample standard deviation over seeds (ddof = 1). Δ = cell - (a), paired "
                 "by seed; 'k/n +': seeds with a positive delta. Sign-flip p: exact "
                 "permutation of the per-seed delta signs.")
    return Table("per_frame", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:per-frame")


def eight_cell_table(an: Analysis) -> Table:
    """Paper Table eight-cell: mean and sd per cell, deltas vs (a) and vs (b)."""
    ev, b = an.evidence, an.headline
    title = f"Eight-cell ablation: test macro-AUC over seeds ({b})"
    seq = [c for c in ABLATION_CELLS if c != "a" and ev.arm(b, c)]
    if not seq:
        return _no_runs("eight_cell", title, "tab:eight-cell",
                        f"no sequence-cell runs ({', '.join(ABLATION_CELLS[1:])}) for {b}; "
                        "run `mlflow run . -e ablate -P study=eight_cell`")
    notes = _missing_notes(ev, b, ABLATION_CELLS)
    vs_a = {c.new: c for c in compare_cells(an, baseline="a", cells=ABLATION_CELLS,
                                            family="eight_cell_vs_a", backbone=b, notes=notes)}
    vs_b = {c.new: c for c in compare_cells(an, baseline="b", cells=ABLATION_CELLS[2:],
                                            family="eight_cell_vs_b", backbone=b, notes=notes)}
    rows, disp, ids = [], [], []
    for cell in ABLATION_CELLS:
        arm = ev.arm(b, cell)
        s = _arm_summary(arm)
        ca, cb = vs_a.get(cell), vs_b.get(cell)
        oka, okb = ca is not None and ca.available, cb is not None and cb.available
        rows.append({"cell": cell, "label": cell_label(cell), **s,
                     "delta_vs_a": ca.mean_delta if oka else float("nan"),
                     "n_positive_vs_a": ca.n_positive if oka else None,
                     "sign_flip_p_vs_a": ca.sign_flip_p if oka else float("nan"),
                     "sign_flip_p_vs_a_bh": ca.adjusted.get("sign_flip_bh", float("nan"))
                     if oka else float("nan"),
                     "delta_vs_b": cb.mean_delta if okb else float("nan"),
                     "n_positive_vs_b": cb.n_positive if okb else None})
        disp.append({"Cell": cell_label(cell), "seeds": s["seeds"] or "no runs",
                     "Mean macro-AUC": fmt_auc(s["mean"], 4) if arm else "no runs",
                     "σ": fmt_auc(s["sd"]) if arm else "",
                     "Δ vs (a)": f"{fmt_delta(ca.mean_delta)} ({ca.sign_text} +)" if oka else "",
                     "sign-flip p vs (a), BH": (
                         f"{fmt_p(ca.sign_flip_p)} ({fmt_p(ca.adjusted.get('sign_flip_bh'))})"
                         if oka else ""),
                     "Δ vs (b)": f"{fmt_delta(cb.mean_delta)} ({cb.sign_text} +)" if okb else ""})
        row_ids = {cell: _run_map(arm)}
        if oka:
            row_ids["a"] = dict(ca.ref_runs)
        if okb:
            row_ids["b"] = dict(cb.ref_runs)
        ids.append(row_ids)
    notes.append("BH: Benjamini-Hochberg over the comparisons against (a) (one family).")
    return Table("eight_cell", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:eight-cell")


def _present_pairs(an: Analysis, pairs, backbone: str) -> tuple[list, list[str]]:
    ev = an.evidence
    ok = [(r, n) for r, n in pairs if ev.arm(backbone, r) and ev.arm(backbone, n)]
    skipped = [f"{r} vs {n}" for r, n in pairs if (r, n) not in ok]
    return ok, skipped


def paired_tests_tables(an: Analysis) -> tuple[Table, Table]:
    """Paper Table paired-tests (one row per pair) and its per-seed detail."""
    b = an.headline
    title = f"Paired significance of key cell pairs ({b})"
    pairs, skipped = _present_pairs(an, PAIRED_TESTS, b)
    if not pairs:
        t = _no_runs("paired_tests", title, "tab:paired-tests",
                     f"no pair of {PAIRED_TESTS} has runs of both arms")
        return t, _no_runs("paired_tests_per_seed", "Paired tests per seed", "tab:paired-tests")
    notes: list[str] = []
    comps = compare_pairs(an, pairs, family="paired_tests", backbone=b, notes=notes)
    rows, disp, ids = [], [], []
    drows, ddisp, dids = [], [], []
    for c in comps:
        bt = c.bootstrap
        rows.append({
            "reference": c.reference, "new": c.new, "n_seeds": len(c.seeds),
            "seeds": _seeds_text(c.seeds), "mean_delta": c.mean_delta,
            "n_positive": c.n_positive,
            **{f"delong_z_seed{s}": z for s, z in zip(c.seeds, c.delong_z, strict=True)},
            "stouffer_z": c.stouffer_z, "stouffer_p": c.stouffer_p,
            "stouffer_p_bonferroni": c.adjusted.get("stouffer_bonferroni", float("nan")),
            "stouffer_p_bh": c.adjusted.get("stouffer_bh", float("nan")),
            "sign_flip_p": c.sign_flip_p, "sign_flip_exact": c.sign_flip_exact,
            "sign_flip_p_bh": c.adjusted.get("sign_flip_bh", float("nan")),
            "wilcoxon_p": c.wilcoxon_p, **_ci_cols(c), "bootstrap_unit": bt.unit})
        disp.append({
            "Comparison": f"({c.reference}) vs ({c.new})", "seeds": _seeds_text(c.seeds),
            "mean Δ (k/n +)": f"{fmt_delta(c.mean_delta)} ({c.sign_text})",
            "DeLong z per seed": " ".join(fmt_z(z) for z in c.delong_z),
            f"{STOUFFER_LABEL} z": fmt_z(c.stouffer_z),
            "Stouffer p (Bonf / BH)": (f"{fmt_p(c.stouffer_p)} ({fmt_p(c.adjusted.get('stouffer_bonferroni'))}"
                                       f" / {fmt_p(c.adjusted.get('stouffer_bh'))})"),
            "sign-flip p (BH)": f"{fmt_p(c.sign_flip_p)} ({fmt_p(c.adjusted.get('sign_flip_bh'))})",
            "95% percentile CI": fmt_ci(*bt.percentile), "95% BCa CI": fmt_ci(*bt.bca)})
        ids.append(c.run_ids())
        for i, s in enumerate(c.seeds):
            drows.append({"reference": c.reference, "new": c.new, "seed": s,
                          "ref_run_id": c.ref_runs[s], "new_run_id": c.new_runs[s],
                          "ref_macro_auc": c.ref_macro[i], "new_macro_auc": c.new_macro[i],
                          "delta": c.deltas[i], "delong_z": c.delong_z[i],
                          "delong_p": c.delong_p[i], "mcnemar_p": c.mcnemar_p[i],
                          "accuracy_delta": c.accuracy_delta[i]})
            ddisp.append({"Comparison": f"({c.reference}) vs ({c.new})", "seed": s,
                          "ref": fmt_auc(c.ref_macro[i]), "new": fmt_auc(c.new_macro[i]),
                          "Δ": fmt_delta(c.deltas[i]), "DeLong z": fmt_z(c.delong_z[i]),
                          "DeLong p": fmt_p(c.delong_p[i]),
                          "McNemar p (argmax)": fmt_p(c.mcnemar_p[i]),
                          "accuracy Δ": fmt_delta(c.accuracy_delta[i])})
            dids.append({c.reference: {s: c.ref_runs[s]}, c.new: {s: c.new_runs[s]}})
        notes.extend(n for n in c.notes if n not in notes)
    unit = comps[0].bootstrap.unit
    notes += [
        ("z > 0 when the new arm is better (delta = new - reference); the paper prints the "
         "opposite sign for (b) vs (b+) etc."),
        (f"{STOUFFER_LABEL}: sum of per-seed DeLong z / sqrt(n). Seeds share one test set, so "
         "their z-scores are correlated and this p-value is anti-conservative."),
        (f"Sign-flip: exact when 2^seeds <= {an.options.n_permutations}. Bootstrap: "
         f"{an.options.n_resamples} resamples of test {unit} applied to all seeds at once "
         "(percentile and BCa; BCa jackknife leaves one unit out)."),
        ("Bonferroni and BH are applied once over the comparisons of this table (one family "
         "per kind of p-value).")]
    if skipped:
        notes.append(f"not tested (an arm has no runs): {', '.join(skipped)}")
    main = Table("paired_tests", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:paired-tests")
    detail = Table("paired_tests_per_seed", f"Paired tests per seed ({b})", pd.DataFrame(drows),
                   pd.DataFrame(ddisp), tuple(dids),
                   (("DeLong: paired test of the macro-AUC over the evaluable classes on the "
                     "same frames; McNemar at the argmax operating point."),),
                   paper="tab:paired-tests")
    return main, detail


def _breakdown_pair(an: Analysis) -> tuple[str, str] | None:
    pairs, _ = _present_pairs(an, BREAKDOWN_PAIRS, an.headline)
    return pairs[0] if pairs else None


def per_class_table(an: Analysis) -> Table:
    """Paper Table per-class: AUC per class of two arms, delta with Bonferroni/BH markers."""
    ev, b = an.evidence, an.headline
    pair = _breakdown_pair(an)
    if pair is None:
        return _no_runs("per_class", f"Per-class test AUC ({b})", "tab:perclass",
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
    with _collect_warnings(notes):
        for j, k in enumerate(ev.classes):
            z = comp.per_class_z[:, j]
            st = stouffer_combine(z) if np.isfinite(z).all() else None
            sf = sign_flip_test(d[:, j], n_resamples=an.options.n_permutations,
                                rng=an.options.seed)
            bt = an.bootstrap.delta(b, ref, new, comp.seeds, classes=[k])
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
    notes = [(f"cell ({ref}) vs cell ({new}) over seeds {_seeds_text(comp.seeds)}; AUC mean ± sd "
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
    pairs, _ = _present_pairs(an, BREAKDOWN_PAIRS, b)
    title = f"Per-patient lift (per-video macro-AUC, mean over seeds) ({b})"
    if not pairs:
        return _no_runs("per_patient", title, "fig:per-patient",
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
    pairs, _ = _present_pairs(an, BREAKDOWN_PAIRS[::-1], b)
    arms = list(dict.fromkeys(c for p in pairs for c in p))
    title = f"Operating points per class, mean ± sd over seeds ({b})"
    if not arms:
        return _no_runs("operating_points", title, "tab:operating-point",
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
             *_missing_notes(ev, b, arms)]
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


def cross_backbone_table(an: Analysis) -> Table:
    """Paper Table cross-backbone: a and pi per backbone, paired delta."""
    ev = an.evidence
    title = "Per-frame cross-backbone replication: (a) RGB-only vs +PI"
    backbones = list(dict.fromkeys([*BACKBONES, *ev.backbones()]))
    present = [bb for bb in backbones if ev.arm(bb, "a") and ev.arm(bb, "pi")]
    if not present:
        return _no_runs("cross_backbone", title, "tab:cross-backbone",
                        "no backbone has runs of both a and pi")
    notes: list[str] = []
    comps = {c.backbone: c for bb in present
             for c in compare_pairs(an, [("a", "pi")], family=f"cross_backbone/{bb}",
                                    backbone=bb, notes=notes)}
    comps = {c.backbone: c for c in adjust_comparisons(list(comps.values()),
                                                       family="cross_backbone")}
    rows, disp, ids = [], [], []
    for bb in backbones:
        ra, pa, c = ev.arm(bb, "a"), ev.arm(bb, "pi"), comps.get(bb)
        sa, sp = _arm_summary(ra), _arm_summary(pa)
        ok = c is not None and c.available
        rows.append({"backbone": bb, "a_mean": sa["mean"], "a_sd": sa["sd"],
                     "a_seeds": sa["seeds"], "pi_mean": sp["mean"], "pi_sd": sp["sd"],
                     "pi_seeds": sp["seeds"], "delta": c.mean_delta if ok else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "n_paired": len(c.seeds) if ok else 0,
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     "sign_flip_p_bh": c.adjusted.get("sign_flip_bh", float("nan"))
                     if ok else float("nan"), **_ci_cols(c if ok else None)})
        disp.append({"Backbone": bb + (" (headline)" if bb == an.headline else ""),
                     "RGB-only (a)": fmt_mean_sd(sa["mean"], sa["sd"]) if ra else "no runs",
                     "+PI 5-channel": fmt_mean_sd(sp["mean"], sp["sd"]) if pa else "no runs",
                     "Paired Δ": f"{fmt_delta(c.mean_delta)} ({c.sign_text} +)" if ok else "n/a",
                     "sign-flip p (BH)": (f"{fmt_p(c.sign_flip_p)} "
                                          f"({fmt_p(c.adjusted.get('sign_flip_bh'))})" if ok else ""),
                     "95% BCa CI (videos)": fmt_ci(*c.bootstrap.bca) if ok else ""})
        ids.append({"a": _run_map(ra), "pi": _run_map(pa)})
        if not (ra and pa):
            notes.append(f"{bb}: " + ", ".join(f"{x} has no runs" for x, arm in
                                             (("a", ra), ("pi", pa)) if arm is None))
        elif c is not None:
            notes.extend(n for n in c.notes if n not in notes)
    notes.append("BH over the backbones (one family).")
    return Table("cross_backbone", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:cross-backbone")


def _channel_table(an: Analysis, *, key: str, title: str, paper: str, reference: str,
                   arms: Sequence[str], extra: Sequence[tuple[str, str]] = ()) -> Table:
    ev, b = an.evidence, an.headline
    notes = _missing_notes(ev, b, [reference, *arms])
    pairs = [(reference, a) for a in arms if ev.arm(b, a)] + \
            [(r, n) for r, n in extra if ev.arm(b, r) and ev.arm(b, n)]
    comps = compare_pairs(an, pairs, family=key, backbone=b, notes=notes) \
        if ev.arm(b, reference) else []
    by = {(c.reference, c.new): c for c in comps}
    rows, disp, ids = [], [], []
    for r, n in [(None, reference), *[(reference, a) for a in arms], *extra]:
        arm = ev.arm(b, n)
        c = by.get((r, n)) if r else None
        ok = c is not None and c.available
        s = _arm_summary(arm)
        label = cell_label(n) if r in (None, reference) else f"{cell_label(n)} vs {cell_label(r)}"
        rows.append({"reference": r or "", "arm": n, **s,
                     "delta": c.mean_delta if ok else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "n_paired": len(c.seeds) if ok else 0,
                     "wilcoxon_p": c.wilcoxon_p if ok else float("nan"),
                     "wilcoxon_p_bh": c.adjusted.get("wilcoxon_bh", float("nan"))
                     if ok else float("nan"),
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     **_ci_cols(c if ok else None)})
        disp.append({"arm": label, "seeds": s["seeds"] or "no runs",
                     "macro-AUC": fmt_mean_sd(s["mean"], s["sd"]) if arm else "no runs",
                     "Δ vs reference (k/n +)": (f"{fmt_delta(c.mean_delta, 4)} ({c.sign_text})"
                                                if ok else ("—" if r is None else "n/a")),
                     "Wilcoxon p (BH)": (f"{fmt_p(c.wilcoxon_p)} "
                                         f"({fmt_p(c.adjusted.get('wilcoxon_bh'))})" if ok else ""),
                     "sign-flip p": fmt_p(c.sign_flip_p) if ok else "",
                     "95% BCa CI (videos)": fmt_ci(*c.bootstrap.bca, digits=4) if ok else ""})
        ids.append({n: _run_map(arm)} | ({r: dict(c.ref_runs)} if ok else {}))
    notes.append(f"Δ = arm - reference, paired by seed; the reference is ({reference}) unless "
                 "the row names another ('X vs Y': X - Y). BH over the comparisons of this table.")
    return Table(key, title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids), tuple(notes),
                 paper=paper)


def channel_train_table(an: Analysis) -> Table:
    """Paper Table channel-ablation-train: single-prior-channel arms vs full +PI."""
    ev, b = an.evidence, an.headline
    title = f"Training-time channel ablation ({b})"
    if not any(ev.arm(b, c) for c in CHANNEL_TRAIN_ARMS[1:]):
        return _no_runs("channel_train", title, "tab:channel-ablation-train",
                        "no pblood_only / phi_only runs; run `mlflow run . -e ablate -P "
                        "study=channel_train`")
    return _channel_table(an, key="channel_train", title=title,
                          paper="tab:channel-ablation-train", reference="pi",
                          arms=CHANNEL_TRAIN_ARMS)


def channel_infer_table(an: Analysis) -> Table:
    """Paper Table channel-ablation-infer: prior channels zeroed at inference vs +PI."""
    ev, b = an.evidence, an.headline
    title = f"Inference-time channel ablation ({b})"
    if not any(ev.arm(b, c) for c in CHANNEL_INFER_ARMS):
        return _no_runs("channel_infer", title, "tab:channel-ablation-infer",
                        "no pi@zero_* runs; run `mlflow run . -e ablate -P study=channel_infer`")
    t = _channel_table(an, key="channel_infer", title=title,
                       paper="tab:channel-ablation-infer", reference="pi",
                       arms=CHANNEL_INFER_ARMS, extra=[("a", "pi@zero_both")])
    return replace(t, notes=t.notes + tuple(_base_run_notes(ev, b, "pi", CHANNEL_INFER_ARMS)))


def _base_run_notes(ev: Evidence, backbone: str, reference: str,
                    arms: Sequence[str]) -> list[str]:
    """Variant runs evaluated on another run than the reference run paired with them."""
    ref = ev.arm(backbone, reference)
    if ref is None or "base_run_id" not in ev.runs:
        return []
    base = ev.runs.set_index("run_id")["base_run_id"].fillna("")
    notes = []
    for c in arms:
        arm = ev.arm(backbone, c)
        for seed, rid in (arm.runs().items() if arm else ()):
            want = ref.runs().get(seed)
            got = base.get(rid, "")
            if got and want and got != want:
                notes.append(f"WARNING: {c} seed {seed} (run {rid}) evaluated {reference} run "
                             f"{got}, but the {reference} run paired with it is {want}")
    return notes


def other_study_tables(an: Analysis) -> list[Table]:
    """Transplant, robustness and cross-vendor: reported as 'no runs' until such runs exist."""
    allr = an.evidence.all_runs
    eps = allr["entry_point"].value_counts() if "entry_point" in allr else pd.Series(dtype=int)
    titles = {"transplant": ("Subset-block transplant", "tab:subset-transplant"),
              "robustness": ("Robustness to test-image perturbations", "tab:robustness"),
              "cross_vendor": ("Cross-vendor zero-shot (Galar)", "tab:galar-zeroshot")}
    out = []
    for key, ep in OTHER_STUDIES.items():
        title, paper = titles[key]
        n = int(eps.get(ep, 0))
        note = (f"no runs of entry point `{ep}` in this selection" if n == 0 else
                f"{n} run(s) of entry point `{ep}` found, but their run contract is not defined "
                "yet, so this table is not built")
        out.append(_no_runs(key, title, paper, note))
    return out


# --------------------------------------------------------------------------- figure data
ROC_GRID = np.linspace(0.0, 1.0, 201)


def _micro(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int]):
    y = (labels[:, None] == np.asarray(classes)[None, :]).ravel()
    return y, probs[:, list(classes)].astype(np.float64).ravel()


def mean_roc(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int],
             grid: np.ndarray = ROC_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd over seeds of the micro-averaged one-vs-rest ROC (TPR on an FPR grid).

    ``probs`` (S, N, C). At each grid FPR x the step ROC's TPR is that of the last point with
    FPR <= x.
    """
    tprs = []
    for p in probs:
        fpr, tpr, _ = roc_points(*_micro(labels, p, classes))
        tprs.append(tpr[np.searchsorted(fpr, grid, side="right") - 1])
    t = np.stack(tprs)
    return t.mean(0), (t.std(0, ddof=1) if len(t) > 1 else np.zeros_like(grid))


def pr_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recall and precision at every distinct threshold (decreasing), starting at recall 0."""
    order = np.argsort(-s, kind="stable")
    ss, yy = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(ss) != 0), ss.size - 1]
    tp = np.cumsum(yy)[last]
    prec = tp / (last + 1)
    rec = tp / max(int(y.sum()), 1)
    return np.r_[0.0, rec], np.r_[prec[0] if prec.size else 1.0, prec]


def mean_pr(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int],
            grid: np.ndarray = ROC_GRID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and sd over seeds of the micro-averaged interpolated precision on a recall grid,
    and the per-seed micro average precision. Interpolated precision at recall r is the
    largest precision at any recall >= r."""
    precs, aps = [], []
    for p in probs:
        y, s = _micro(labels, p, classes)
        rec, prec = pr_points(y, s)
        interp = np.maximum.accumulate(prec[::-1])[::-1]
        idx = np.minimum(np.searchsorted(rec, grid, side="left"), rec.size - 1)
        precs.append(interp[idx])
        aps.append(average_precision(y, s))
    t = np.stack(precs)
    return t.mean(0), (t.std(0, ddof=1) if len(t) > 1 else np.zeros_like(grid)), np.array(aps)


def curve_data(an: Analysis) -> dict:
    """Mean ROC and PR curves of the headline backbone's arms (figures and JSON)."""
    ev, b = an.evidence, an.headline
    cells = [c for c in (*PER_FRAME_CELLS, *ABLATION_CELLS[1:]) if ev.arm(b, c)]
    out = {"grid": ROC_GRID, "arms": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in cells:
            arm = ev.arm(b, c)
            tpr, tpr_sd = mean_roc(ev.labels, arm.probs, ev.classes)
            prec, prec_sd, aps = mean_pr(ev.labels, arm.probs, ev.classes)
            out["arms"][c] = {"label": cell_label(c), "tpr": tpr, "tpr_sd": tpr_sd,
                              "precision": prec, "precision_sd": prec_sd,
                              "macro_auc": float(arm.macro.mean()), "micro_ap": float(aps.mean()),
                              "seeds": list(arm.seeds), "run_ids": arm.runs()}
    return out


