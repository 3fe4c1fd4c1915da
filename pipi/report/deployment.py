"""Paper Table deployment-options: the four ways to deploy the prior's training-time lift, with
cross-seed macro-AUC, the strip-and-serve retention and their training and inference costs.

* RGB-only baseline (cell ``a``), input fusion (``pi``), distillation (``distill``);
* strip-and-serve: the ``pi`` runs scored with both prior channels zeroed (``pi@zero_both``, the
  ``channel_infer`` children), which is what the registered ``pi`` model serves with
  ``params={"strip_prior": true}``. The retention of the lift is
  ``(zero_both - a) / (pi - a)`` (means over the seeds the three arms share), with a bootstrap
  interval resampling test videos (same draws for both deltas) and one resampling seeds.

Costs come from the cell table (:mod:`pipi.cells`): input channels, whether the analytic prior
is computed in training and at inference, and how many trainings the recipe needs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis import Analysis, cell_label, collect_warnings, compare_cells, missing_notes
from pipi.cells import Arm, get_cell
from pipi.report.rows import arm_summary, delta_cis, no_runs, run_map, seed_ci_note
from pipi.report.tables import Table, fmt_ci, fmt_delta, fmt_mean_sd
from pipi.stats import bootstrap_ci

__all__ = ["DEPLOYMENT_RECIPES", "STRIP_AND_SERVE", "deployment_table", "recipe_costs"]

STRIP_AND_SERVE = "pi@zero_both"
#: (recipe, arm) rows of the paper's table, in its order.
DEPLOYMENT_RECIPES = (("RGB-only (baseline)", "a"), ("Input fusion (+PI)", "pi"),
                      ("Distillation", "distill"), ("Strip-and-serve", STRIP_AND_SERVE))
SERVED_AS = 'registered pi model served with params={"strip_prior": true}'


def recipe_costs(arm: str) -> dict:
    """Training and inference cost of an arm's recipe, from its cell configuration."""
    strip = arm == STRIP_AND_SERVE
    cell = get_cell(Arm.parse(arm).cell)
    train_ch = cell.input_channels
    train_prior = train_ch == 5 or cell.distill
    infer_ch = 3 if strip else cell.input_channels
    infer_prior = cell.input_channels == 5 and not strip
    what = ("the input-fusion run itself, no extra training" if strip else
            "P_blood decoder as an auxiliary target" if cell.distill else "")
    return {"trainings": 1, "train_channels": train_ch, "train_prior": train_prior,
            "infer_channels": infer_ch, "infer_prior": infer_prior,
            "training": f"one ({train_ch}-ch{'; ' + what if what else ''})",
            "inference": (f"{infer_ch}-ch effective (5-ch input, prior channels zeroed)" if strip
                          else f"{infer_ch}-ch" + (" (RGB + prior)" if infer_prior else "")),
            "prior at inference": "computed" if infer_prior else "not computed"}


def _seed_retention(an: Analysis, num: np.ndarray, den: np.ndarray, notes: list[str]):
    """Seed-level bootstrap (BCa) of mean(num) / mean(den), resampling seeds."""
    if len(num) < 2:
        return None

    def ratio(x, y):
        d = float(np.mean(y))
        return float(np.mean(x)) / d if d > 0 else float("nan")

    o = an.options
    with collect_warnings(notes):
        return bootstrap_ci((num, den), ratio, n_resamples=o.n_resamples,
                            confidence_level=o.confidence_level, unit="seeds", rng=o.seed)


