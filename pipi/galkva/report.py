"""The evaluator's outputs: every number of a score as JSON, and a self-contained Markdown report.

``pipi galkva score --predictions DIR --json out.json --report report.md`` writes both from
the same :class:`~pipi.galkva.score.SubmissionScore` and
:class:`~pipi.galkva.recompute.Recomputed`, so the report shows exactly the JSON's numbers
(rounded for reading). Without predictions only the self-reported numbers exist, and the
report says that p-values and intervals need ``--predictions``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from pipi.errors import DataError
from pipi.galkva.recompute import DATASETS, DatasetRecompute, Recomputed
from pipi.galkva.score import LEADERBOARD_HEADER, SubmissionScore
from pipi.stats import ADJUST_METHODS, PVALUE_KINDS, ConfidenceInterval

__all__ = ["EVALUATION_FORMAT", "evaluation", "evaluation_json", "markdown_report",
           "write_text_atomic"]

EVALUATION_FORMAT = "pipi.galkva.evaluation"
EVALUATION_VERSION = 1
DATASET_TITLES = {"kvasir": "Kvasir-Capsule", "galar": "Galar"}
#: Short column names of the p-value kinds (:data:`pipi.stats.PVALUE_KINDS`).
PVALUE_SHORT = {"stouffer": "Stouffer", "sign_flip": "sign-flip", "bootstrap": "bootstrap"}
ADJUST_SHORT = {"bonferroni": "Bonf.", "bh": "BH"}


# --------------------------------------------------------------------------- JSON
def _num(x) -> float | None:
    """A JSON-safe float (None for NaN/inf/None)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _ci(ci: ConfidenceInterval | None) -> list | None:
    return None if ci is None else [_num(ci.low), _num(ci.high)]


def _sd(v: np.ndarray) -> float | None:
    return _num(np.std(v, ddof=1)) if len(v) > 1 else None


def _dataset(r: DatasetRecompute) -> dict:
    comp, boot = r.comparison, r.bootstrap
    per_class = []
    for j, cd in enumerate(r.per_class):
        bt = cd.bootstrap
        per_class.append({
            "class": r.classes[j],
            "n_positive": r.n_positive[r.classes[j]],
            "baseline_auc_mean": _num(r.baseline_per_class[:, j].mean()),
            "method_auc_mean": _num(r.method_per_class[:, j].mean()),
            "delta": _num(cd.delta),
            "delta_per_seed": [_num(d) for d in cd.deltas],
            "sign_positive_seeds": cd.sign_positive,
            "delong_z_per_seed": [_num(z) for z in cd.delong_statistic],
            "delong_pvalue_per_seed": [_num(p) for p in cd.delong_pvalue],
            "stouffer_z": _num(cd.stouffer.statistic),
            "pvalues": {k: _num(v) for k, v in cd.pvalues.items()},
            "adjusted": {k: _num(v) for k, v in cd.adjusted.items()},
            "percentile_interval": _ci(bt.percentile_interval),
            "bca_interval": _ci(bt.bca_interval),
            "bootstrap_unit": bt.unit,
            "n_resamples": bt.n_resamples,
        })
    return {
        "seeds": list(r.seeds),
        "n_test_frames": r.n_test_frames,
        "n_videos": r.n_videos,
        "classes": list(r.classes),
        "classes_not_scored": list(r.missing_classes),
        "macro": {
            "baseline_mean": _num(r.baseline_macro.mean()), "baseline_sd": _sd(r.baseline_macro),
            "method_mean": _num(r.method_macro.mean()), "method_sd": _sd(r.method_macro),
            "delta": _num(r.delta), "delta_per_seed": [_num(d) for d in r.deltas],
            "sign_positive_seeds": r.sign_positive_seeds,
            "percentile_interval": _ci(boot.percentile_interval),
            "bca_interval": _ci(boot.bca_interval),
            "bootstrap_unit": boot.unit, "n_resamples": boot.n_resamples,
            "stouffer_z": _num(comp.stouffer.statistic) if comp.stouffer else None,
            "pvalues": {k: _num(v) for k, v in comp.pvalues.items()},
            "delong_per_seed": [{"seed": s, "z": _num(d.statistic), "pvalue": _num(d.pvalue)}
                                for s, d in zip(r.seeds, r.delong)],
        },
        "per_class": per_class,
    }


