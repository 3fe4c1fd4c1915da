"""Score a GalKva-2026 submission: retention ratio, band, sign-positive seeds, leaderboard row.

Retention = Delta_Galar / Delta_Kvasir, each Delta = method minus the submitter's own RGB
baseline (macro-AUC over the benchmark's scoring set). Bands (paper, "GalKva-2026"):
Strong >= 1.0; Positive 0.75-1.0; Partial 0.30-0.75; Null -0.10-0.30; Negative < -0.10.
The ratio is not banded when Delta_Kvasir <= 0 (no in-domain lift to retain; the sign of the
ratio flips) and is marked unstable when Delta_Kvasir's confidence interval includes zero.

A submission alone only carries typed-in numbers: every number shown from it is labelled
"self-reported". :func:`pipi.galkva.recompute.score_predictions` recomputes them from
per-frame predictions and labels them "recomputed".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipi.errors import DataError
from pipi.galkva.validate import check_submission, load_submission, validate_submission
from pipi.stats import ConfidenceInterval

__all__ = [
    "BANDS",
    "BENCHMARK_VERSION",
    "LEADERBOARD_HEADER",
    "SCORING_SETS",
    "DatasetSummary",
    "Discrepancy",
    "InvalidSubmissionError",
    "Retention",
    "SubmissionScore",
    "classify_retention",
    "format_number",
    "retention_band",
    "score_submission",
]

BENCHMARK_VERSION = "v1.0"
#: Classes of the macro-AUC of each benchmark version (v1.0: the 6-class intersection).
SCORING_SETS: dict[str, tuple[str, ...]] = {
    "v1.0": ("Angiectasia", "Blood - fresh", "Lymphangiectasia", "Normal clean mucosa",
             "Polyp", "Ulcer"),
}
#: (band, lower bound), checked in order: the first bound the retention reaches names it.
BANDS: tuple[tuple[str, float], ...] = (
    ("Strong", 1.0), ("Positive", 0.75), ("Partial", 0.30), ("Null", -0.10),
    ("Negative", -math.inf),
)
UNDEFINED = "undefined/unstable"
SELF, RECOMPUTED = "self-reported", "recomputed"
LEADERBOARD_HEADER = (
    "| Method | Submitter | Trained on | Kvasir macro-AUC | Galar macro-AUC | Δ Kvasir | Δ Galar "
    "| Retention | Band | Sign+ Kvasir | Sign+ Galar | Numbers |\n"
    "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|"
)


class InvalidSubmissionError(DataError):
    """A submission that fails its schema; ``violations`` lists every problem."""

    def __init__(self, source: str, violations):
        self.violations = tuple(violations)
        lines = "\n".join(f"  {v}" for v in self.violations)
        super().__init__(
            f"{source}: invalid GalKva submission ({len(self.violations)} problem(s)); "
            f"run `pipi galkva validate` for details\n{lines}"
        )


@dataclass(frozen=True)
class Retention:
    """Delta_Galar / Delta_Kvasir, its band and whether it can be read."""

    value: float  # NaN when undefined
    band: str  # one of BANDS' names, or "undefined/unstable"
    stable: bool
    reason: str  # why it is undefined or unstable ("" when neither)
    confidence_interval: ConfidenceInterval | None = None  # percentile, video bootstrap

    @property
    def label(self) -> str:
        if self.band == UNDEFINED or self.stable:
            return self.band
        return f"{self.band} (unstable)"


def retention_band(retention: float) -> str:
    """Band of a retention ratio (Strong >= 1.0 ... Negative < -0.10)."""
    if not math.isfinite(retention):
        return UNDEFINED
    for name, low in BANDS:
        if retention >= low:
            return name
    raise AssertionError("unreachable")


def classify_retention(
    delta_kvasir: float | None,
    delta_galar: float | None,
    *,
    delta_kvasir_ci: ConfidenceInterval | None = None,
    confidence_interval: ConfidenceInterval | None = None,
) -> Retention:
    """Retention ratio with its band; undefined when Delta_Kvasir <= 0, unstable when
    Delta_Kvasir's confidence interval includes 0.

    Examples
    --------
    >>> classify_retention(0.023, 0.002).band
    'Null'
    >>> classify_retention(-0.017, -0.010).band
    'undefined/unstable'
    """
    if delta_kvasir is None or delta_galar is None:
        missing = "Delta_Kvasir" if delta_kvasir is None else "Delta_Galar"
        return Retention(math.nan, UNDEFINED, False, f"{missing} is not reported")
    if delta_kvasir <= 0:
        value = delta_galar / delta_kvasir if delta_kvasir != 0 else math.nan
        return Retention(
            value, UNDEFINED, False,
            f"Delta_Kvasir = {delta_kvasir:+.4f} <= 0: no in-domain lift to retain, and the "
            "ratio flips sign (value shown for reference only)",
            confidence_interval,
        )
    value = delta_galar / delta_kvasir
    band = retention_band(value)
    if delta_kvasir_ci is not None and not delta_kvasir_ci.low > 0:  # NaN: no interval
        return Retention(
            value, band, False,
            f"Delta_Kvasir's CI [{delta_kvasir_ci.low:+.4f}, {delta_kvasir_ci.high:+.4f}] "
            + ("includes 0" if delta_kvasir_ci.low <= 0 else "could not be computed")
            + ": the ratio is unstable",
            confidence_interval,
        )
    return Retention(value, band, True, "", confidence_interval)


@dataclass(frozen=True)
class DatasetSummary:
    """One dataset's numbers as shown by the score (self-reported or recomputed)."""

    macro_auc_mean: float
    macro_auc_sd: float | None  # None for one seed: no spread measured ("n/a", JSON null)
    delta: float | None  # method - RGB baseline
    sign_positive_seeds: str | None  # "4/6"
    n_test_frames: int
    source: str  # "self-reported" | "recomputed"
    delta_ci: ConfidenceInterval | None = None


