"""Curve data of the figures: mean ROC and precision-recall curves of the headline arms."""

from __future__ import annotations

import warnings

from pipi.analysis import ABLATION_CELLS, PER_FRAME_CELLS, Analysis, cell_label
from pipi.stats import ROC_GRID, mean_pr, mean_roc

__all__ = ["curve_data"]


def curve_data(an: Analysis) -> dict:
    """Mean ROC and PR curves of the headline backbone's arms (figures and JSON)."""
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
    return out