def evaluation(score: SubmissionScore, rec: Recomputed | None = None) -> dict:
    """Every number of a score (and of its recomputation, when there is one) as JSON data.

    NaN becomes ``null``; intervals are ``[low, high]``. With ``rec``, per dataset: the macro
    delta with percentile and BCa intervals and its cross-seed p-values, and per class the
    AUCs, deltas, per-seed paired DeLong z and p, the cross-seed p-values
    (:data:`pipi.stats.PVALUE_KINDS`) raw and adjusted (``<kind>_<bonferroni|bh>``, over the
    dataset's classes), and percentile and BCa intervals.
    """
    r = score.retention
    out = {
        "format": EVALUATION_FORMAT, "version": EVALUATION_VERSION,
        "benchmark_version": score.benchmark_version, "method": score.method,
        "submitter": score.submitter, "affiliation": score.affiliation,
        "trained_on": score.trained_on, "source": score.source,
        "summary": {ds: {"macro_auc_mean": _num(s.macro_auc_mean),
                         "macro_auc_sd": _num(s.macro_auc_sd), "delta": _num(s.delta),
                         "sign_positive_seeds": s.sign_positive_seeds,
                         "n_test_frames": s.n_test_frames}
                    for ds, s in (("kvasir", score.kvasir), ("galar", score.galar))},
        "retention": {"value": _num(r.value), "band": r.band, "label": r.label,
                      "stable": r.stable, "reason": r.reason},
        "leaderboard_header": LEADERBOARD_HEADER,
        "leaderboard_row": score.markdown_row(),
        "checks": list(score.checks),
        "discrepancies": [{"path": d.path, "reported": d.reported, "recomputed": d.recomputed}
                          for d in score.discrepancies],
    }
    if rec is not None:
        rb = rec.retention_bootstrap
        out["retention"] |= {
            "percentile_interval": _ci(rb.percentile_interval),
            "bca_interval": _ci(rb.bca_interval),
            "bca_bias_correction": _num(rb.bias_correction),
            "bca_acceleration": _num(rb.acceleration),
            "confidence_level": rb.confidence_level,
            "n_finite_draws": rb.n_finite, "n_draws": int(rb.distribution.size),
        }
        out["datasets"] = {ds: _dataset(rec[ds]) for ds in DATASETS}
        out["pvalue_kinds"] = dict(PVALUE_KINDS)
        out["adjustments"] = {"bonferroni": "Bonferroni (family-wise error rate)",
                              "bh": "Benjamini-Hochberg (false discovery rate)",
                              "family": "the scored classes of one dataset, per p-value kind"}
    return out


