"""Per-class tables (paper Table per-class): one per breakdown pair whose arms have runs.

``per_class`` compares (b) with (e+), the paper's table; ``per_class_per_frame`` compares (a)
with (+PI), the paper's Lymphangiectasia 0.238 -> 0.337; ``per_class_distill`` compares (a)
with the distillation cell, the paper's Reduced Mucosal View +0.069. Rows are the headline
classes (all classes with test positives); each class's p-value is in one Bonferroni/BH family
per table, and each row says how its bootstrap interval was resampled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis import (
    PER_CLASS_PAPER,
    PER_CLASS_TABLES,
    Analysis,
    cell_label,
    collect_warnings,
    compare_pairs,
    seeds_text,
)
from pipi.report.rows import (
    bootstrap_note,
    ci_cols,
    ci_header,
    ci_text,
    no_runs,
    seed_bca_text,
    seed_ci_header,
    seed_ci_note,
    seed_cols,
)
from pipi.report.tables import Table, fmt_delta, fmt_mean_sd, fmt_p, fmt_z
from pipi.stats import (
    Family,
    adjust_families,
    sign_flip_test,
    significance_marker,
    stouffer_combine,
)

__all__ = ["per_class_table", "per_class_tables"]


def per_class_tables(an: Analysis) -> list[Table]:
    """Every per-class table of :data:`pipi.analysis.PER_CLASS_TABLES` (``no runs`` if absent)."""
    return [per_class_table(an, pair) for pair in PER_CLASS_TABLES]


def per_class_table(an: Analysis, pair: tuple[str, str]) -> Table:
    """AUC per headline class of two arms, delta with Bonferroni/BH markers and a bootstrap CI."""
    ev, b = an.evidence, an.headline
    ref, new = pair
    key = PER_CLASS_TABLES.get(pair, f"per_class_{ref}_vs_{new}")
    paper, claim = PER_CLASS_PAPER.get(pair, ("tab:perclass", ""))
    title = f"Per-class test AUC: cell ({ref}) vs cell ({new}) ({b})"
    if not (ev.arm(b, ref) and ev.arm(b, new)):
        lacking = [c for c in pair if not ev.arm(b, c)]
        return no_runs(key, title, paper,
                       f"{', '.join(lacking)} ({b}): no runs; {cell_label(ref)} vs "
                       f"{cell_label(new)} needs runs of both")
    notes: list[str] = []
    comp = compare_pairs(an, [pair], family=f"{key}_macro", backbone=b, notes=notes)[0]
    ra, na = ev.arm(b, ref), ev.arm(b, new)
    ri = [ra.index(s) for s in comp.seeds]
    ni = [na.index(s) for s in comp.seeds]
    a_ref, a_new = ra.auc[ri], na.auc[ni]            # (S, K)
    d = a_new - a_ref
    rows, cis, seed_cis = [], [], []
    with collect_warnings(notes):
        for j, k in enumerate(ev.classes):
            z = comp.per_class_z[:, j]
            st = stouffer_combine(z) if np.isfinite(z).all() else None
            sf = sign_flip_test(d[:, j], n_resamples=an.options.n_permutations,
                                rng=an.options.seed)
            bt = an.delta_ci(b, ref, new, comp.seeds, classes=[k])
            cis.append(bt)
            sb = an.seed_bca(d[:, j])
            seed_cis.append(sb)
            rows.append({"class": ev.names[k], "ref_mean": a_ref[:, j].mean(),
                         "ref_sd": a_ref[:, j].std(ddof=1) if len(ri) > 1 else float("nan"),
                         "new_mean": a_new[:, j].mean(),
                         "new_sd": a_new[:, j].std(ddof=1) if len(ri) > 1 else float("nan"),
                         "delta": d[:, j].mean(), "n_positive": int((d[:, j] > 0).sum()),
                         "n_seeds": len(ri),
                         "stouffer_z": st.statistic if st else float("nan"),
                         "p": st.pvalue if st else float("nan"), "sign_flip_p": sf.pvalue,
                         "test_videos": an.bootstrap.videos_with(k), **ci_cols(bt),
                         **seed_cols(sb)})
    data = pd.DataFrame(rows)
    fam = {r["class"]: r["p"] for r in rows}
    for method, col in (("bonferroni", "p_bonferroni"), ("bh", "p_bh")):
        if np.isnan(np.asarray(list(fam.values()), float)).all():
            data[col] = np.nan
            continue
        res = adjust_families([Family(f"{key}/{b}/{ref}_vs_{new}", fam)], method=method)
        data[col] = list(next(iter(res.values())).adjusted)
    data["marker_bonferroni"] = significance_marker(data["p_bonferroni"].to_numpy(float))
    data["marker_bh"] = significance_marker(data["p_bh"].to_numpy(float))
    order = data.sort_values("delta", ascending=False, kind="stable").index
    data = data.loc[order].reset_index(drop=True)
    cis = [cis[i] for i in order]
    seed_cis = [seed_cis[i] for i in order]
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
        ci_header(an): [ci_text(bt, an) for bt in cis],
        seed_ci_header(an): [seed_bca_text(sb) if sb else "n/a (< 2 seeds)"
                             for sb in seed_cis],
        seed_ci_header(an, "percentile"): [seed_bca_text(sb, kind="percentile") if sb
                                           else "n/a (< 2 seeds)" for sb in seed_cis],
        "test videos": data["test_videos"]})
    ids = tuple(comp.run_ids() for _ in range(len(data)))
    notes = [(f"cell ({ref}) vs cell ({new}) over seeds {seeds_text(comp.seeds)}; AUC mean ± sd "
              "over seeds; Δ = mean over seeds of the per-class delta. Rows: the "
              f"{len(ev.classes)} headline classes ({ev.class_source})."),
             ("p: per-class paired DeLong z per seed combined by Stouffer (assumes independent "
              f"seeds); adjusted over the {len(ev.classes)} classes (one family) by Bonferroni "
              "(markers on Δ) and BH (marker after BH p): * < 0.05, ** < 0.01, *** < 0.001."),
             bootstrap_note(an), _seed_note(an, data["class"], seed_cis), *comp.notes,
             *notes, *([claim] if claim else [])]
    return Table(key, title, data, display, ids, tuple(notes), paper=paper)


def _seed_note(an: Analysis, classes, seed_cis) -> str:
    """What the per-class seed-level column resamples; which classes' intervals are unstable."""
    bad = [f"{k}: {sb.reason}" for k, sb in zip(classes, seed_cis) if sb and sb.unstable]
    return (seed_ci_note(an, what="per-seed paired deltas of the class's AUC")
            + (" Unstable here: " + "; ".join(bad) + "." if bad else ""))
