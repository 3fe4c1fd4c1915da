"""The headline tables: per-frame, eight-cell ablation, paired tests, cross-backbone."""

from __future__ import annotations

import re

import pandas as pd

from pipi.analysis import (
    ABLATION_CELLS,
    BACKBONES,
    CLASS_STOUFFER_LABEL,
    PAIRED_TESTS,
    PER_FRAME_CELLS,
    STOUFFER_LABEL,
    Analysis,
    adjust_comparisons,
    cell_label,
    compare_cells,
    compare_pairs,
    missing_notes,
    seeds_text,
)
from pipi.cells import Arm
from pipi.report.probes import probe_rows
from pipi.report.rows import (
    arm_summary,
    bootstrap_note,
    ci_cols,
    ci_header,
    ci_text,
    delta_cis,
    no_runs,
    present_pairs,
    run_map,
    seed_ci_header,
    seed_ci_note,
    seed_ci_text,
)
from pipi.report.tables import (
    Table,
    fmt_auc,
    fmt_delta,
    fmt_mean_sd,
    fmt_p,
    fmt_z,
)

__all__ = ["LIMITATION_CELLS", "cross_backbone_table", "eight_cell_table",
           "imported_per_frame_tables", "limitation_table", "paired_tests_tables",
           "per_frame_table"]

#: The paper's limitation experiment: the C1 summaries (+ C2) on a frozen ImageNet backbone
#: that saw no capsule frame, against the same without C1 (resnet50 in the paper: +0.042).
LIMITATION_CELLS = ("b_frozen", "c1_frozen")


def per_frame_table(an: Analysis) -> Table:
    """Paper Table per-frame: cross-seed macro-AUC of a, pi, distill; paired delta vs a."""
    return _per_frame(an, "")


def imported_per_frame_tables(an: Analysis) -> list[Table]:
    """The per-frame table of each source of imported runs (``a (released)``, ...): its
    arms paired with its own ``a``, never with trained runs."""
    ev, b = an.evidence, an.headline
    arms = [Arm.parse(c) for c in ev.cells(b)]
    labels = sorted({a.source for a in arms if not a.variant} - {""})
    return [_per_frame(an, label) for label in labels]


def _per_frame(an: Analysis, label: str) -> Table:
    ev, b = an.evidence, an.headline

    def arm_of(cell: str) -> str:
        return f"{cell} ({label})" if label else cell

    key = "per_frame" + (f"_{re.sub(r'[^0-9A-Za-z]+', '_', label)}" if label else "")
    title = f"Per-frame test macro-AUC, mean ± sd over seeds ({b})" + (
        f": imported runs ({label})" if label else "")
    cells = [arm_of(c) for c in PER_FRAME_CELLS]
    base = arm_of("a")
    if not any(ev.arm(b, c) for c in cells):
        return no_runs(key, title, "tab:per-frame", f"no runs of cells {tuple(cells)}")
    notes = missing_notes(ev, b, cells)
    comps = {c.new: c for c in compare_cells(an, baseline=base, cells=cells,
                                             family=f"{key}_vs_a", backbone=b, notes=notes)}
    rows, disp, ids = [], [], []
    for cell in cells:
        arm, comp = ev.arm(b, cell), comps.get(cell)
        s = arm_summary(arm)
        ok = comp is not None and comp.available
        rows.append({"cell": cell, "configuration": cell_label(cell), **s,
                     "delta_vs_a": comp.mean_delta if ok else float("nan"),
                     "n_positive": comp.n_positive if ok else None,
                     "n_paired": len(comp.seeds) if ok else 0,
                     "sign_flip_p": comp.sign_flip_p if ok else float("nan"),
                     **ci_cols(comp if ok else None)})
        disp.append({"Configuration": cell_label(cell),
                     "seeds": s["seeds"] or "no runs",
                     "Macro-AUC": fmt_mean_sd(s["mean"], s["sd"]) if arm else "no runs",
                     "paired Δ vs (a)": (f"{fmt_delta(comp.mean_delta)} ({comp.sign_text} +)"
                                         if ok else ("—" if cell == base else "n/a")),
                     "sign-flip p": fmt_p(comp.sign_flip_p) if ok else "",
                     **delta_cis(an, comp if ok else None)})
        ids.append({cell: run_map(arm)} | ({base: dict(comp.ref_runs)} if ok else {}))
    if label:
        notes.append(f"Runs imported from outside files (source {label!r}, `import` entry "
                     f"point); (a) here is {base}, never a trained run.")
    notes.append("sd: sample standard deviation over seeds (ddof = 1). Δ = cell - (a), paired "
                 "by seed; 'k/n +': seeds with a positive delta. Sign-flip p: exact "
                 "permutation of the per-seed delta signs.")
    notes += [bootstrap_note(an), seed_ci_note(an, comps.values())]
    if not label:  # the foundation-model probes sit in the trained table
        prows, pdisp, pids, pnotes = probe_rows(an)
        rows, disp, ids, notes = rows + prows, disp + pdisp, ids + pids, notes + pnotes
    return Table(key, title, pd.DataFrame(rows), pd.DataFrame(disp).fillna(""),
                 tuple(ids), tuple(notes), paper="tab:per-frame")