@dataclass(frozen=True)
class Discrepancy:
    """A self-reported number that the predictions do not reproduce."""

    path: str  # JSON path in the submission
    reported: object
    recomputed: object

    def __str__(self) -> str:
        return f"{self.path}: reported {self.reported!r}, recomputed {self.recomputed!r}"


def format_number(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


@dataclass(frozen=True)
class SubmissionScore:
    """What ``pipi galkva score`` prints, as data."""

    method: str
    submitter: str
    affiliation: str
    trained_on: str
    benchmark_version: str
    kvasir: DatasetSummary
    galar: DatasetSummary
    retention: Retention
    checks: tuple[str, ...] = ()  # pipi's warnings on the self-reported numbers
    discrepancies: tuple[Discrepancy, ...] = ()  # self-reported vs recomputed
    details: tuple[str, ...] = ()  # extra report lines (DeLong, bootstrap) when recomputed

    @property
    def source(self) -> str:
        return self.kvasir.source

    def report(self) -> str:
        """Plain-text report: per-dataset numbers, retention and band, with sources."""
        k, g, r = self.kvasir, self.galar, self.retention
        tag = f"({self.source})"
        rows = [
            ("macro-AUC (method)", f"{format_number(k.macro_auc_mean)} ± {format_number(k.macro_auc_sd)}",
             f"{format_number(g.macro_auc_mean)} ± {format_number(g.macro_auc_sd)}"),
            ("Δ vs RGB baseline", format_number(k.delta, "+.4f"), format_number(g.delta, "+.4f")),
            ("Δ 95% CI (video bootstrap)", _ci(k.delta_ci), _ci(g.delta_ci)),
            ("sign-positive seeds", k.sign_positive_seeds or "n/a", g.sign_positive_seeds or "n/a"),
            ("test frames", f"{k.n_test_frames:,}", f"{g.n_test_frames:,}"),
        ]
        if k.delta_ci is None and g.delta_ci is None:
            rows.pop(2)
        title = (f"GalKva-2026 {self.benchmark_version}: {self.method} "
                 f"({self.submitter}, {self.affiliation}; trained on {self.trained_on})")
        lines = [title, f"{'':<28}{'Kvasir-Capsule':>21}{'Galar':>21}"]
        lines += [f"{name:<28}{a:>21}{b:>21}  {tag}" for name, a, b in rows]
        ret = f"Retention Δ_Galar/Δ_Kvasir = {format_number(r.value, '+.2f')} -> {r.label}"
        if r.confidence_interval is not None:
            ret += f"  (95% CI {_ci(r.confidence_interval, '+.2f')})"
        lines.append(f"{ret}  ({self.source} inputs)")
        if r.reason:
            lines.append(f"  note: {r.reason}")
        lines += list(self.details)
        lines += [f"  {c}" for c in self.checks]
        if self.discrepancies:
            lines.append(f"self-reported numbers that the predictions do not reproduce "
                         f"({len(self.discrepancies)}):")
            lines += [f"  MISMATCH {d}" for d in self.discrepancies]
        return "\n".join(lines)

    def markdown_row(self) -> str:
        """One leaderboard row (columns of :data:`LEADERBOARD_HEADER`)."""
        k, g, r = self.kvasir, self.galar, self.retention
        cells = [
            self.method.replace("|", "/"), f"{self.submitter} ({self.affiliation})",
            self.trained_on,
            f"{format_number(k.macro_auc_mean)} ± {format_number(k.macro_auc_sd)}",
            f"{format_number(g.macro_auc_mean)} ± {format_number(g.macro_auc_sd)}",
            format_number(k.delta, "+.3f"), format_number(g.delta, "+.3f"), format_number(r.value, "+.2f"), r.label,
            k.sign_positive_seeds or "n/a", g.sign_positive_seeds or "n/a",
            self.source + (f", {len(self.discrepancies)} mismatch(es)" if self.discrepancies else ""),
        ]
        return "| " + " | ".join(cells) + " |"


def _ci(ci: ConfidenceInterval | None, spec: str = "+.4f") -> str:
    return "n/a" if ci is None else f"[{format_number(ci.low, spec)}, {format_number(ci.high, spec)}]"


def _self_reported(res: dict, n_seeds: int | None) -> DatasetSummary:
    # the schema makes macro_auc.sd a number; of one seed it measures nothing (shown n/a)
    seeds = res["macro_auc"].get("per_seed_values")
    one = n_seeds == 1 or (isinstance(seeds, list) and len(seeds) == 1)
    return DatasetSummary(
        macro_auc_mean=float(res["macro_auc"]["mean"]),
        macro_auc_sd=None if one else float(res["macro_auc"]["sd"]),
        delta=None if res.get("delta_vs_rgb_baseline") is None
        else float(res["delta_vs_rgb_baseline"]),
        sign_positive_seeds=res.get("sign_positive_seeds"),
        n_test_frames=int(res["n_test_frames"]),
        source=SELF,
    )


def score_submission(obj_or_path, *, tolerance: float = 1e-3) -> SubmissionScore:
    """Score a submission from its self-reported numbers (every one labelled so).

    Raises :class:`InvalidSubmissionError` (with every violation) if it fails the schema.
    """
    violations = validate_submission(obj_or_path)
    if violations:
        raise InvalidSubmissionError(str(obj_or_path) if not isinstance(obj_or_path, dict)
                                     else "submission", violations)
    doc = load_submission(obj_or_path)
    n = doc.get("n_seeds")
    k, g = (_self_reported(doc["results"][ds], n if isinstance(n, int) else None)
            for ds in ("kvasir", "galar"))
    return SubmissionScore(
        method=doc["method"]["name"],
        submitter=doc["submitter"]["name"],
        affiliation=doc["submitter"]["affiliation"],
        trained_on=doc["method"].get("trained_on", "n/a"),
        benchmark_version=doc["benchmark_version"],
        kvasir=k, galar=g,
        retention=classify_retention(k.delta, g.delta),
        details=((f"note: the Δ are as self-reported. The GalKva {BENCHMARK_VERSION} "
                  "leaderboard defines both over the 6-class scoring set; the paper's reference "
                  "entries divide by the Kvasir Δ of its 11-class headline instead, a different "
                  "number for the same runs (`pipi galkva score --predictions` shows both)."),),
        checks=tuple(str(w) for w in check_submission(doc, tolerance=tolerance,
                                                      scoring_sets=SCORING_SETS)),
    )
