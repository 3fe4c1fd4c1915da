"""Per-source breakdown of the headline arms: on a dataset whose frames name their source
(several capsule vendors or centres, e.g. Capsule Vision 2024's KID, KVASIR, SEE-AI, AIIMS),
the macro-AUC of each arm within each source and the lift of each breakdown pair there."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis import BREAKDOWN_PAIRS, Analysis
from pipi.report.breakdown import group_macro_aucs
from pipi.report.rows import no_runs, present_pairs
from pipi.report.tables import Table, fmt_delta, fmt_mean_sd

__all__ = ["per_source_table"]


def per_source_table(an: Analysis) -> Table | None:
    """Per source and breakdown pair: macro-AUC of both arms (mean and sd over the paired
    seeds, over the headline classes with positives and negatives in that source) and the
    lift (new - reference); None when the test frames name no source."""
    ev, b = an.evidence, an.headline
    if ev.sources is None or not len(ev.sources):
        return None
    title = f"Per-source macro-AUC and lift (mean over seeds) ({b})"
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS, b)
    if not pairs:
        return no_runs("per_source", title, "",
                       f"none of the pairs {BREAKDOWN_PAIRS} has runs of both arms")
    rows, ids = [], []
    for ref, new in pairs:
        ra, na = ev.arm(b, ref), ev.arm(b, new)
        seeds = sorted(set(ra.seeds) & set(na.seeds))
        for src, m, cls, r, n in group_macro_aucs(ev, ra, na, seeds, ev.sources):
            d = n - r
            rows.append({"reference": ref, "new": new, "source": src, "n_frames": int(m.sum()),
                         "classes_scored": len(cls), "n_seeds": len(seeds),
                         "ref_macro_auc": float(np.mean(r)),
                         "ref_sd": float(np.std(r, ddof=1)) if len(r) > 1 else float("nan"),
                         "new_macro_auc": float(np.mean(n)),
                         "new_sd": float(np.std(n, ddof=1)) if len(n) > 1 else float("nan"),
                         "lift": float(np.mean(d)), "n_positive": int((d > 0).sum())})
            ids.append({ref: {s: ra.runs()[s] for s in seeds},
                        new: {s: na.runs()[s] for s in seeds}})
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "Comparison": [f"({r}) vs ({n})" for r, n in zip(data["reference"], data["new"])],
        "source": data["source"], "frames": data["n_frames"],
        "classes scored": data["classes_scored"],
        "ref macro-AUC": [fmt_mean_sd(m, s) for m, s in zip(data["ref_macro_auc"], data["ref_sd"])],
        "new macro-AUC": [fmt_mean_sd(m, s) for m, s in zip(data["new_macro_auc"], data["new_sd"])],
        "lift": [fmt_delta(x) if c else "not scorable (one class)"
                 for x, c in zip(data["lift"], data["classes_scored"])],
        "k/n seeds +": [f"{p}/{n}" for p, n in zip(data["n_positive"], data["n_seeds"])]})
    notes = (("Per source: macro-AUC over the headline classes with positive and negative "
              "test frames from that source, per seed, then mean (sd) over the paired seeds; "
              "the lift is new - reference."),)
    return Table("per_source", title, data, display, tuple(ids), notes)
