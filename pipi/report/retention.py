"""The cross-vendor tables: Delta_Galar / Delta_Kvasir retention with video-clustered bootstrap
intervals and bands (paper Table "galar-zeroshot", GalKva-2026), across seeds and per seed pair.

Computed by :mod:`pipi.analysis.retention` from the predictions of the Kvasir runs and of
their ``galar`` zero-shot children; a table says "no runs" until such children exist.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pipi.analysis import Analysis
from pipi.analysis.retention import (
    ALL_SYSTEMS,
    CALIBRATED,
    CLASS_SETS,
    DeltaSide,
    RetentionRow,
    fold_label,
    retention_rows,
    run_calibrate_modes,
    run_variants,
)
from pipi.cells import Arm
from pipi.galkva import BENCHMARK_VERSION, classify_retention
from pipi.report.rows import no_runs
from pipi.report.tables import Table, fmt_ci, fmt_delta, fmt_mean_sd

__all__ = ["retention_tables"]

TITLE = "Cross-vendor zero-shot retention on Galar (Δ_Galar / Δ_Kvasir)"
SEED_TITLE = "Cross-vendor retention per seed pair"
CAL_TITLE = "Cross-vendor retention on Galar: zero-shot vs calibrated prior"
PAPER = "tab:galar-zeroshot"


def _sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


def _side_cols(side: DeltaSide | None, prefix: str) -> dict:
    nan = float("nan")
    if side is None:
        return {f"{prefix}_delta": nan, f"{prefix}_delta_sd": nan, f"{prefix}_ci_low": nan,
                f"{prefix}_ci_high": nan, f"{prefix}_sign_positive": "",
                f"{prefix}_baseline_macro_auc": nan, f"{prefix}_method_macro_auc": nan,
                f"{prefix}_n_frames": 0, f"{prefix}_n_videos": 0, f"{prefix}_unit": "",
                f"{prefix}_ci_method": "", f"{prefix}_classes": ""}
    ci = side.ci
    return {f"{prefix}_delta": side.delta, f"{prefix}_delta_sd": _sd(side.deltas),
            f"{prefix}_ci_low": ci.low, f"{prefix}_ci_high": ci.high,
            f"{prefix}_sign_positive": side.sign_positive,
            f"{prefix}_baseline_macro_auc": float(side.baseline_macro.mean()),
            f"{prefix}_method_macro_auc": float(side.method_macro.mean()),
            f"{prefix}_n_frames": side.n_frames, f"{prefix}_n_videos": side.n_videos,
            f"{prefix}_unit": side.bootstrap.unit, f"{prefix}_ci_method": side.ci_method,
            f"{prefix}_classes": "; ".join(side.classes)}


def _delta_text(side: DeltaSide | None) -> str:
    if side is None:
        return "n/a"
    ci = side.ci
    mark = "" if side.ci_method == "BCa" else " (pct)"
    return (f"{fmt_mean_sd(side.delta, _sd(side.deltas))} ({side.sign_positive}+) "
            f"{fmt_ci(ci.low, ci.high)}{mark}")


def _ret_text(r: RetentionRow) -> str:
    v, ci = r.retention.value, r.retention.confidence_interval
    if not math.isfinite(v):
        return "n/a"
    return f"{v:+.2f}" + (f" [{ci.low:+.2f}, {ci.high:+.2f}]" if ci is not None else "")


def _title(title: str, fold: str) -> str:
    """A table title, saying so when the Galar side is a fold rather than every video."""
    return title if fold == "all" else f"{title}, Galar {fold} fold only"


#: Display column: the retention with the paper's Kvasir headline Δ (galkva rows).
HEADLINE_COL = "retention with the headline Δ_Kvasir (paper's reference entries)"


def _headline(r: RetentionRow, headline: dict) -> dict:
    """For a GalKva row: Δ_Galar (6-class scoring set) over the Kvasir Δ of the paper's
    headline (every evaluable Kvasir class; the 'all' row of the same pair), the ratio the
    paper's reference entries report. The benchmark's leaderboard uses the GalKva row's own
    retention (both Δ over the v1.0 scoring set)."""
    nan = float("nan")
    kv = headline.get((r.backbone, r.baseline, r.method)) if r.class_set == "galkva" else None
    if kv is None:
        return {"kvasir_headline_delta": nan, "retention_headline_kvasir": nan,
                "band_headline_kvasir": ""}
    ret = classify_retention(kv.delta, r.galar.delta if r.galar else None,
                             delta_kvasir_ci=kv.ci)
    return {"kvasir_headline_delta": kv.delta, "retention_headline_kvasir": ret.value,
            "band_headline_kvasir": ret.label}


def _headline_text(h: dict) -> str:
    if not h["band_headline_kvasir"]:
        return "n/a (this row's Δ_Kvasir is the headline's)"
    v = h["retention_headline_kvasir"]
    return (f"{v:+.2f}" if math.isfinite(v) else "n/a") + (
        f" {h['band_headline_kvasir']} (Δ_Kvasir {h['kvasir_headline_delta']:+.4f})")


def _rows(rows: list[RetentionRow], fold: str):
    data, disp, ids = [], [], []
    headline = {(r.backbone, r.baseline, r.method): r.kvasir for r in rows if r.class_set == "all"}
    for r in rows:
        ret = r.retention
        ci = ret.confidence_interval
        h = _headline(r, headline)
        data.append({"backbone": r.backbone, "baseline": r.baseline, "method": r.method,
                     "class_set": r.class_set, "capsule_system": r.subset, "galar_fold": fold,
                     "n_seeds": len(r.seeds), "seeds": ",".join(map(str, r.seeds)),
                     **_side_cols(r.kvasir, "kvasir"), **_side_cols(r.galar, "galar"),
                     "retention": ret.value, "retention_ci_low": ci.low if ci else float("nan"),
                     "retention_ci_high": ci.high if ci else float("nan"),
                     "band": ret.band, "stable": ret.stable, "reason": ret.reason,
                     "n_ratio_draws": int(np.isfinite(r.distribution).sum()), **h})
        g = r.galar
        disp.append({
            "backbone": r.backbone, "comparison": f"{r.baseline} -> {r.method}",
            "classes": CLASS_SETS[r.class_set], "capsule system": r.subset,
            "seeds": len(r.seeds),
            "Galar RGB-only": fmt_mean_sd(g.baseline_macro.mean(), _sd(g.baseline_macro))
            if g else "n/a",
            "Galar method": fmt_mean_sd(g.method_macro.mean(), _sd(g.method_macro)) if g else "n/a",
            "Δ_Galar (k/n+) [95% CI]": _delta_text(g),
            "Δ_Kvasir (k/n+) [95% CI]": _delta_text(r.kvasir),
            "retention [95% CI]": _ret_text(r), "band": ret.label,
            HEADLINE_COL: _headline_text(h)})
        ids.append(r.run_ids)
    return pd.DataFrame(data), pd.DataFrame(disp), tuple(ids)


def _seed_rows(rows: list[RetentionRow]):
    data, disp, ids = [], [], []
    for r in rows:
        ratio = r.per_seed_ratio
        for i, s in enumerate(r.seeds):
            dk = float(r.kvasir.deltas[i])
            dg = float(r.galar.deltas[i]) if r.galar is not None else float("nan")
            data.append({"backbone": r.backbone, "baseline": r.baseline, "method": r.method,
                         "class_set": r.class_set, "capsule_system": r.subset, "seed": s,
                         "kvasir_delta": dk, "galar_delta": dg, "ratio": float(ratio[i])})
            disp.append({"backbone": r.backbone, "comparison": f"{r.baseline} -> {r.method}",
                         "classes": CLASS_SETS[r.class_set], "capsule system": r.subset,
                         "seed": s, "Δ_Kvasir": fmt_delta(dk, 4), "Δ_Galar": fmt_delta(dg, 4),
                         "Δ_Galar / Δ_Kvasir": f"{ratio[i]:+.2f}" if np.isfinite(ratio[i])
                         else "n/a"})
            ids.append({arm: {s: seeds[s]} for arm, seeds in r.run_ids.items()})
    return pd.DataFrame(data), pd.DataFrame(disp), tuple(ids)


def _row_key(r: RetentionRow) -> tuple:
    return (r.backbone, r.baseline, r.method, r.class_set, r.subset)


def _ret_cols(r: RetentionRow | None, prefix: str) -> dict:
    nan = float("nan")
    if r is None:
        return {f"{prefix}_galar_delta": nan, f"{prefix}_retention": nan,
                f"{prefix}_retention_ci_low": nan, f"{prefix}_retention_ci_high": nan,
                f"{prefix}_band": ""}
    ci = r.retention.confidence_interval
    return {f"{prefix}_galar_delta": r.galar.delta if r.galar else nan,
            f"{prefix}_retention": r.retention.value,
            f"{prefix}_retention_ci_low": ci.low if ci else nan,
            f"{prefix}_retention_ci_high": ci.high if ci else nan,
            f"{prefix}_band": r.retention.band}


def _calibrate_mode(cal, row: RetentionRow) -> str:
    """The calibrate mode(s) of a row's calibrated arm (``frozen``, ``train`` or both)."""
    cell = row.method if (row.backbone, row.method) in cal.tuned else row.baseline
    runs = cal.runs
    if runs is None or runs.empty or "backbone" not in runs:
        return "frozen"
    own = (run_variants(runs) == CALIBRATED) & (runs["backbone"] == row.backbone) & (
        runs["cell"].astype(str).map(lambda c: str(Arm.parse(c).base)) == cell)
    return ", ".join(sorted(set(run_calibrate_modes(runs[own])))) or "frozen"


