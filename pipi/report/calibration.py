"""Per-class calibration, RGB (a) vs +PI: ECE (15 equal-width bins) and Brier score per headline
class, as the paper's calibration paragraph reports them (its ``calibration_summary.json``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis import FIGURE_PAIR, Analysis, cell_label
from pipi.report.rows import no_runs, run_map
from pipi.report.tables import Table, fmt_delta, fmt_mean_sd
from pipi.stats import brier_score, expected_calibration_error

__all__ = ["calibration_per_class_table", "per_class_calibration"]


def per_class_calibration(labels: np.ndarray, probs: np.ndarray, classes, *,
                          n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(ECE, Brier) per class of ``classes`` for each seed: two (S, K) arrays."""
    ece = np.stack([expected_calibration_error(labels, p, n_bins=n_bins, classes=classes)
                    .per_class for p in probs])
    brier = np.stack([brier_score(labels, p, classes=classes).per_class for p in probs])
    return ece, brier


def _ms(v: np.ndarray) -> tuple[float, float]:
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


def calibration_per_class_table(an: Analysis) -> Table:
    """Per headline class: ECE and Brier of (a) and +PI (mean ± sd over seeds), and the
    delta +PI - (a) paired by seed (mean over the common seeds; < 0: better calibrated)."""
    ev, b = an.evidence, an.headline
    ref, new = FIGURE_PAIR
    title = f"Per-class calibration, {cell_label(ref)} vs {cell_label(new)} ({b})"
    ra, na = ev.arm(b, ref), ev.arm(b, new)
    if ra is None or na is None:
        return no_runs("calibration_per_class", title, "calibration_summary",
                       f"needs runs of both {ref} and {new} ({b})")
    seeds = sorted(set(ra.seeds) & set(na.seeds))
    bins = an.options.ece_bins
    cls = list(ev.classes)
    ea, ba = per_class_calibration(ev.labels, ra.probs, cls, n_bins=bins)
    en, bn = per_class_calibration(ev.labels, na.probs, cls, n_bins=bins)
    ia, inn = [ra.index(s) for s in seeds], [na.index(s) for s in seeds]
    rows, disp = [], []
    for j, k in enumerate(cls):
        row = {"class": ev.names[k], "n_seeds_a": len(ra.seeds), "n_seeds_pi": len(na.seeds),
               "n_paired": len(seeds)}
        for name, va, vn in (("ece", ea[:, j], en[:, j]), ("brier", ba[:, j], bn[:, j])):
            (ma, sa), (mn, sn) = _ms(va), _ms(vn)
            d = vn[inn] - va[ia] if seeds else np.zeros(0)
            row |= {f"{name}_a_mean": ma, f"{name}_a_sd": sa, f"{name}_pi_mean": mn,
                    f"{name}_pi_sd": sn,
                    f"{name}_delta": float(d.mean()) if len(d) else float("nan")}
        rows.append(row)
        disp.append({"class": ev.names[k],
                     f"ECE ({bins} bins) {ref}": fmt_mean_sd(row["ece_a_mean"], row["ece_a_sd"]),
                     f"ECE {new}": fmt_mean_sd(row["ece_pi_mean"], row["ece_pi_sd"]),
                     "Δ ECE": fmt_delta(row["ece_delta"]),
                     f"Brier {ref}": fmt_mean_sd(row["brier_a_mean"], row["brier_a_sd"]),
                     f"Brier {new}": fmt_mean_sd(row["brier_pi_mean"], row["brier_pi_sd"]),
                     "Δ Brier": fmt_delta(row["brier_delta"])})
    data = pd.DataFrame(rows)
    worst = {m: data.loc[data[f"{m}_delta"].idxmax()] for m in ("ece", "brier")}
    notes = [(f"One-vs-rest per class on the test frames of each seed: ECE with {bins} "
              "equal-width bins, Brier = mean (p - 1[y = k])^2; mean ± sd over seeds; Δ = "
              f"{new} - {ref} paired by seed (lower is better)."),
             ("Largest regression under " + new + ": " + "; ".join(
                 f"{m.upper()} {fmt_delta(r[f'{m}_delta'])} ({r['class']})"
                 for m, r in worst.items()) + " (the paper: no class regresses by more than "
              "0.01 ECE or Brier).")]
    ids = tuple({ref: run_map(ra), new: run_map(na)} for _ in rows)
    return Table("calibration_per_class", title, data, pd.DataFrame(disp), ids, tuple(notes),
                 paper="calibration_summary")
