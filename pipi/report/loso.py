"""The leave-one-source-out table: the paper's cross-vendor question (Galar's retention)
asked of each held-out source of one multi-source dataset.

Computed by :mod:`pipi.analysis.loso` from the runs trained on every source (in source) and
the runs trained with ``train_sources`` / ``test_sources`` (held out), both scored on the
held-out source's test frames.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pipi.analysis import BREAKDOWN_PAIRS, Analysis
from pipi.analysis.loso import LosoRow, LosoSide, loso_rows
from pipi.report.rows import (
    ci_cols,
    ci_header,
    ci_text,
    no_runs,
    seed_bca_text,
    seed_ci_header,
    seed_cols,
)
from pipi.report.tables import Table, fmt_ci, fmt_delta, fmt_mean_sd

__all__ = ["loso_table"]

KEY = "leave_one_source_out"
TITLE = "Leave one source out: in-source vs held-out macro-AUC and retention (Δ_held-out / Δ_in-source)"
HOW = ("train the cells on the other sources and score the held-out one, e.g. `mlflow run . "
       "-e ablate -P study=per_frame -P cells=a,pi -P data=STAGED -P train_sources=KID,KVASIR,"
       "AIIMS -P test_sources=SEE-AI`, in the same experiment as the runs trained on every "
       "source")


def _sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


def _side_cols(side: LosoSide | None, prefix: str) -> dict:
    """One condition's columns: both arms' macro-AUC, the delta and the shared bootstrap and
    seed-level interval columns (``rows.ci_cols`` / ``rows.seed_cols``), NaN without runs."""
    p, nan = f"{prefix}_", float("nan")
    if side is None:
        return {f"{p}{k}": nan for k in ("ref_macro_auc", "ref_sd", "new_macro_auc", "new_sd",
                                          "delta", "delta_sd")} | {f"{p}n_positive": None} \
            | ci_cols(None, p)
    return {f"{p}ref_macro_auc": float(side.baseline_macro.mean()),
            f"{p}ref_sd": _sd(side.baseline_macro),
            f"{p}new_macro_auc": float(side.method_macro.mean()),
            f"{p}new_sd": _sd(side.method_macro),
            f"{p}delta": side.delta, f"{p}delta_sd": _sd(side.deltas),
            f"{p}n_positive": int((side.deltas > 0).sum())} \
        | ci_cols(side.bootstrap, p) | seed_cols(side.seed_bca, p)


def _data(r: LosoRow) -> dict:
    nan = float("nan")
    ret, ratio = r.retention, r.ratio
    ci = ret.confidence_interval if ret is not None else None
    return {"backbone": r.backbone, "reference": r.baseline, "new": r.method,
            "held_out_source": r.source, "condition": r.condition, "n_seeds": len(r.seeds),
            "seeds": ",".join(map(str, r.seeds)), "n_frames": r.n_frames,
            "n_videos": r.n_videos, "classes_scored": len(r.classes),
            "classes": "; ".join(r.classes),
            **_side_cols(r.in_source, "in_source"), **_side_cols(r.held_out, "held_out"),
            "retention": ret.value if ret is not None else nan,
            "retention_ci_low": ci.low if ci is not None else nan,
            "retention_ci_high": ci.high if ci is not None else nan,
            "retention_ci_bca_low": ratio.bca_interval.low if ratio is not None else nan,
            "retention_ci_bca_high": ratio.bca_interval.high if ratio is not None else nan,
            "n_ratio_draws": int(np.isfinite(ratio.bootstrap_distribution).sum())
            if ratio is not None else 0,
            "band": ret.band if ret is not None else "", "stable": ret.stable if ret else None,
            "retention_reason": ret.reason.replace("Delta_Kvasir", "Delta_in-source")
            if ret is not None else "",
            "bootstrap_seed": r.bootstrap_seed, "note": r.note}


def _auc_text(side: LosoSide | None, which: str) -> str:
    if side is None:
        return "no runs"
    x = side.baseline_macro if which == "ref" else side.method_macro
    return fmt_mean_sd(float(x.mean()), _sd(x))


def _delta_text(side: LosoSide | None) -> str:
    if side is None:
        return "no runs"
    return (f"{fmt_delta(side.delta, 4)} ({int((side.deltas > 0).sum())}/{len(side.deltas)}+)")


def _ret_text(r: LosoRow) -> str:
    ret = r.retention
    if ret is None or not math.isfinite(ret.value):
        return "n/a"
    ci = ret.confidence_interval
    return f"{ret.value:+.2f}" + (f" {fmt_ci(ci.low, ci.high, 2)}" if ci is not None else "")


def _display(an: Analysis, r: LosoRow) -> dict:
    def cis(side: LosoSide | None) -> tuple[str, str]:
        if side is None:
            return "", ""
        sb = side.seed_bca
        return (ci_text(side.bootstrap, an, digits=4),
                seed_bca_text(sb, digits=4) if sb else "n/a (< 2 seeds)")

    ins, held = cis(r.in_source), cis(r.held_out)
    return {"Comparison": f"({r.baseline}) vs ({r.method})", "held-out source": r.source,
            "trained on": r.condition.partition(" -> ")[0].removeprefix("train "),
            "frames": r.n_frames, "classes scored": len(r.classes), "seeds": len(r.seeds),
            "in-source ref": _auc_text(r.in_source, "ref"),
            "in-source new": _auc_text(r.in_source, "new"),
            "held-out ref": _auc_text(r.held_out, "ref"),
            "held-out new": _auc_text(r.held_out, "new"),
            "Δ in-source (k/n+)": _delta_text(r.in_source),
            f"Δ in-source {ci_header(an)}": ins[0],
            f"Δ in-source {seed_ci_header(an)}": ins[1],
            "Δ held-out (k/n+)": _delta_text(r.held_out),
            f"Δ held-out {ci_header(an)}": held[0],
            f"Δ held-out {seed_ci_header(an)}": held[1],
            f"retention [{round(100 * an.options.confidence_level)}% CI]": _ret_text(r),
            "band": r.retention.label if r.retention is not None else "n/a",
            "note": r.note}


def loso_table(an: Analysis) -> Table | None:
    """Per held-out source and breakdown pair: both arms' macro-AUC in source and held out,
    the delta of each condition with its intervals, and the retention; None when the
    selection has no held-out-source runs and its test frames name fewer than two sources."""
    ev = an.evidence
    ho = getattr(ev, "held_out", None)
    if ho is None:
        if ev.sources is None or len(set(ev.sources.tolist())) < 2:
            return None
        return no_runs(KEY, TITLE, "", "no runs trained with train_sources / test_sources in "
                       f"this selection: {HOW}")
    rows = loso_rows(an, BREAKDOWN_PAIRS)
    errors = [f"{label}: not used ({why})" for label, why in ho.errors.items()]
    if not rows:
        cells = sorted({c for cond in ho.conditions for _, c in cond.evidence.arms})
        return no_runs(KEY, TITLE, "", *errors, (
            f"held-out runs of cells {cells} found, but no pair {list(BREAKDOWN_PAIRS)} has "
            "runs of both arms in one condition" if ho.conditions else
            f"no held-out condition could be read: {HOW}"))
    level = round(100 * an.options.confidence_level)
    notes = [
        ("In source: the runs trained on every source, scored on the held-out source's test "
        "frames; held out: the runs trained without it (train_sources), scored on the same "
        "frames. Macro-AUC over the classes with positive and negative frames of that source "
        "(as the per-source table), per seed, then mean ± sd over the seeds with runs of "
        "both arms in both conditions."),
        (f"Δ = new - ref per seed, mean (k/n seeds with Δ > 0). {ci_header(an)}: one "
        f"bootstrap of that source's test {an.bootstrap_unit} ({an.options.n_resamples} "
        "resamples) shared by the four arms of a row; "
        f"{seed_ci_header(an)}: seeds resampled, frames fixed ('(unstable)': with few "
        "seeds the BCa endpoint sits at an extreme per-seed delta or rests on fewer than 10 "
        "resamples beyond it)."),
        (f"Retention = Δ_held-out / Δ_in-source; {level}% CI: percentile interval of "
        "Δ_held-out* / Δ_in-source* under the same resamples (the frames are shared), draws "
        "with Δ_in-source* <= 0 left out (column n_ratio_draws). Bands as for Galar: Strong "
        ">= 1.0; Positive 0.75-1.0; Partial 0.30-0.75; Null -0.10-0.30; Negative < -0.10; "
        "undefined when Δ_in-source <= 0; (unstable) when Δ_in-source's CI includes 0."),
        *errors,
        *[f"{r.condition}, {r.source}, ({r.baseline}) vs ({r.method}): {r.note}"
          for r in rows if r.note]]
    data = pd.DataFrame([_data(r) for r in rows])
    display = pd.DataFrame([_display(an, r) for r in rows])
    ids = tuple({**(r.in_source.run_ids if r.in_source else {}),
                 **(r.held_out.run_ids if r.held_out else {})} for r in rows)
    return Table(KEY, TITLE, data, display, ids, tuple(notes))