def calibrated_table(an: Analysis, zero_shot: list[RetentionRow], zero_fold: str = "all"
                     ) -> Table:
    """Zero-shot and calibrated retention of the same (pair, class set, capsule system), side
    by side: the paper's deployment story (fit the prior on the target vendor, then deploy).

    The calibrated side pairs the zero-shot baseline (an RGB model has no prior to calibrate)
    with the method's children scored with a calibrated prior (``galar -P prior_params=``);
    both sides share Δ_Kvasir and the bootstrap draws of each row.
    """
    ev, o = an.evidence, an.options
    cal = getattr(ev, "cross_vendor_calibrated", None)
    if cal is None:
        note = getattr(ev, "cross_vendor_calibrated_error", "") or (
            "no calibrated `galar` runs in this selection: fit the prior on a target fold "
            "with `mlflow run . -e calibrate -P run=<pi run> -P target=galar:<system>`, then "
            "score with `mlflow run . -e galar -P runs=<pi runs> -P prior_params=<calibrate "
            "run id>` in the same experiment")
        return no_runs("cross_vendor_calibrated", CAL_TITLE, PAPER, note)
    rows = [r for r in retention_rows(ev, cal, n_resamples=o.n_resamples,
                                      confidence_level=o.confidence_level, seed=o.seed)
            if (r.backbone, r.method) in cal.tuned or (r.backbone, r.baseline) in cal.tuned]
    if not rows:
        note = (f"calibrated galar runs of {sorted(cal.tuned)} found (scored on "
                f"{fold_label(cal.fold)}), but no (baseline, method) pair has runs of both "
                "cells on both datasets on those frames: score the RGB baseline on the same "
                f"fold too (`mlflow run . -e galar -P runs=<baseline runs> -P fold={cal.fold}`)")
        return no_runs("cross_vendor_calibrated", CAL_TITLE, PAPER, note)
    by_key = {_row_key(r): r for r in zero_shot}
    data, disp, ids = [], [], []
    for r in rows:
        z = by_key.get(_row_key(r))
        mode = _calibrate_mode(cal, r)
        data.append({"backbone": r.backbone, "baseline": r.baseline, "method": r.method,
                     "class_set": r.class_set, "capsule_system": r.subset,
                     "n_seeds": len(r.seeds), "seeds": ",".join(map(str, r.seeds)),
                     "kvasir_delta": r.kvasir.delta, "calibrate_mode": mode,
                     **_ret_cols(z, "zero_shot"), **_ret_cols(r, CALIBRATED)})
        disp.append({"backbone": r.backbone, "comparison": f"{r.baseline} -> {r.method}",
                     "classes": CLASS_SETS[r.class_set], "capsule system": r.subset,
                     "seeds": len(r.seeds), "calibrate mode": mode,
                     "Δ_Kvasir": fmt_delta(r.kvasir.delta, 4),
                     "Δ_Galar zero-shot": _delta_text(z.galar) if z else "n/a",
                     "Δ_Galar calibrated": _delta_text(r.galar),
                     "retention zero-shot [95% CI]": _ret_text(z) if z else "n/a",
                     "retention calibrated [95% CI]": _ret_text(r),
                     "band zero-shot": z.retention.label if z else "n/a",
                     "band calibrated": r.retention.label})
        ids.append({**(z.run_ids if z else {}),
                    **{f"{k} ({CALIBRATED})": v for k, v in r.run_ids.items()
                       if k.startswith("galar ")}})
    level = round(100 * o.confidence_level)
    notes = (
        "Calibrated: the method's Galar children scored with a calibrated prior (alpha and "
        "lambda_eff from `calibrate`), against the zero-shot RGB baseline; zero-shot: both "
        "arms zero-shot. Same Kvasir runs, same Δ_Kvasir, same bootstrap draws per row.",
        f"{level}% CIs and bands as in the zero-shot retention table.",
        "Calibrate mode: how `calibrate` fitted the prior the calibrated children used: "
        "frozen (recomputed for an already trained model) or train (each trial trained "
        "with its prior, `calibrate -P mode=train`).",
        f"{len(cal.runs)} galar runs on the calibrated side, scored on "
        f"{fold_label(cal.fold)}; calibrated arms: "
        f"{', '.join(f'{b}/{c}' for b, c in sorted(cal.tuned))}.",
    ) + ((f"The zero-shot columns come from the zero-shot table, scored on "
          f"{fold_label(zero_fold)}: other frames than the calibrated side. For a "
          f"like-for-like comparison also score the zero-shot runs with `galar -P "
          f"fold={cal.fold}`.",) if zero_fold != cal.fold else ())
    return Table("cross_vendor_calibrated", _title(CAL_TITLE, cal.fold), pd.DataFrame(data),
                 pd.DataFrame(disp), tuple(ids), notes, paper=PAPER)