def eight_cell_table(an: Analysis) -> Table:
    """Paper Table eight-cell: mean and sd per cell, deltas vs (a) and vs (b)."""
    ev, b = an.evidence, an.headline
    title = f"Eight-cell ablation: test macro-AUC over seeds ({b})"
    seq = [c for c in ABLATION_CELLS if c != "a" and ev.arm(b, c)]
    if not seq:
        return no_runs("eight_cell", title, "tab:eight-cell",
                        f"no sequence-cell runs ({', '.join(ABLATION_CELLS[1:])}) for {b}; "
                        "run `mlflow run . -e ablate -P study=eight_cell`")
    notes = missing_notes(ev, b, ABLATION_CELLS)
    vs_a = {c.new: c for c in compare_cells(an, baseline="a", cells=ABLATION_CELLS,
                                            family="eight_cell_vs_a", backbone=b, notes=notes)}
    vs_b = {c.new: c for c in compare_cells(an, baseline="b", cells=ABLATION_CELLS[2:],
                                            family="eight_cell_vs_b", backbone=b, notes=notes)}
    rows, disp, ids = [], [], []
    for cell in ABLATION_CELLS:
        arm = ev.arm(b, cell)
        s = arm_summary(arm)
        ca, cb = vs_a.get(cell), vs_b.get(cell)
        oka, okb = ca is not None and ca.available, cb is not None and cb.available
        rows.append({"cell": cell, "label": cell_label(cell), **s,
                     "delta_vs_a": ca.mean_delta if oka else float("nan"),
                     "n_positive_vs_a": ca.n_positive if oka else None,
                     "sign_flip_p_vs_a": ca.sign_flip_p if oka else float("nan"),
                     "sign_flip_p_vs_a_bh": ca.adjusted.get("sign_flip_bh", float("nan"))
                     if oka else float("nan"),
                     "delta_vs_b": cb.mean_delta if okb else float("nan"),
                     "n_positive_vs_b": cb.n_positive if okb else None,
                     **ci_cols(ca if oka else None, "vs_a_"),
                     **ci_cols(cb if okb else None, "vs_b_")})
        disp.append({"Cell": cell_label(cell), "seeds": s["seeds"] or "no runs",
                     "Mean macro-AUC": fmt_auc(s["mean"], 4) if arm else "no runs",
                     "σ": fmt_auc(s["sd"]) if arm else "",
                     "Δ vs (a)": f"{fmt_delta(ca.mean_delta)} ({ca.sign_text} +)" if oka else "",
                     "sign-flip p vs (a), BH": (
                         f"{fmt_p(ca.sign_flip_p)} ({fmt_p(ca.adjusted.get('sign_flip_bh'))})"
                         if oka else ""),
                     **{f"{k} vs (a)": v for k, v in delta_cis(an, ca if oka else None).items()},
                     "Δ vs (b)": f"{fmt_delta(cb.mean_delta)} ({cb.sign_text} +)" if okb else "",
                     **{f"{k} vs (b)": v for k, v in delta_cis(an, cb if okb else None).items()}})
        row_ids = {cell: run_map(arm)}
        if oka:
            row_ids["a"] = dict(ca.ref_runs)
        if okb:
            row_ids["b"] = dict(cb.ref_runs)
        ids.append(row_ids)
    notes.append("BH: Benjamini-Hochberg over the comparisons against (a) (one family).")
    notes += [bootstrap_note(an), seed_ci_note(an, [*vs_a.values(), *vs_b.values()])]
    return Table("eight_cell", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:eight-cell")



def limitation_table(an: Analysis) -> Table:
    """The limitation experiment per backbone that has both arms: mean and sd of each, Δ
    c1_frozen - b_frozen paired by seed with its intervals (the paper: +0.042 on an
    ImageNet-only ResNet-50, flat with capsule fine-tuning)."""
    ev = an.evidence
    base, cell = LIMITATION_CELLS
    title = "Limitation experiment: C1 summaries on a frozen ImageNet backbone (c1_frozen vs b_frozen)"
    backbones = [b for b in ev.backbones() if ev.arm(b, base) and ev.arm(b, cell)]
    if not backbones:
        return no_runs("limitation", title, "sec:limitations",
                       "no backbone has runs of both b_frozen and c1_frozen; run `mlflow run . "
                       "-e ablate -P study=limitation` (ResNet-50 with weights=imagenet, the "
                       "paper's case)")
    rows, disp, ids, notes, comps = [], [], [], [], []
    for b in backbones:
        (c,) = compare_cells(an, baseline=base, cells=LIMITATION_CELLS, family="limitation",
                             backbone=b, notes=notes)
        sb, sc = arm_summary(ev.arm(b, base)), arm_summary(ev.arm(b, cell))
        ok = c.available
        comps.append(c)
        rows.append({"backbone": b, "b_frozen_mean": sb["mean"], "b_frozen_sd": sb["sd"],
                     "c1_frozen_mean": sc["mean"], "c1_frozen_sd": sc["sd"],
                     "delta": c.mean_delta if ok else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     **ci_cols(c if ok else None, "")})
        disp.append({"Backbone (frozen, ImageNet)": b,
                     "RGB + C2 (b_frozen)": fmt_mean_sd(sb["mean"], sb["sd"]),
                     "+ C1_8 (c1_frozen)": fmt_mean_sd(sc["mean"], sc["sd"]),
                     "Δ": f"{fmt_delta(c.mean_delta)} ({c.sign_text} +)" if ok else "",
                     "sign-flip p": fmt_p(c.sign_flip_p) if ok else "",
                     **delta_cis(an, c if ok else None)})
        ids.append({base: run_map(ev.arm(b, base)), cell: run_map(ev.arm(b, cell))})
    notes.append("Both cells embed frames with the frozen backbone of a probe run (ImageNet "
                 "weights, no capsule fine-tuning); Δ = c1_frozen - b_frozen, paired by seed.")
    notes += [bootstrap_note(an), seed_ci_note(an, comps)]
    return Table("limitation", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="sec:limitations")


def paired_tests_tables(an: Analysis) -> tuple[Table, Table]:
    """Paper Table paired-tests (one row per pair) and its per-seed detail."""
    b = an.headline
    title = f"Paired significance of key cell pairs ({b})"
    pairs, skipped = present_pairs(an, PAIRED_TESTS, b)
    if not pairs:
        t = no_runs("paired_tests", title, "tab:paired-tests",
                     f"no pair of {PAIRED_TESTS} has runs of both arms")
        return t, no_runs("paired_tests_per_seed", "Paired tests per seed", "tab:paired-tests")
    notes: list[str] = []
    comps = compare_pairs(an, pairs, family="paired_tests", backbone=b, notes=notes)
    rows, disp, ids = [], [], []
    drows, ddisp, dids = [], [], []
    for c in comps:
        bt = c.bootstrap
        rows.append({
            "reference": c.reference, "new": c.new, "n_seeds": len(c.seeds),
            "seeds": seeds_text(c.seeds), "mean_delta": c.mean_delta,
            "n_positive": c.n_positive,
            **{f"delong_z_seed{s}": z for s, z in zip(c.seeds, c.delong_z, strict=True)},
            "stouffer_z": c.stouffer_z, "stouffer_p": c.stouffer_p,
            "stouffer_p_bonferroni": c.adjusted.get("stouffer_bonferroni", float("nan")),
            "stouffer_p_bh": c.adjusted.get("stouffer_bh", float("nan")),
            "class_stouffer_z": c.class_stouffer_z, "class_stouffer_p": c.class_stouffer_p,
            "sign_flip_p": c.sign_flip_p, "sign_flip_exact": c.sign_flip_exact,
            "sign_flip_p_bh": c.adjusted.get("sign_flip_bh", float("nan")),
            "wilcoxon_p": c.wilcoxon_p, **ci_cols(c)})
        disp.append({
            "Comparison": f"({c.reference}) vs ({c.new})", "seeds": seeds_text(c.seeds),
            "mean Δ (k/n +)": f"{fmt_delta(c.mean_delta)} ({c.sign_text})",
            "DeLong z per seed": " ".join(fmt_z(z) for z in c.delong_z),
            f"{STOUFFER_LABEL} z": fmt_z(c.stouffer_z),
            "Stouffer p (Bonf / BH)": (f"{fmt_p(c.stouffer_p)} ({fmt_p(c.adjusted.get('stouffer_bonferroni'))}"
                                       f" / {fmt_p(c.adjusted.get('stouffer_bh'))})"),
            CLASS_STOUFFER_LABEL: f"{fmt_z(c.class_stouffer_z)} (p {fmt_p(c.class_stouffer_p)})",
            "sign-flip p (BH)": f"{fmt_p(c.sign_flip_p)} ({fmt_p(c.adjusted.get('sign_flip_bh'))})",
            ci_header(an, "percentile"): ci_text(bt, an, kind="percentile"),
            ci_header(an): ci_text(bt, an),
            seed_ci_header(an): seed_ci_text(c),
            seed_ci_header(an, "percentile"): seed_ci_text(c, kind="percentile")})
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
    notes += [
        ("z > 0 when the new arm is better (delta = new - reference); the paper prints the "
         "opposite sign for (b) vs (b+) etc."),
        (f"{STOUFFER_LABEL}: sum of per-seed DeLong z / sqrt(n). Seeds share one test set, so "
         "their z-scores are correlated and this p-value is anti-conservative."),
        ("Macro z, two forms. pipi's (the Stouffer column): per seed, the DeLong z of the "
         "macro-AUC delta with the covariance between classes, then Stouffer over seeds. The "
         "published code's (compute_paired_tests.py, the form behind the paper's z): per class, "
         "Stouffer over seeds of the per-class DeLong z, then Stouffer over the classes "
         "(sum / sqrt(K)); it treats classes, which share the test frames, as independent "
         "too. Its p is not adjusted."),
        f"Sign-flip: exact when 2^seeds <= {an.options.n_permutations}.",
        bootstrap_note(an), seed_ci_note(an, comps),
        ("Bonferroni and BH are applied once over the comparisons of this table (one family "
         "per kind of p-value).")]
    if skipped:
        notes.append(f"not tested (an arm has no runs): {', '.join(skipped)}")
    main = Table("paired_tests", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:paired-tests")
    detail = Table("paired_tests_per_seed", f"Paired tests per seed ({b})", pd.DataFrame(drows),
                   pd.DataFrame(ddisp), tuple(dids),
                   (("DeLong: paired test of the macro-AUC over the headline classes on the "
                     "same frames; McNemar at the argmax operating point."),),
                   paper="tab:paired-tests")
    return main, detail


def cross_backbone_table(an: Analysis) -> Table:
    """Paper Table cross-backbone: a and pi per backbone, paired delta."""
    ev = an.evidence
    title = "Per-frame cross-backbone replication: (a) RGB-only vs +PI"
    backbones = [bb for bb in dict.fromkeys([*BACKBONES, *ev.backbones()])
                 if bb in BACKBONES or ev.arm(bb, "a") or ev.arm(bb, "pi")]
    present = [bb for bb in backbones if ev.arm(bb, "a") and ev.arm(bb, "pi")]
    if not present:
        return no_runs("cross_backbone", title, "tab:cross-backbone",
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
        sa, sp = arm_summary(ra), arm_summary(pa)
        ok = c is not None and c.available
        rows.append({"backbone": bb, "a_mean": sa["mean"], "a_sd": sa["sd"],
                     "a_seeds": sa["seeds"], "pi_mean": sp["mean"], "pi_sd": sp["sd"],
                     "pi_seeds": sp["seeds"], "delta": c.mean_delta if ok else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "n_paired": len(c.seeds) if ok else 0,
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     "sign_flip_p_bh": c.adjusted.get("sign_flip_bh", float("nan"))
                     if ok else float("nan"), **ci_cols(c if ok else None)})
        disp.append({"Backbone": bb + (" (headline)" if bb == an.headline else ""),
                     "RGB-only (a)": fmt_mean_sd(sa["mean"], sa["sd"]) if ra else "no runs",
                     "+PI 5-channel": fmt_mean_sd(sp["mean"], sp["sd"]) if pa else "no runs",
                     "Paired Δ": f"{fmt_delta(c.mean_delta)} ({c.sign_text} +)" if ok else "n/a",
                     "sign-flip p (BH)": (f"{fmt_p(c.sign_flip_p)} "
                                          f"({fmt_p(c.adjusted.get('sign_flip_bh'))})" if ok else ""),
                     **delta_cis(an, c if ok else None)})
        ids.append({"a": run_map(ra), "pi": run_map(pa)})
        if not (ra and pa):
            notes.append(f"{bb}: " + ", ".join(f"{x} has no runs" for x, arm in
                                             (("a", ra), ("pi", pa)) if arm is None))
        elif c is not None:
            notes.extend(n for n in c.notes if n not in notes)
    notes += ["BH over the backbones (one family).", bootstrap_note(an),
              seed_ci_note(an, comps.values())]
    return Table("cross_backbone", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:cross-backbone")
