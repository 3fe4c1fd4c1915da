"""Shared pieces of the paper tables: run-id maps, 'no runs' tables, summary and CI columns."""

from __future__ import annotations

from collections.abc import Sequence

from pipi.analysis import BREAKDOWN_PAIRS, Analysis, ArmEvidence, Comparison, Evidence, seeds_text
from pipi.report.tables import NO_RUNS, Table, fmt_ci
from pipi.stats import MIN_VIDEOS_CLASS, MIN_VIDEOS_MACRO, DeltaBootstrapResult, SeedBCaResult

__all__ = ["arm_summary", "base_run_notes", "bootstrap_note", "breakdown_pair", "ci_cols",
           "ci_header", "ci_text", "delta_cis", "no_runs", "present_pairs", "run_map",
           "seed_bca_text", "seed_ci_header", "seed_ci_note", "seed_ci_text", "seed_cols"]


def run_map(arm: ArmEvidence | None) -> dict[int, str]:
    """seed -> run id of an arm ({} without runs)."""
    return arm.runs() if arm is not None else {}


def no_runs(key: str, title: str, paper: str, *notes: str) -> Table:
    """A table whose runs do not exist: status "no runs" and the reason in its notes."""
    return Table(key, title, notes=tuple(notes), status=NO_RUNS, paper=paper)


def arm_summary(arm: ArmEvidence | None) -> dict:
    """n_seeds, seeds, mean and sd (ddof = 1) of an arm's macro-AUC."""
    if arm is None:
        return {"n_seeds": 0, "seeds": "", "mean": float("nan"), "sd": float("nan")}
    m = arm.macro
    return {"n_seeds": len(m), "seeds": seeds_text(arm.seeds), "mean": float(m.mean()),
            "sd": float(m.std(ddof=1)) if len(m) > 1 else float("nan")}


def ci_cols(c: Comparison | DeltaBootstrapResult | None, prefix: str = "") -> dict:
    """The bootstrap columns of a table row: intervals, p, resampling unit, redrawn resamples;
    for a comparison (or a missing one) also the seed-level BCa (``seed_ci_bca_*``, whether
    it is unstable and why)."""
    b = c.bootstrap if isinstance(c, Comparison) else c
    nan = float("nan")
    seed = {}
    if c is None or isinstance(c, Comparison):
        seed = seed_cols(c.seed_bca if c is not None else None, prefix)
    return {f"{prefix}ci_percentile_low": b.percentile_interval.low if b else nan,
            f"{prefix}ci_percentile_high": b.percentile_interval.high if b else nan,
            f"{prefix}ci_bca_low": b.bca_interval.low if b else nan,
            f"{prefix}ci_bca_high": b.bca_interval.high if b else nan,
            f"{prefix}bootstrap_p": b.pvalue if b else nan,
            f"{prefix}bootstrap_unit": b.unit if b else "",
            f"{prefix}bootstrap_redrawn": b.n_redrawn if b else None, **seed}


def seed_cols(sb: SeedBCaResult | None, prefix: str = "") -> dict:
    """The seed-level interval columns of a row (``seed_ci_*``: BCa and percentile from the
    same resamples of the seeds; NaN / empty without one)."""
    nan = float("nan")
    return {f"{prefix}seed_ci_bca_low": sb.confidence_interval.low if sb else nan,
            f"{prefix}seed_ci_bca_high": sb.confidence_interval.high if sb else nan,
            f"{prefix}seed_ci_percentile_low": sb.percentile_interval.low if sb else nan,
            f"{prefix}seed_ci_percentile_high": sb.percentile_interval.high if sb else nan,
            f"{prefix}seed_ci_unit": "seeds" if sb else "",
            f"{prefix}seed_ci_n_seeds": sb.n_seeds if sb else 0,
            f"{prefix}seed_ci_unstable": sb.unstable if sb else None,
            f"{prefix}seed_ci_reason": sb.reason if sb else ""}


def ci_header(an: Analysis, kind: str = "BCa") -> str:
    """Column title of a bootstrap interval: ``95% BCa CI (videos)``."""
    return f"{round(100 * an.options.confidence_level)}% {kind} CI ({an.bootstrap_unit})"


def ci_text(b: DeltaBootstrapResult | None, an: Analysis, *, kind: str = "bca",
            digits: int = 3) -> str:
    """An interval, with its resampling unit when it is not the column's (a fallback)."""
    if b is None:
        return ""
    text = fmt_ci(*(b.bca_interval if kind == "bca" else b.percentile_interval), digits=digits)
    return text if b.unit == an.bootstrap_unit else f"{text} [{b.unit}]"


def seed_ci_header(an: Analysis, kind: str = "BCa") -> str:
    """Column title of a seed-level interval: ``95% BCa CI (seeds)``, ``95% percentile CI
    (seeds)``."""
    return f"{round(100 * an.options.confidence_level)}% {kind} CI (seeds)"


