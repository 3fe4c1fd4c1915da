"""The PI-TTA table: each test-time-adaptation probe of ``ablate -P study=pi_tta`` against the
``a`` run it adapted, paired by seed (paper section "Physics-Informed Test-Time Adaptation")."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis import PI_TTA_ARMS, PI_TTA_PAPER, Analysis, cell_label, compare_pairs
from pipi.report.rows import (
    base_run_notes,
    bootstrap_note,
    ci_cols,
    delta_cis,
    no_runs,
    seed_ci_note,
)
from pipi.report.tables import Table, fmt_auc, fmt_mean_sd, fmt_p

__all__ = ["NULL_NOTE", "pi_tta_table"]

NULL_NOTE = ("Null by construction: the paper's three probes keep the backbone and the classifier "
             "frozen and adapt a module that is not on the classifier's path, so their class "
             "predictions equal the baseline's (Δ = 0, max |Δp| = 0); the paper reports the same "
             "null result (Δ = +0.001, -0.002, -0.004 on seed 42, none significant). The logged "
             "probe loss before -> after shows what the adaptation did to the module. bn_tent is "
             "not in the paper: it adapts BatchNorm on the classifier's path, so its predictions "
             "can change.")


def _logged(an: Analysis, run_ids, column: str) -> float:
    runs = an.evidence.runs
    if column not in runs:
        return float("nan")
    v = runs.set_index("run_id")[column].reindex(list(run_ids)).to_numpy(float)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def pi_tta_table(an: Analysis) -> Table:
    """Per probe: paired Δ macro-AUC vs (a) (mean ± sd over seeds, sign-flip p, bootstrap CI),
    the largest probability change and the share of changed argmax predictions against the
    paired (a) run (from predictions), and the logged probe loss before -> after."""
    ev, b = an.evidence, an.headline
    title = f"PI-TTA probes vs the RGB-only (a) runs they adapt ({b})"
    probes = [c for c in PI_TTA_ARMS if ev.arm(b, c)]
    probes += [c for c in ev.cells(b) if c.startswith("a@tta_") and c not in probes]
    if not probes:
        return no_runs("pi_tta", title, "sec:pi-tta-methods",
                       "no PI-TTA runs; run `mlflow run . -e ablate -P study=pi_tta`")
    notes: list[str] = []
    if ev.arm(b, "a") is None:
        notes.append(f"a ({b}): no runs, so no paired deltas")
    comps = {c.new: c for c in compare_pairs(an, [("a", p) for p in probes], family="pi_tta",
                                             backbone=b, notes=notes)}
    rows, disp, ids = [], [], []
    ref = ev.arm(b, "a")
    for probe in probes:
        arm, c = ev.arm(b, probe), comps.get(probe)
        ok = c is not None and c.available
        d = c.deltas if ok else np.zeros(0)
        diff = [float(np.abs(arm.probs[arm.index(s)] - ref.probs[ref.index(s)]).max())
                for s in c.seeds] if ok else []
        flips = [float(np.mean(arm.probs[arm.index(s)].argmax(1) != ref.probs[ref.index(s)]
                               .argmax(1))) for s in c.seeds] if ok else []
        before = _logged(an, arm.run_ids, "tta_loss_before")
        after = _logged(an, arm.run_ids, "tta_loss_after")
        rows.append({"probe": probe, "paper_probe": probe in PI_TTA_PAPER,
                     "n_seeds": len(arm.seeds), "macro_auc_mean": float(arm.macro.mean()),
                     "delta_mean": float(d.mean()) if ok else float("nan"),
                     "delta_sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     "max_abs_prob_diff": max(diff) if diff else float("nan"),
                     "argmax_changed": float(np.mean(flips)) if flips else float("nan"),
                     "logged_loss_before": before, "logged_loss_after": after,
                     **ci_cols(c if ok else None)})
        disp.append({"probe": cell_label(probe) + ("" if probe in PI_TTA_PAPER else " *"),
                     "seeds": len(arm.seeds), "macro-AUC": fmt_auc(rows[-1]["macro_auc_mean"]),
                     "Δ vs (a) (k/n +)": (f"{fmt_mean_sd(d.mean(), rows[-1]['delta_sd'])} "
                                          f"({c.sign_text})" if ok else "n/a"),
                     "sign-flip p": fmt_p(c.sign_flip_p) if ok else "",
                     **delta_cis(an, c if ok else None, digits=4),
                     "max |Δp|": f"{max(diff):.2g}" if diff else "n/a",
                     "argmax changed": f"{np.mean(flips):.1%}" if flips else "n/a",
                     "probe loss before -> after (logged)": (
                         f"{before:.4g} -> {after:.4g}" if np.isfinite([before, after]).all()
                         else "n/a")})
        ids.append({probe: arm.runs()} | ({"a": dict(c.ref_runs)} if ok else {}))
        if ok:
            notes.extend(n for n in c.notes if n not in notes)
    notes = [NULL_NOTE, ("* not a paper probe. Δ = probe - (a) test macro-AUC, paired by seed "
                         "with the (a) run of the same seed; max |Δp| and argmax changed "
                         "compare the two runs' test predictions frame by frame."),
             bootstrap_note(an), seed_ci_note(an, comps.values()), *notes,
             *base_run_notes(ev, b, "a", probes)]
    return Table("pi_tta", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="sec:pi-tta-methods")