def deployment_table(an: Analysis) -> Table:
    """Paper Table deployment-options (module docstring)."""
    ev, b = an.evidence, an.headline
    title = f"Deployment options ({b}): macro-AUC, training and inference cost"
    arms = [arm for _, arm in DEPLOYMENT_RECIPES]
    if not any(ev.arm(b, a) for a in arms):
        return no_runs("deployment_options", title, "tab:deployment-options",
                       f"no runs of {arms}")
    notes = missing_notes(ev, b, arms)
    comps = {c.new: c for c in compare_cells(an, baseline="a", cells=arms,
                                             family="deployment_vs_a", backbone=b, notes=notes)}
    # retention of the lift over the seeds a, pi and pi@zero_both share
    ra, rp, rz = (ev.arm(b, c) for c in ("a", "pi", STRIP_AND_SERVE))
    seeds = (sorted(set(ra.seeds) & set(rp.seeds) & set(rz.seeds))
             if ra and rp and rz else [])
    retention, video, seed = float("nan"), None, None
    if seeds:
        ma, mp, mz = (arm.macro[[arm.index(s) for s in seeds]] for arm in (ra, rp, rz))
        lift = float(np.mean(mp - ma))
        retention = float(np.mean(mz - ma)) / lift if lift > 0 else float("nan")
        video = an.retention_ci(b, "a", STRIP_AND_SERVE, "pi", seeds)
        seed = _seed_retention(an, mz - ma, mp - ma, notes)
    level = round(100 * an.options.confidence_level)
    rows, disp, ids = [], [], []
    for recipe, arm_name in DEPLOYMENT_RECIPES:
        arm, c = ev.arm(b, arm_name), comps.get(arm_name)
        ok = c is not None and c.available
        s = arm_summary(arm)
        cost = recipe_costs(arm_name)
        strip = arm_name == STRIP_AND_SERVE
        row = {"recipe": recipe, "arm": arm_name, **s,
               "delta_vs_a": c.mean_delta if ok else float("nan"),
               "n_positive": c.n_positive if ok else None,
               **{k: v for k, v in cost.items() if " " not in k and k not in
                  ("training", "inference")},
               "served_as": SERVED_AS if strip else "",
               "retention": retention if strip else float("nan"),
               "retention_seeds": ",".join(map(str, seeds)) if strip else "",
               "retention_ci_videos_low": video.bca_interval.low if strip and video else float("nan"),
               "retention_ci_videos_high": video.bca_interval.high if strip and video else float("nan"),
               "retention_ci_unit": video.unit if strip and video else "",
               "retention_ci_seeds_low": (seed.bca_interval.low if strip and seed
                                          else float("nan")),
               "retention_ci_seeds_high": (seed.bca_interval.high if strip and seed
                                           else float("nan"))}
        rows.append(row)
        ret_text = ""
        if strip:
            ret_text = (f"{retention:.0%}" if np.isfinite(retention) else
                        "undefined (pi - a <= 0)" if seeds else "n/a (needs a, pi, zero_both)")
        disp.append({
            "recipe": recipe + (f" — {SERVED_AS}" if strip else ""),
            "arm": cell_label(arm_name), "seeds": s["seeds"] or "no runs",
            "macro-AUC": fmt_mean_sd(s["mean"], s["sd"]) if arm else "no runs",
            "Δ vs (a) (k/n +)": (f"{fmt_delta(c.mean_delta)} ({c.sign_text})" if ok else
                                 ("—" if arm_name == "a" else "n/a")),
            **delta_cis(an, c if ok else None),
            "retention (zero_both - a)/(pi - a)": ret_text,
            f"{level}% BCa CI of retention (videos)": (
                fmt_ci(video.bca_interval.low, video.bca_interval.high, 2) if strip and video else ""),
            f"{level}% BCa CI of retention (seeds)": (
                fmt_ci(seed.bca_interval.low, seed.bca_interval.high, 2)
                if strip and seed else ""),
            "training": cost["training"], "inference": cost["inference"],
            "prior at inference": cost["prior at inference"]})
        ids.append({arm_name: run_map(arm)} | ({"a": dict(c.ref_runs)} if ok else {}))
    notes += [
        ("Strip-and-serve is the +PI model served with both prior channels zeroed: rows of "
         "pi@zero_both (the channel_infer children of the pi runs) are what the registered pi "
         'model returns with params={"strip_prior": true}; the prior is not computed.'),
        ("Retention = mean(zero_both - a) / mean(pi - a) over the seeds all three share; "
         "(videos): both deltas under the same test-video draws; (seeds): per-seed deltas "
         "resampled together. Undefined where pi - a <= 0 (no lift to retain)."),
        ("Training and inference costs come from the cell table (input channels, prior "
         "computed or not); every recipe here needs one training (the paper's distillation "
         "counts a separate teacher; pipi's distill cell trains the student once with the "
         "P_blood decoder as its auxiliary target)."),
        seed_ci_note(an, comps.values())]
    return Table("deployment_options", title, pd.DataFrame(rows), pd.DataFrame(disp),
                 tuple(ids), tuple(notes), paper="tab:deployment-options")
