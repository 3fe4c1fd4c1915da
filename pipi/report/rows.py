"""Shared pieces of the paper tables: run-id maps, 'no runs' tables, summary and CI columns."""

from __future__ import annotations

from pipi.analysis import BREAKDOWN_PAIRS, Analysis, Arm, Comparison, seeds_text
from pipi.report.tables import NO_RUNS, Table

__all__ = ["arm_summary", "breakdown_pair", "ci_cols", "no_runs", "present_pairs", "run_map"]


def run_map(arm: Arm | None) -> dict[int, str]:
    return arm.runs() if arm is not None else {}


def no_runs(key: str, title: str, paper: str, *notes: str) -> Table:
    return Table(key, title, notes=tuple(notes), status=NO_RUNS, paper=paper)


def arm_summary(arm: Arm | None) -> dict:
    if arm is None:
        return {"n_seeds": 0, "seeds": "", "mean": float("nan"), "sd": float("nan")}
    m = arm.macro
    return {"n_seeds": len(m), "seeds": seeds_text(arm.seeds), "mean": float(m.mean()),
            "sd": float(m.std(ddof=1)) if len(m) > 1 else float("nan")}


def ci_cols(c: Comparison | None, prefix: str = "") -> dict:
    b = c.bootstrap if c is not None else None
    nan = float("nan")
    return {f"{prefix}ci_percentile_low": b.percentile.low if b else nan,
            f"{prefix}ci_percentile_high": b.percentile.high if b else nan,
            f"{prefix}ci_bca_low": b.bca.low if b else nan,
            f"{prefix}ci_bca_high": b.bca.high if b else nan,
            f"{prefix}bootstrap_p": b.pvalue if b else nan}



def present_pairs(an: Analysis, pairs, backbone: str) -> tuple[list, list[str]]:
    ev = an.evidence
    ok = [(r, n) for r, n in pairs if ev.arm(backbone, r) and ev.arm(backbone, n)]
    skipped = [f"{r} vs {n}" for r, n in pairs if (r, n) not in ok]
    return ok, skipped



def breakdown_pair(an: Analysis) -> tuple[str, str] | None:
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS, an.headline)
    return pairs[0] if pairs else None
