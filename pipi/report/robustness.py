"""The robustness table and figure (paper Table "robustness"): each perturbation's RGB and +PI
test macro-AUC, the +PI lift across seeds and the paired DeLong test per seed, from the
``<cell>@perturb_<name>`` children of ``mlflow run . -e robustness``."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipi.analysis import Analysis, compare_pairs
from pipi.cells import Arm
from pipi.probes.perturb import KINDS, PERTURBATIONS
from pipi.report.rows import ci_cols, delta_cis, no_runs, run_map, seed_ci_note
from pipi.report.tables import Table, fmt_mean_sd, fmt_p, fmt_z

__all__ = ["REFERENCE", "robustness_figures", "robustness_table", "robustness_arm"]

#: The reference arm of the lift; every other per-frame cell with perturbed runs is compared
#: with it (the paper: +PI vs RGB).
REFERENCE = "a"


def robustness_arm(cell: str, perturbation: str) -> str:
    """The arm of a cell's runs under a perturbation: ``pi@perturb_jpeg25``."""
    return str(replace(Arm.parse(cell), variant=f"perturb_{perturbation}"))


def _cells(an: Analysis, backbone: str) -> list[str]:
    """Cells (other than the reference) that have perturbed runs on ``backbone``."""
    arms = [Arm.parse(c) for c in an.evidence.cells(backbone)]
    found = {str(a.base) for a in arms if a.variant.startswith("perturb_")}
    return sorted(found - {REFERENCE}, key=lambda c: (c != "pi", c))


def _backbones(an: Analysis) -> list[str]:
    ev = an.evidence
    return [b for b in ev.backbones()
            if any(ev.arm(b, robustness_arm(REFERENCE, p)) for p in PERTURBATIONS)
            and _cells(an, b)]


def robustness_table(an: Analysis) -> Table:
    """Per (backbone, cell, perturbation): RGB and cell macro-AUC (mean ± sd over seeds),
    lift = cell - RGB paired by seed (mean ± sd, k/n positive), per-seed paired DeLong z, p."""
    title = "Robustness to test-image perturbations: +PI lift per perturbation"
    backbones = _backbones(an)
    if not backbones:
        return no_runs("robustness", title, "tab:robustness",
                       "no perturbed runs of both a and another cell; run `mlflow run . -e "
                       "robustness -P runs=<a and pi run ids>`")
    ev = an.evidence
    rows, disp, ids, notes = [], [], [], []
    for b in backbones:
        for cell in _cells(an, b):
            pairs = [(robustness_arm(REFERENCE, p), robustness_arm(cell, p)) for p in PERTURBATIONS
                     if ev.arm(b, robustness_arm(REFERENCE, p)) and ev.arm(b, robustness_arm(cell, p))]
            comps = {c.new: c for c in compare_pairs(an, pairs, family=f"robustness_{b}_{cell}",
                                                     backbone=b, notes=notes)}
            for name, spec in PERTURBATIONS.items():
                ref, new = ev.arm(b, robustness_arm(REFERENCE, name)), ev.arm(b, robustness_arm(cell, name))
                c = comps.get(robustness_arm(cell, name))
                if ref is None and new is None:
                    continue
                ok = c is not None and c.available
                d = c.deltas if ok else np.zeros(0)
                rm, nm = (ref.macro if ref else np.zeros(0)), (new.macro if new else np.zeros(0))
                per_seed = ("; ".join(f"s{s}: z={fmt_z(z)}, p={fmt_p(p)}" for s, z, p in
                                      zip(c.seeds, c.delong_z, c.delong_p)) if ok else "")
                rows.append({"backbone": b, "cell": cell, "perturbation": name,
                             "kind": spec.kind, "level": spec.level, "severity": spec.severity,
                             "n_seeds": len(c.seeds) if ok else 0,
                             "rgb_mean": float(rm.mean()) if len(rm) else float("nan"),
                             "new_mean": float(nm.mean()) if len(nm) else float("nan"),
                             "lift_mean": float(d.mean()) if ok else float("nan"),
                             "lift_sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                             "n_positive": c.n_positive if ok else None,
                             "delong_z": [float(z) for z in c.delong_z] if ok else [],
                             "delong_p": [float(p) for p in c.delong_p] if ok else [],
                             "stouffer_z": c.stouffer_z if ok else float("nan"),
                             "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                             **ci_cols(c if ok else None)})
                sd = lambda m: float(m.std(ddof=1)) if len(m) > 1 else float("nan")  # noqa: E731
                disp.append({"backbone": b, "perturbation": spec.label,
                             "RGB (a) macro-AUC": fmt_mean_sd(rows[-1]["rgb_mean"], sd(rm)),
                             f"{cell} macro-AUC": fmt_mean_sd(rows[-1]["new_mean"], sd(nm)),
                             "lift (k/n +)": (f"{fmt_mean_sd(d.mean(), rows[-1]['lift_sd'])} "
                                              f"({c.sign_text})" if ok else "n/a"),
                             **delta_cis(an, c if ok else None, digits=4),
                             "paired DeLong per seed": per_seed})
                ids.append({robustness_arm(REFERENCE, name): run_map(ref),
                            robustness_arm(cell, name): run_map(new)})
    notes = [("Each perturbation is applied to the uint8 test frame at the run's evaluation "
              "size as the last step before normalisation; the prior of a 5-channel run is "
              "recomputed on the perturbed pixels; Gaussian noise is seeded per frame so both "
              "arms see identical noise. Lift = cell - (a), paired by seed; DeLong = paired "
              "DeLong test of the macro-AUC over the headline classes per seed (z > 0: the "
              "cell is better)."), seed_ci_note(an), *notes]
    return Table("robustness", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids), tuple(notes),
                 paper="tab:robustness")


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def robustness_figures(table: Table) -> tuple[dict, dict, dict]:
    """The lift-vs-strength figure: one line per perturbation family (and cell), from the
    baseline (strength 0) outwards; error bars = sd over seeds."""
    if not table.ok or table.data.empty:
        return {}, {}, {}
    data = table.data
    fig = Figure(figsize=(7.0, 4.4))
    ax = fig.add_subplot(1, 1, 1)
    for (b, cell), grp in data.groupby(["backbone", "cell"], sort=False):
        base = grp[grp["kind"] == "none"]
        for kind in KINDS[1:]:
            fam = grp[grp["kind"] == kind]
            if kind == "brightness":  # two directions: one line each
                parts = [(f"{kind} -", fam[fam["level"] < 0]), (f"{kind} +", fam[fam["level"] > 0])]
            else:
                parts = [(kind, fam)]
            for label, part in parts:
                if part.empty:
                    continue
                pts = pd.concat([base, part]).sort_values("severity")
                ax.errorbar(pts["severity"], pts["lift_mean"], yerr=pts["lift_sd"].fillna(0),
                            marker="o", capsize=3, label=f"{cell} vs a, {label} ({b})")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("perturbation strength (JPEG: (100 - q)/100; brightness: |shift|; noise: sigma)")
    ax.set_ylabel("lift in test macro-AUC (cell - a)")
    ax.set_title("+PI lift vs perturbation strength")
    ax.legend(fontsize=7)
    runs = {k: v for row in table.run_ids for k, v in row.items()}
    caption = ("Lift of each cell over (a) in test macro-AUC against perturbation strength, one "
               "line per perturbation family starting at the unperturbed baseline; error bars: "
               "sd over seeds.")
    return {"robustness_lift": _png(fig)}, {"robustness_lift": caption}, {"robustness_lift": runs}