# --------------------------------------------------------------------------- Markdown
def _f(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else format(float(x), spec)


def _p(x) -> str:
    """Four significant digits (scientific below 1e-4)."""
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    return format(float(x), ".3e" if 0 < float(x) < 1e-4 else ".4g")


def _cii(ci, spec: str = "+.4f") -> str:
    if ci is None:
        return "n/a"
    low, high = ci
    return f"[{_f(low, spec)}, {_f(high, spec)}]"


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    esc = [[str(c).replace("|", "/") for c in row] for row in [header, *rows]]
    return ["| " + " | ".join(r) + " |" for r in esc[:1]] + ["|" + "|".join(sep) + "|"] + \
           ["| " + " | ".join(r) + " |" for r in esc[1:]]


def _mean_sd(m, s) -> str:
    return f"{_f(m)} ± {_f(s)}"  # _f(None): n/a (one seed has no sd)


def _summary_section(ev: dict) -> list[str]:
    k, g = ev["summary"]["kvasir"], ev["summary"]["galar"]
    ds = ev.get("datasets")
    rows = []
    if ds:
        dk, dg = ds["kvasir"]["macro"], ds["galar"]["macro"]
        rows.append(["macro-AUC (RGB baseline)", _mean_sd(dk["baseline_mean"], dk["baseline_sd"]),
                     _mean_sd(dg["baseline_mean"], dg["baseline_sd"])])
    rows += [["macro-AUC (method)", _mean_sd(k["macro_auc_mean"], k["macro_auc_sd"]),
              _mean_sd(g["macro_auc_mean"], g["macro_auc_sd"])],
             ["Δ vs RGB baseline", _f(k["delta"], "+.4f"), _f(g["delta"], "+.4f")]]
    if ds:
        rows += [["Δ 95% CI, percentile", _cii(dk["percentile_interval"]),
                  _cii(dg["percentile_interval"])],
                 ["Δ 95% CI, BCa", _cii(dk["bca_interval"]), _cii(dg["bca_interval"])]]
        rows += [[f"Δ p ({PVALUE_SHORT[kind]})", _p(dk["pvalues"][kind]), _p(dg["pvalues"][kind])]
                 for kind in PVALUE_KINDS]
    rows += [["sign-positive seeds", k["sign_positive_seeds"] or "n/a",
              g["sign_positive_seeds"] or "n/a"],
             ["test frames", str(k["n_test_frames"]), str(g["n_test_frames"])]]
    if ds:
        rows += [["test videos", str(ds["kvasir"]["n_videos"]), str(ds["galar"]["n_videos"])],
                 ["seed pairs", str(len(ds["kvasir"]["seeds"])), str(len(ds["galar"]["seeds"]))]]
    return [f"## Macro-AUC per dataset ({ev['source']})", "",
            *_table(["", "Kvasir-Capsule", "Galar"], rows), ""]


def _retention_section(ev: dict) -> list[str]:
    r = ev["retention"]
    head, row = ["Retention Δ_Galar / Δ_Kvasir", "Band"], [_f(r["value"], "+.3f"), r["label"]]
    if "percentile_interval" in r:
        level = round(100 * r["confidence_level"])
        head += [f"{level}% CI, percentile", f"{level}% CI, BCa"]
        row += [_cii(r["percentile_interval"], "+.3f"), _cii(r["bca_interval"], "+.3f")]
    out = ["## Retention", "", *_table(head, [row], "rl" + "r" * (len(head) - 2)), ""]
    if r["reason"]:
        out += [f"Note: {r['reason']}.", ""]
    if "percentile_interval" in r:
        out += [(f"Intervals over {r['n_finite_draws']} of {r['n_draws']} bootstrap draws "
                "(a draw is Δ_Galar* / Δ_Kvasir* from independent resamples of each dataset's "
                "test videos; draws with Δ_Kvasir* = 0 are left out). BCa: bias correction "
                f"z0 = {_f(r['bca_bias_correction'], '+.3f')}, two-sample jackknife "
                f"acceleration a = {_f(r['bca_acceleration'], '+.4f')}."), ""]
    return out


def _per_class_sections(ds: str, d: dict) -> list[str]:
    title = DATASET_TITLES[ds]
    rows = [[c["class"], str(c["n_positive"]), _f(c["baseline_auc_mean"]), _f(c["method_auc_mean"]),
             _f(c["delta"], "+.4f"), c["sign_positive_seeds"], _cii(c["percentile_interval"]),
             _cii(c["bca_interval"]), c["bootstrap_unit"]] for c in d["per_class"]]
    out = [f"## Per-class AUC deltas: {title}", "",
           *_table(["Class", "positives", "AUC baseline", "AUC method", "Δ", "seeds Δ > 0",
                    "95% CI, percentile", "95% CI, BCa", "resampled"], rows, "lrrrrrrrl"), ""]
    head = ["Class", "Stouffer z"]
    for kind in PVALUE_KINDS:
        head += [f"p {PVALUE_SHORT[kind]}"] + [f"{ADJUST_SHORT[m]}" for m in ADJUST_METHODS]
    rows = []
    for c in d["per_class"]:
        row = [c["class"], _f(c["stouffer_z"], "+.3f")]
        for kind in PVALUE_KINDS:
            row += [_p(c["pvalues"][kind])] + [_p(c["adjusted"][f"{kind}_{m}"])
                                               for m in ADJUST_METHODS]
        rows.append(row)
    out += [f"## Per-class p-values: {title}", "", *_table(head, rows), ""]
    if d["classes_not_scored"]:
        out += [f"Not scored (no positive or no negative frame): {', '.join(d['classes_not_scored'])}.",
                ""]
    seeds = [[s["seed"], _f(x, "+.4f"), _f(s["z"], "+.3f"), _p(s["pvalue"])]
             for s, x in zip(d["macro"]["delong_per_seed"], d["macro"]["delta_per_seed"])]
    out += [f"## Per-seed paired DeLong test of the macro-AUC: {title}", "",
            *_table(["Seed", "Δ macro-AUC", "DeLong z", "p"], seeds), ""]
    return out


def _methods(ev: dict) -> list[str]:
    kinds = "\n".join(f"  - **{PVALUE_SHORT[k]}**: {v}." for k, v in ev["pvalue_kinds"].items())
    return ["## How these numbers were computed", "",
            ("- Frames: those whose label is in the scoring set; class k is scored one-vs-rest "
            "on its probability column; seed s of the method is paired with seed s of the RGB "
            "baseline on the same frames."),
            ("- Per-seed paired DeLong tests treat frames as independent (frames of one video "
            "are not, which makes their p-values too small)."),
            "- Cross-seed p-values of each delta:", kinds,
            ("- Bonferroni and Benjamini-Hochberg adjust each p-value kind over the scored "
            "classes of one dataset (one family)."),
            ("- Intervals: bootstrap of the cross-seed mean delta resampling test videos (the "
            "same resample for every seed and arm; `resampled` says where a class had too few "
            "videos with positives and its frames were resampled within class instead), "
            "percentile and BCa (Efron & Tibshirani 1993)."), ""]


def markdown_report(score: SubmissionScore, rec: Recomputed | None = None) -> str:
    """A self-contained Markdown report of a score: the leaderboard row, per-dataset and
    per-class tables, the retention with its intervals, and how each number was computed."""
    ev = evaluation(score, rec)
    lines = [f"# GalKva-2026 {ev['benchmark_version']} evaluation: {ev['method']}", "",
             f"Submitter: {ev['submitter']} ({ev['affiliation']}); trained on "
             f"{ev['trained_on']}. Numbers: {ev['source']}"
             + (" from per-frame predictions." if rec is not None else
                " (typed into the submission; p-values and intervals need "
                "`pipi galkva score --predictions`)."), "",
             "## Leaderboard row", "", ev["leaderboard_header"], ev["leaderboard_row"], ""]
    lines += _summary_section(ev) + _retention_section(ev)
    if rec is not None:
        for ds in DATASETS:
            lines += _per_class_sections(ds, ev["datasets"][ds])
        lines += _methods(ev)
    if ev["checks"]:
        lines += ["## Checks of the self-reported numbers", "",
                  *[f"- {c}" for c in ev["checks"]], ""]
    if ev["discrepancies"]:
        lines += [(f"## Self-reported numbers the predictions do not reproduce "
                  f"({len(ev['discrepancies'])})"), "",
                  *_table(["Field", "reported", "recomputed"],
                          [[f"`{d['path']}`", str(d["reported"]), str(d["recomputed"])]
                           for d in ev["discrepancies"]], "lll"), ""]
    return "\n".join(lines)


def write_text_atomic(text: str, path: Path) -> Path:
    """Write ``text`` to ``path`` through a temporary file (never a half-written file)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise DataError(f"{path}: cannot write ({exc})") from None
    return path


def evaluation_json(score: SubmissionScore, rec: Recomputed | None = None) -> str:
    """:func:`evaluation` as indented JSON text (no NaN)."""
    return json.dumps(evaluation(score, rec), indent=2, allow_nan=False) + "\n"
