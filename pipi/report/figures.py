"""Figures of ``aggregate`` (matplotlib, Agg canvas, no pyplot state): PNG bytes.

* ``eight_cell``: cross-seed mean macro-AUC per cell with sd bars and one dot per seed;
* ``roc`` / ``pr``: mean (over seeds) micro-averaged ROC and precision-recall curves per arm;
* ``per_class_lift`` / ``per_class_lift_per_frame``: sorted per-class delta of (e+) vs (b) and
  of +PI vs (a), BCa CI and markers;
* ``per_patient_lift``: per-video macro-AUC lift, sorted, one panel per pair;
* ``pr_focal``: precision-recall of the four focal classes, (a) and +PI, seeds pooled;
* ``confusion``: row-normalised confusion matrices of (a) and +PI, seeds pooled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from pipi.analysis import (
    ABLATION_CELLS,
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    PER_FRAME_CELLS,
    Analysis,
    is_mechanism_arm,
)
from pipi.report.png import COLORS, figure_png, fixed_png  # noqa: F401  (this face's names)
from pipi.report.tables import Table


def curve_axes(ax, kind: str, *, pr_ylabel: str = "precision") -> None:
    """Axes of a ROC (with the chance diagonal) or precision-recall plot on [0, 1]."""
    if kind == "roc":
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
    else:
        ax.set_xlabel("recall")
        ax.set_ylabel(pr_ylabel)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)

def bar_deltas(cells: Sequence[str], means: np.ndarray, reference: str | None,
               references: Mapping[str, str] | None = None) -> dict[int, float]:
    """``{bar index: delta of its mean}`` against ``references[cell]`` where given and present,
    else against ``reference``; the reference bars themselves and NaN means carry none."""
    out = {}
    for i, c in enumerate(cells):
        r = (references or {}).get(c)
        r = r if r in cells else reference
        j = cells.index(r) if r in cells else None
        if j is not None and i != j and np.isfinite(means[i]) and np.isfinite(means[j]):
            out[i] = float(means[i] - means[j])
    return out


def cell_bars(cells: Sequence[str], labels: Sequence[str], per_seed: Sequence[np.ndarray],
              seeds: Sequence[Sequence[int]], *, title: str, reference: str | None = "a",
              references: Mapping[str, str] | None = None) -> bytes:
    """Bars of the mean with sd error bars and black dots for individual seeds; above each bar
    the delta of its mean against ``reference`` (``references[cell]`` where given and
    present)."""
    fig = Figure(figsize=(max(6.0, 0.85 * len(cells) + 2), 4.6))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(cells))
    means = np.array([v.mean() if len(v) else np.nan for v in per_seed])
    sds = np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in per_seed])
    ax.bar(x, means, yerr=sds, color=[COLORS[i % len(COLORS)] for i in range(len(cells))],
           alpha=0.8, capsize=3, edgecolor="black", linewidth=0.5)
    rng = np.random.default_rng(0)
    for i, v in enumerate(per_seed):
        ax.scatter(i + rng.uniform(-0.18, 0.18, len(v)), v, color="black", s=12, zorder=3)
    lo = np.nanmin([v.min() for v in per_seed if len(v)]) if any(len(v) for v in per_seed) else 0
    hi = np.nanmax([v.max() for v in per_seed if len(v)]) if any(len(v) for v in per_seed) else 1
    pad = max(0.02, 0.15 * (hi - lo))
    ax.set_ylim(max(0.0, lo - pad), min(1.0, hi + 2 * pad))
    for i, delta in bar_deltas(cells, means, reference, references).items():
        ax.annotate(f"{delta:+.3f}", (i, means[i] + sds[i]), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=7)
    ax.set_xticks(x, [f"{c}\n(n={len(s)})" for c, s in zip(cells, seeds)], fontsize=8)
    ax.set_ylabel("test macro-AUC")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return figure_png(fig)


def curves(grid: np.ndarray, arms: dict, *, kind: str, title: str) -> bytes:
    """Mean ROC (kind 'roc') or precision-recall (kind 'pr') curve per arm, ±sd band."""
    fig = Figure(figsize=(6.0, 5.0))
    ax = fig.add_subplot(1, 1, 1)
    for i, (cell, a) in enumerate(arms.items()):
        col = COLORS[i % len(COLORS)]
        if kind == "roc":
            y, sd = a["tpr"], a["tpr_sd"]
            label = f"{cell} (macro-AUC {a['macro_auc']:.3f}, n={len(a['seeds'])})"
        else:
            y, sd = a["precision"], a["precision_sd"]
            label = f"{cell} (micro AP {a['micro_ap']:.3f}, n={len(a['seeds'])})"
        ax.plot(grid, y, color=col, lw=1.5, label=label)
        ax.fill_between(grid, np.clip(y - sd, 0, 1), np.clip(y + sd, 0, 1), color=col, alpha=0.12)
    curve_axes(ax, kind, pr_ylabel="precision (interpolated)")
    ax.legend(fontsize=7, loc="lower right" if kind == "roc" else "upper right")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return figure_png(fig)


def per_class_lift(table: Table) -> bytes:
    """Sorted per-class delta with its BCa interval and Bonferroni markers."""
    d = table.data
    fig = Figure(figsize=(7.0, 0.38 * len(d) + 1.6))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(d))[::-1]
    delta = d["delta"].to_numpy(float)
    lo = delta - d["ci_bca_low"].to_numpy(float)
    hi = d["ci_bca_high"].to_numpy(float) - delta
    err = np.where(np.isfinite([lo, hi]), [lo, hi], 0.0)
    ax.barh(y, delta, xerr=err, color=np.where(delta >= 0, "#55a868", "#c44e52"), alpha=0.85,
            capsize=2, edgecolor="black", linewidth=0.4)
    ends = np.where(delta >= 0, delta + err[1], delta - err[0])
    for yi, x, m in zip(y, ends, d["marker_bonferroni"]):
        if m:
            ax.annotate(m, (x, yi), textcoords="offset points",
                        xytext=(5 if x >= 0 else -5, -3), ha="left" if x >= 0 else "right",
                        fontsize=9, fontweight="bold")
    ax.set_yticks(y, d["class"], fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("Δ AUC (mean over seeds), 95% BCa bootstrap CI")
    ax.set_title(table.title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return figure_png(fig)


def per_patient_lift(table: Table) -> bytes:
    """Per-video lift bars, sorted, one panel per comparison."""
    d = table.data[table.data["classes_scored"] > 0]
    groups = list(d.groupby(["reference", "new"], sort=False))
    fig = Figure(figsize=(5.0 * max(1, len(groups)), 3.8))
    for i, ((ref, new), g) in enumerate(groups):
        ax = fig.add_subplot(1, max(1, len(groups)), i + 1)
        g = g.sort_values("lift")
        v = g["lift"].to_numpy(float)
        ax.bar(np.arange(len(v)), v, color=np.where(v >= 0, "#55a868", "#c44e52"),
               edgecolor="black", linewidth=0.4)
        ax.set_xticks(np.arange(len(v)), g["video_id"].astype(str), rotation=60, fontsize=7)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(f"({new}) vs ({ref}): {int((v > 0).sum())}/{len(v)} patients +", fontsize=9)
        ax.set_ylabel("macro-AUC lift (mean over seeds)")
        ax.grid(axis="y", alpha=0.3)
    return figure_png(fig)


def focal_pr(grid: np.ndarray, focal: dict, *, title: str) -> bytes:
    """One panel per focal class: interpolated precision against recall per arm, seeds pooled."""
    n = len(focal)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(5.0 * cols, 4.2 * rows))
    for i, (name, f) in enumerate(focal.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        for j, (cell, a) in enumerate(f["arms"].items()):
            ax.plot(grid, a["precision"], color=COLORS[j % len(COLORS)], lw=1.5,
                    label=f"{cell} (AP {a['ap']:.3f}, n={len(a['seeds'])} seeds)")
        ax.axhline(f["prevalence"], color="grey", lw=0.8, ls="--")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("recall")
        ax.set_ylabel("precision (interpolated)")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    fig.subplots_adjust(hspace=0.35)
    fig.suptitle(title, fontsize=10)
    return figure_png(fig)


def confusion(conf: dict, *, title: str, dpi: int = 110) -> bytes:
    """Row-normalised confusion matrices side by side, values printed in each cell."""
    arms = conf["arms"]
    names = conf["classes"]
    k = len(names)
    fig = Figure(figsize=(max(5.0, 0.55 * k + 2.5) * len(arms), max(4.5, 0.5 * k + 2)))
    for i, (cell, a) in enumerate(arms.items()):
        ax = fig.add_subplot(1, len(arms), i + 1)
        m = np.asarray(a["normalised"])
        ax.imshow(m, cmap="Blues", vmin=0, vmax=1)
        for r in range(m.shape[0]):
            for c in range(m.shape[1]):
                if m[r, c] >= 0.005:
                    ax.text(c, r, f"{m[r, c]:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if m[r, c] > 0.5 else "black")
        ax.set_xticks(np.arange(k + 1), [*names, "other"], rotation=70, fontsize=7)
        ax.set_yticks(np.arange(k), names, fontsize=7)
        ax.set_xlabel("predicted class")
        if i == 0:
            ax.set_ylabel("true class")
        ax.set_title(a.get("title") or f"{a['label']} (n={len(a['seeds'])} seeds)", fontsize=9)
    fig.subplots_adjust(wspace=0.35)
    fig.suptitle(title, fontsize=10)
    return figure_png(fig, dpi)


#: The summary-statistic C1 cells, annotated against (b) in the eight-cell figure.
SUMMARY_C1_CELLS = ("c", "c_prime", "c_dprime")


def all_figures(an: Analysis, tables: Sequence[Table], curve_data: dict):
    """(figures name -> PNG, captions, run ids per figure) of an :class:`pipi.analysis.Analysis`."""
    ev, b = an.evidence, an.headline
    by = {t.key: t for t in tables}
    figs, caps, runs = {}, {}, {}
    seq = [c for c in ABLATION_CELLS if ev.arm(b, c)]
    if len(seq) > 1 and any(c != "a" for c in seq):
        cells, title = seq, f"Eight-cell ablation ({b}): mean ± sd, dots = seeds"
    else:
        order = [*PER_FRAME_CELLS, *CHANNEL_TRAIN_ARMS, *CHANNEL_INFER_ARMS]
        cells = [c for c in dict.fromkeys(order) if ev.arm(b, c)]
        cells += [c for c in ev.cells(b) if c not in cells and not is_mechanism_arm(c)]
        title = f"Cells with runs ({b}): mean ± sd, dots = seeds (no sequence cells yet)"
    arms = [ev.arm(b, c) for c in cells]
    # the paper's figure: the summary-stat C1 cells against (b), the RGB+C2 model their C1
    # channel is added to ("flat" / -0.019), every other bar against (a)
    against_b = {c: "b" for c in SUMMARY_C1_CELLS} if "b" in cells else {}
    figs["eight_cell"] = cell_bars(cells, cells, [a.macro for a in arms], [a.seeds for a in arms],
                                   title=title, references=against_b)
    caps["eight_cell"] = (title + ". Numbers above bars: delta of the mean against cell (a)"
                          + ("; for c, c' and c'' against cell (b), the RGB+C2 model their C1 "
                             "channel is added to, as in the paper's figure" if against_b else "")
                          + ".")
    runs["eight_cell"] = {a.cell: a.runs() for a in arms}
    if curve_data["arms"]:
        figs["roc"] = curves(curve_data["grid"], curve_data["arms"], kind="roc",
                             title=f"Mean ROC over seeds, micro-averaged over classes ({b})")
        caps["roc"] = ("Mean over seeds of the micro-averaged one-vs-rest ROC over the "
                       "headline classes; band ±1 sd over seeds.")
        figs["pr"] = curves(curve_data["grid"], curve_data["arms"], kind="pr",
                            title=f"Mean precision-recall over seeds ({b})")
        caps["pr"] = ("Mean over seeds of the micro-averaged interpolated precision at each "
                      "recall; band ±1 sd over seeds.")
        runs["roc"] = runs["pr"] = {c: a["run_ids"] for c, a in curve_data["arms"].items()}
    for key, name in (("per_class", "per_class_lift"),
                      ("per_class_per_frame", "per_class_lift_per_frame"),
                      ("per_class_distill", "per_class_lift_distill")):
        pc = by.get(key)
        if pc is not None and pc.ok and len(pc.data):
            figs[name] = per_class_lift(pc)
            caps[name] = (pc.title + ", sorted; bars: 95% BCa CI (resampling per row in "
                          f"tables/{key}.csv, column bootstrap_unit); markers: "
                          "Bonferroni-adjusted per-class DeLong (Stouffer).")
            runs[name] = dict(pc.run_ids[0])
    if curve_data.get("focal_pr"):
        figs["pr_focal"] = focal_pr(curve_data["grid"], curve_data["focal_pr"],
                                    title=f"Precision-recall of the focal classes ({b})")
        caps["pr_focal"] = ("Precision-recall curves of the paper's four PR focal classes "
                            "(Lymphangiectasia, Blood - fresh, Angiectasia, Erosion), frames of "
                            "every seed pooled; AP in the legend. Beside the micro-averaged "
                            "PR curve of figure pr.")
        runs["pr_focal"] = {c: a["run_ids"] for f in curve_data["focal_pr"].values()
                            for c, a in f["arms"].items()}
    conf = curve_data.get("confusion", {})
    if conf.get("arms"):
        figs["confusion"] = confusion(conf, title=f"Confusion matrices, seeds pooled ({b})")
        caps["confusion"] = ("Row-normalised confusion matrices at the argmax, test frames of "
                             "every seed pooled; rows: true class, columns: predicted class "
                             "('other': a class without test frames).")
        runs["confusion"] = {c: a["run_ids"] for c, a in conf["arms"].items()}
    pp = by.get("per_patient")
    if pp is not None and pp.ok and (pp.data["classes_scored"] > 0).any():
        figs["per_patient_lift"] = per_patient_lift(pp)
        caps["per_patient_lift"] = "Per-patient (per-video) macro-AUC lift, mean over seeds, sorted."
        merged: dict = {}
        for r in pp.run_ids:
            for arm, seeds in r.items():
                merged.setdefault(arm, {}).update(seeds)
        runs["per_patient_lift"] = merged
    return figs, caps, runs