def seed_ci_text(c: Comparison | None, *, kind: str = "bca", digits: int = 3) -> str:
    """The seed-level interval of a comparison (``kind``: "bca", ``(unstable)`` where n seeds
    cannot carry it, or "percentile")."""
    sb = c.seed_bca if c is not None else None
    if sb is None:
        return "n/a (< 2 seeds)" if c is not None and c.available else ""
    return seed_bca_text(sb, kind=kind, digits=digits)


def seed_bca_text(sb: SeedBCaResult, *, kind: str = "bca", digits: int = 3) -> str:
    """A seed-level BCa interval, ``(unstable)`` where n seeds cannot carry it; with
    ``kind="percentile"`` the percentile interval of the same resamples."""
    if kind == "percentile":
        return fmt_ci(*sb.percentile_interval, digits=digits)
    text = fmt_ci(*sb.confidence_interval, digits=digits)
    return f"{text} (unstable)" if sb.unstable else text


def delta_cis(an: Analysis, c: Comparison | None, *, digits: int = 3) -> dict:
    """The display intervals of a cross-seed delta, each titled with what it resamples: the
    (videos) BCa, the seed-level BCa and the seed-level percentile interval."""
    ok = c is not None and c.available
    return {ci_header(an): ci_text(c.bootstrap, an, digits=digits) if ok else "",
            seed_ci_header(an): seed_ci_text(c, digits=digits) if ok else "",
            seed_ci_header(an, "percentile"): (seed_ci_text(c, kind="percentile", digits=digits)
                                               if ok else "")}


def seed_ci_note(an: Analysis, comps=(), *, what: str = "per-seed paired deltas") -> str:
    """What the seed-level column resamples (``what``: the deltas), and which of ``comps``
    are unstable and why."""
    o = an.options
    text = (f"BCa CI (seeds): the paper's interval, {o.n_resamples} bootstrap resamples of the "
            f"{what} (seeds resampled with replacement, test set fixed); percentile CI "
            "(seeds): the percentile interval of the same resamples (the paper quotes both, e.g. "
            "[-0.005, +0.032] for (b+) vs (e+)). Both speak to another draw of training seeds, "
            "the (videos) column to another draw of test videos. With six seeds the mean has "
            "at most 462 distinct bootstrap values: "
            "'(unstable)' marks a BCa interval whose endpoint sits at the smallest/largest "
            "per-seed delta or rests on fewer than 10 resamples beyond it (column "
            "seed_ci_reason).")
    bad = [f"{c.label}: {c.seed_bca.reason}" for c in comps
           if c is not None and c.seed_bca is not None and c.seed_bca.unstable]
    return text + (" Unstable here: " + "; ".join(bad) + "." if bad else "")


def bootstrap_note(an: Analysis) -> str:
    """How the intervals of a table were resampled (the option and its fallback)."""
    o = an.options
    if o.resample == "frame":
        how = "test frames (resample=frame, the published code's frame-level resampling)"
        fallback = ""
    else:
        how = "test videos (resample=video)"
        fallback = (f" An interval whose classes have positives in too few test videos (< "
                    f"{MIN_VIDEOS_CLASS} for one class, < {MIN_VIDEOS_MACRO} for a mean over "
                    "classes) resamples the frames within each class instead, marked "
                    "[frames (stratified by class)].")
    return (f"Bootstrap: {o.n_resamples} resamples of {how} with replacement, each applied to "
            "every seed and arm; the class set is fixed: a resample that loses every positive "
            "of a class is drawn again (counted in column bootstrap_redrawn); the BCa "
            "jackknife leaves one unit out." + fallback)


def present_pairs(an: Analysis, pairs, backbone: str) -> tuple[list, list[str]]:
    """(pairs with runs of both arms, 'r vs n' of the others)."""
    ev = an.evidence
    ok = [(r, n) for r, n in pairs if ev.arm(backbone, r) and ev.arm(backbone, n)]
    skipped = [f"{r} vs {n}" for r, n in pairs if (r, n) not in ok]
    return ok, skipped


def breakdown_pair(an: Analysis) -> tuple[str, str] | None:
    """The first breakdown pair with runs of both arms."""
    pairs, _ = present_pairs(an, BREAKDOWN_PAIRS, an.headline)
    return pairs[0] if pairs else None


def base_run_notes(ev: Evidence, backbone: str, reference: str,
                   arms: Sequence[str]) -> list[str]:
    """Variant runs evaluated on another run than the reference run paired with them."""
    ref = ev.arm(backbone, reference)
    if ref is None or "base_run_id" not in ev.runs:
        return []
    base = ev.runs.set_index("run_id")["base_run_id"].fillna("")
    notes = []
    for c in arms:
        arm = ev.arm(backbone, c)
        for seed, rid in (arm.runs().items() if arm else ()):
            want = ref.runs().get(seed)
            got = base.get(rid, "")
            if got and want and got != want:
                notes.append(f"WARNING: {c} seed {seed} (run {rid}) evaluated {reference} run "
                             f"{got}, but the {reference} run paired with it is {want}")
    return notes
