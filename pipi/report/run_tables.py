"""Tables about the runs themselves: coverage (arm x seed), runs used, runs excluded, and the
studies whose entry points do not exist yet."""

from __future__ import annotations

import pandas as pd

from pipi.analysis import OTHER_STUDIES, Analysis, mixed_profile_note, reason_kind
from pipi.report.rows import no_runs
from pipi.report.tables import Table, fmt_auc

__all__ = ["coverage_table", "excluded_table", "other_study_tables", "runs_table"]


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
                                    "test_macro_auc", "recipe", "code_version"]).copy()
    data = data.rename(columns={"test_macro_auc": "logged_test_macro_auc"})
    data["macro_auc"] = data["run_id"].map(rec)
    data["abs_diff"] = (data["macro_auc"] - data["logged_test_macro_auc"]).abs()
    display = pd.DataFrame({
        "backbone": data["backbone"], "cell": data["cell"], "seed": data["seed"],
        "run id": data["run_id"], "macro-AUC (recomputed)": data["macro_auc"].map(fmt_auc),
        "logged test/macro_auc": data["logged_test_macro_auc"].map(lambda x: fmt_auc(x, 4))})
    notes = [(f"{len(data)} runs; test macro-AUC recomputed from predictions over "
              f"{len(ev.classes)} headline classes (from {ev.class_source}): "
              f"{', '.join(ev.class_names)}.")]
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
    counts = reason_kind(data["reason"]).value_counts()
    notes = [f"{n} run(s): {r}" for r, n in counts.items()]
    return Table("excluded", "Runs not aggregated (and why)", data.reset_index(drop=True),
                 display.reset_index(drop=True), (), tuple(notes))



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
        out.append(no_runs(key, title, paper, note))
    return out