def retention_tables(an: Analysis) -> list[Table]:
    """The cross-vendor table (across seeds), its per-seed-pair companion and the zero-shot
    vs calibrated table."""
    ev = an.evidence
    cv = getattr(ev, "cross_vendor", None)
    if cv is None:
        note = ("no `galar` zero-shot runs in this selection: score the Kvasir runs with "
                "`mlflow run . -e galar -P runs=<run ids | filter>` in the same experiment")
        return [no_runs("cross_vendor", TITLE, PAPER, note),
                no_runs("cross_vendor_seeds", SEED_TITLE, PAPER, note),
                no_runs("cross_vendor_calibrated", CAL_TITLE, PAPER, note)]
    o = an.options
    rows = retention_rows(ev, cv, n_resamples=o.n_resamples,
                          confidence_level=o.confidence_level, seed=o.seed)
    if not rows:
        note = (f"galar runs of cells {sorted({c for _, c in cv.arms})} found, but no "
                "(baseline, method) pair has runs of both cells on both datasets")
        return [no_runs("cross_vendor", TITLE, PAPER, note),
                no_runs("cross_vendor_seeds", SEED_TITLE, PAPER, note),
                no_runs("cross_vendor_calibrated", CAL_TITLE, PAPER, note)]
    level = round(100 * o.confidence_level)
    notes = [
        "Δ = method - baseline macro-AUC, paired by seed (the Galar run of seed s scored the "
        "Kvasir model of seed s zero-shot); mean ± sd over seeds, (k/n+) seeds with Δ > 0.",
        f"{level}% CIs of Δ: BCa bootstrap of the cross-seed mean Δ resampling test videos "
        f"({o.n_resamples} resamples; one resample applied to every seed and arm; '(pct)': the "
        "percentile interval, where BCa is undefined, e.g. a degenerate jackknife). Retention "
        f"CI: percentile interval of Δ_Galar* / Δ_Kvasir* over independent resamples of the "
        "Kvasir test videos and the Galar videos.",
        "Bands: Strong >= 1.0; Positive 0.75-1.0; Partial 0.30-0.75; Null -0.10-0.30; "
        "Negative < -0.10. 'undefined/unstable' when Δ_Kvasir <= 0 (no in-domain lift to "
        "retain); '(unstable)' when Δ_Kvasir's CI includes 0.",
        f"Classes: {CLASS_SETS['galkva']} on the frames labelled with them (the benchmark's "
        f"scoring), and {CLASS_SETS['all']} (Kvasir: the headline classes; Galar: every mapped "
        f"class with positives) on all frames. Per capsule system: Δ_Galar on that system's "
        f"Galar frames against the same Δ_Kvasir; '{ALL_SYSTEMS}' pools them.",
        f"Two Kvasir numbers for the same runs: the GalKva {BENCHMARK_VERSION} rows use Δ_Kvasir "
        "over the 6-class scoring set (the benchmark's leaderboard retention); the column "
        f"'{HEADLINE_COL}' divides the same Δ_Galar by the Kvasir Δ over every evaluable "
        "class (the paper's 11-class headline, as its reference entries report it).",
        f"Galar: {len(cv.labels)} scored frames in {len(set(cv.videos))} videos, "
        f"{fold_label(cv.fold)}; data digest {cv.data_digest[:16]}; {len(cv.runs)} galar runs.",
    ]
    n_excluded = 0
    if cv.excluded is not None and not cv.excluded.empty and "reason" in cv.excluded:
        extra = [f"galar run {x.run_id} not used: {x.reason}"
                 for x in cv.excluded.itertuples() if str(x.reason)]
        notes += extra
        n_excluded = len(extra)
    data, disp, ids = _rows(rows, cv.fold)
    sdata, sdisp, sids = _seed_rows(rows)
    sdata["galar_fold"] = cv.fold
    return [Table("cross_vendor", _title(TITLE, cv.fold), data, disp, ids, tuple(notes),
                  paper=PAPER),
            Table("cross_vendor_seeds", _title(SEED_TITLE, cv.fold), sdata, sdisp, sids,
                  (notes[0], notes[-1 - n_excluded]), paper=PAPER),
            calibrated_table(an, rows, cv.fold)]
