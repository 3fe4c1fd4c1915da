"""Curve data of the figures (also written to ``aggregate.json``): mean ROC and PR curves of the
headline arms, PR curves of the focal classes with seeds pooled, confusion matrices."""

from __future__ import annotations

import warnings

import numpy as np

from pipi.analysis import (
    ABLATION_CELLS,
    FIGURE_PAIR,
    PER_FRAME_CELLS,
    PR_FOCAL_CLASSES,
    Analysis,
    cell_label,
)
from pipi.classes import CLASSES
from pipi.stats import ROC_GRID, confusion_matrix, mean_pr, mean_roc, pooled_pr, row_normalise

__all__ = ["confusion_data", "curve_data", "focal_pr_data"]


def curve_data(an: Analysis) -> dict:
    """Mean ROC and PR curves of the headline backbone's arms, the focal-class PR curves
    (``focal_pr``) and the confusion matrices (``confusion``)."""
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
        out["focal_pr"] = focal_pr_data(an)
    out["confusion"] = confusion_data(an)
    return out


def _figure_arms(an: Analysis) -> list:
    ev, b = an.evidence, an.headline
    return [ev.arm(b, c) for c in FIGURE_PAIR if ev.arm(b, c) is not None]


def focal_pr_data(an: Analysis) -> dict:
    """Per focal class with test positives: interpolated precision on the recall grid and AP
    of each figure arm ((a), +PI), frames of every seed pooled. The focal classes are
    Kvasir-Capsule's: none on another class set."""
    ev = an.evidence
    out = {}
    if tuple(ev.names) != CLASSES:
        return out
    for name in PR_FOCAL_CLASSES:
        k = ev.names.index(name) if name in ev.names else -1
        if k not in ev.classes:
            continue
        arms = {}
        for arm in _figure_arms(an):
            prec, ap = pooled_pr(ev.labels, arm.probs, k)
            arms[arm.cell] = {"label": cell_label(arm.cell), "precision": prec, "ap": ap,
                              "seeds": list(arm.seeds), "run_ids": arm.runs()}
        if arms:
            out[name] = {"prevalence": float(np.mean(ev.labels == k)), "arms": arms}
    return out


def confusion_data(an: Analysis) -> dict:
    """Row-normalised confusion matrices (argmax) of each figure arm, seeds pooled.

    Rows: true class (the classes present in the test frames); columns: predicted class,
    plus "other" for predictions of a class absent from the test frames.
    """
    ev = an.evidence
    classes = sorted(set(ev.labels.tolist()))
    out = {"classes": [ev.names[k] for k in classes], "arms": {}}
    for arm in _figure_arms(an):
        counts = sum(confusion_matrix(ev.labels, p.argmax(axis=1), classes) for p in arm.probs)
        out["arms"][arm.cell] = {"label": cell_label(arm.cell), "counts": counts,
                                 "normalised": row_normalise(counts), "seeds": list(arm.seeds),
                                 "run_ids": arm.runs()}
    return out
