"""GalKva-2026 numbers recomputed from per-frame predictions (what the published evaluator lacks).

Input: for each dataset (``kvasir``, ``galar``) and arm (``baseline`` = the RGB cell,
``method``), one per-frame predictions table per seed in the format of
:mod:`pipi.predictions`; seeds are paired by name between the two arms and must score the
same frames. On disk (:func:`load_prediction_dir`)::

    DIR/{kvasir,galar}/{baseline,method}/<seed>/   a predictions folder (schema.json +
                                                    test.parquet), or one holding predictions/
    DIR/.../<seed>/run.json                         optional {"run_id": "..."}: provenance

Scored frames: those whose label is in the benchmark version's scoring set (v1.0: the
6-class intersection); class k is scored one-vs-rest on its probability column. Per dataset,
:func:`pipi.stats.compare_arms` (the engine ``aggregate``'s retention table uses too):
per-seed macro-AUC and per-class AUC of both arms, paired deltas, sign-positive seeds, the
paired DeLong test of each seed, per-class p-values combined across seeds (Stouffer, as the
paper, beside a sign-flip test and a video bootstrap) with Bonferroni and BH adjustments,
and video-clustered bootstraps (percentile and BCa) of the mean macro and per-class deltas.
The retention intervals (:func:`pipi.stats.ratio_bootstrap`) are the percentile and the
two-sample BCa intervals of Delta_Galar* / Delta_Kvasir* over independent bootstrap draws
of the two datasets' videos; ``Retention.confidence_interval`` is the percentile one.

This module only reads the benchmark's input and names the numbers; every statistic is
computed in :mod:`pipi.stats`.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.classes import CLASSES, KVASIR_MAP_HINT, ClassSet, class_index, not_kvasir
from pipi.errors import DataError, PipiError
from pipi.galkva.score import (
    BENCHMARK_VERSION,
    RECOMPUTED,
    SCORING_SETS,
    DatasetSummary,
    Discrepancy,
    Retention,
    SubmissionScore,
    classify_retention,
    format_number,
)
from pipi.galkva.validate import check_submission, load_submission
from pipi.predictions import PROB_COLUMNS, read_predictions, read_schema
from pipi.stats import (
    ArmComparison,
    ClassDelta,
    DegenerateDataWarning,
    DeLongMacroResult,
    DeltaBootstrapResult,
    PairedDeltas,
    RatioBootstrapResult,
    compare_arms,
    evaluable_classes,
    per_class_auc,
    ratio_bootstrap,
)

__all__ = [
    "ARMS",
    "DATASETS",
    "DatasetRecompute",
    "DatasetRuns",
    "HeadlineKvasir",
    "PairedDeltas",
    "Recomputed",
    "SeedRun",
    "compare_with_submission",
    "headline_kvasir",
    "load_prediction_dir",
    "recompute",
    "score_predictions",
]

DATASETS = ("kvasir", "galar")
ARMS = ("baseline", "method")


@dataclass(frozen=True)
class SeedRun:
    """One seed's per-frame predictions (pipi.predictions format) and the run that made them."""

    seed: str  # pairing key between the baseline and method arms
    predictions: pd.DataFrame
    run_id: str | None = None


@dataclass(frozen=True)
class DatasetRuns:
    """The two arms of one dataset, one SeedRun per seed each."""

    baseline: tuple[SeedRun, ...]
    method: tuple[SeedRun, ...]


@dataclass(frozen=True)
class DatasetRecompute(PairedDeltas):
    """Everything recomputed on one dataset: :func:`pipi.stats.compare_arms` of the paired
    seeds (``comparison``), with the benchmark's names; arrays are (seeds,) or (seeds, classes)."""

    dataset: str
    seeds: tuple[str, ...]
    missing_classes: tuple[str, ...]  # scoring set classes without positives here
    comparison: ArmComparison
    run_ids: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @property
    def classes(self) -> tuple[str, ...]:
        """Scored classes (scoring set classes with positives and negatives in the frames)."""
        return tuple(CLASSES[c] for c in self.comparison.classes)

    @property
    def n_test_frames(self) -> int:
        return self.comparison.n_frames

    @property
    def n_videos(self) -> int:
        return self.comparison.n_videos

    @property
    def n_positive(self) -> dict[str, int]:
        return {CLASSES[c]: n for c, n in self.comparison.n_positive.items()}

    @property
    def method_macro(self) -> np.ndarray:  # (S,)
        return self.comparison.method_macro

    @property
    def baseline_macro(self) -> np.ndarray:  # (S,)
        return self.comparison.baseline_macro

    @property
    def method_per_class(self) -> np.ndarray:  # (S, K)
        return self.comparison.method_per_class

    @property
    def baseline_per_class(self) -> np.ndarray:  # (S, K)
        return self.comparison.baseline_per_class

    @property
    def delong(self) -> tuple[DeLongMacroResult, ...]:  # per seed, baseline -> method
        return self.comparison.delong

    @property
    def bootstrap(self) -> DeltaBootstrapResult:
        return self.comparison.bootstrap

    @property
    def per_class(self) -> tuple[ClassDelta, ...]:
        return self.comparison.per_class

    @property
    def sign_positive_seeds(self) -> str:
        return self.sign_positive

    def sd(self, values: np.ndarray) -> float | None:
        """Cross-seed sample sd (ddof=1); None for a single seed (no spread is measured:
        JSON null, "n/a" in tables, never 0)."""
        return float(np.std(values, ddof=1)) if len(values) > 1 else None

    def summary(self) -> DatasetSummary:
        return DatasetSummary(
            macro_auc_mean=float(self.method_macro.mean()), macro_auc_sd=self.sd(self.method_macro),
            delta=self.delta, sign_positive_seeds=self.sign_positive_seeds,
            n_test_frames=self.n_test_frames, source=RECOMPUTED,
            delta_ci=self.bootstrap.confidence_interval,
        )


@dataclass(frozen=True)
class HeadlineKvasir:
    """Kvasir macro-AUCs over every evaluable class on all test frames: the paper's headline
    (11 classes on the canonical split), which its GalKva reference entries divide by. The
    benchmark's leaderboard uses the v1.0 scoring set instead; both are shown."""

    classes: tuple[str, ...]
    baseline_macro: np.ndarray  # (S,)
    method_macro: np.ndarray    # (S,)

    @property
    def delta(self) -> float:
        return float((self.method_macro - self.baseline_macro).mean())


def headline_kvasir(runs: DatasetRuns) -> HeadlineKvasir:
    """:class:`HeadlineKvasir` of the Kvasir predictions (per seed, both arms)."""
    seeds, y, _, base, meth = _aligned(runs, "kvasir", list(range(len(CLASSES))))
    present = [c for c in range(len(CLASSES)) if 0 < int((y == c).sum()) < len(y)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        bm = np.array([per_class_auc(y, base[s], classes=present).mean() for s in range(len(seeds))])
        mm = np.array([per_class_auc(y, meth[s], classes=present).mean() for s in range(len(seeds))])
    return HeadlineKvasir(tuple(CLASSES[c] for c in present), bm, mm)


@dataclass(frozen=True)
class Recomputed:
    """Both datasets recomputed, and the retention with its bootstrap intervals."""

    benchmark_version: str
    kvasir: DatasetRecompute
    galar: DatasetRecompute
    retention: Retention  # its confidence_interval: the percentile one
    retention_bootstrap: RatioBootstrapResult  # percentile and BCa

    @property
    def retention_distribution(self) -> np.ndarray:
        """(B,) Delta_Galar* / Delta_Kvasir* over independent draws of the two datasets."""
        return self.retention_bootstrap.distribution
    #: Kvasir over the paper's headline classes (not the leaderboard's number; shown beside it)
    kvasir_headline: HeadlineKvasir | None = None

    def __getitem__(self, dataset: str) -> DatasetRecompute:
        return {"kvasir": self.kvasir, "galar": self.galar}[dataset]


# --------------------------------------------------------------------------- input
def _seed_run(seed_dir: Path, split: str) -> SeedRun:
    folder = seed_dir if (seed_dir / "schema.json").is_file() else seed_dir / "predictions"
    if not (folder / "schema.json").is_file():
        raise DataError(
            f"{seed_dir}: no predictions here (expected schema.json + {split}.parquet, or a "
            "predictions/ folder holding them: a run's `predictions` artifact)"
        )
    try:
        df = read_predictions(folder, split)
    except (OSError, PipiError) as exc:
        raise DataError(f"{folder}: cannot read {split} predictions ({exc})") from None
    run_id = None
    meta = seed_dir / "run.json"
    if meta.is_file():
        try:
            run_id = json.loads(meta.read_text()).get("run_id")
        except (json.JSONDecodeError, AttributeError):
            raise DataError(f"{meta}: expected a JSON object like {{\"run_id\": \"...\"}}") from None
    names = read_schema(folder).get("classes") or CLASSES
    if tuple(names) != CLASSES:
        who = f"{folder}" + (f" (run {run_id})" if run_id else "")
        raise DataError(f"{not_kvasir(who, ClassSet(tuple(names)))}; GalKva scores "
                        f"Kvasir-Capsule's 14 classes (Galar's labels are mapped onto them): "
                        f"{KVASIR_MAP_HINT}")
    return SeedRun(seed=seed_dir.name, predictions=df, run_id=run_id)


def load_prediction_dir(root: Path, *, split: str = "test") -> dict[str, DatasetRuns]:
    """Read ``DIR/{kvasir,galar}/{baseline,method}/<seed>/`` (see the module docstring)."""
    root = Path(root)
    out = {}
    for ds in DATASETS:
        arms = {}
        for arm in ARMS:
            folder = root / ds / arm
            seeds = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
            if not seeds:
                raise DataError(
                    f"{folder}: no seed folders. A predictions directory holds "
                    "{kvasir,galar}/{baseline,method}/<seed>/ with each run's predictions"
                )
            arms[arm] = tuple(_seed_run(p, split) for p in seeds)
        out[ds] = DatasetRuns(**arms)
    return out


def _aligned(runs: DatasetRuns, dataset: str, cls_idx: list[int]):
    """(seeds, y (N,), videos (N,), baseline (S, N, C), method (S, N, C)) on the scored frames."""
    b = {r.seed: r for r in runs.baseline}
    m = {r.seed: r for r in runs.method}
    if set(b) != set(m):
        raise DataError(
            f"{dataset}: seeds are paired by name; baseline has {sorted(b)}, method {sorted(m)}"
        )
    seeds = sorted(b)
    ref = b[seeds[0]].predictions
    missing = [c for c in ("path", "video_id", "label", *PROB_COLUMNS) if c not in ref.columns]
    if missing:
        raise DataError(f"{dataset}: predictions lack column(s) {missing} (pipi.predictions format)")
    ref = ref[ref["label"].isin(cls_idx)]
    keys = pd.Index(ref["path"].astype(str) + "\t" + ref["label"].astype(str))
    if keys.has_duplicates:
        raise DataError(f"{dataset}: seed {seeds[0]} lists a (frame, label) twice")
    if len(keys) == 0:
        raise DataError(f"{dataset}: no predicted frame has a label in the scoring set")

    def probs(run: SeedRun, arm: str) -> np.ndarray:
        df = run.predictions
        df = df[df["label"].isin(cls_idx)]
        k = pd.Index(df["path"].astype(str) + "\t" + df["label"].astype(str))
        if len(k) != len(keys) or not k.isin(keys).all() or k.has_duplicates:
            raise DataError(
                f"{dataset}: {arm} seed {run.seed} scores other frames than baseline seed "
                f"{seeds[0]}; paired seeds must be evaluated on the same test frames"
            )
        return df.set_axis(k).reindex(keys)[list(PROB_COLUMNS)].to_numpy(np.float64)

    base = np.stack([probs(b[s], "baseline") for s in seeds])  # (S, N, C)
    meth = np.stack([probs(m[s], "method") for s in seeds])
    return seeds, ref["label"].to_numpy(np.int64), ref["video_id"].astype(str).to_numpy(), base, meth


def recompute_dataset(
    dataset: str,
    runs: DatasetRuns,
    *,
    classes: tuple[str, ...],
    n_resamples: int,
    confidence_level: float,
    method: str,
    rng: np.random.Generator,
) -> DatasetRecompute:
    """One dataset's numbers from its paired predictions (:func:`pipi.stats.compare_arms`)."""
    all_idx = [class_index(c) for c in classes]
    seeds, y, videos, base, meth = _aligned(runs, dataset, all_idx)
    if not evaluable_classes(y, all_idx):
        raise DataError(f"{dataset}: no scoring-set class has both positive and negative frames")
    comp = compare_arms(y, videos, base, meth, classes=all_idx, tests=True,
                        n_resamples=n_resamples, confidence_level=confidence_level,
                        method=method, rng=rng)
    return DatasetRecompute(
        dataset=dataset, seeds=tuple(seeds),
        missing_classes=tuple(CLASSES[c] for c in all_idx if c not in comp.classes),
        comparison=comp,
        run_ids={"baseline": {r.seed: r.run_id for r in runs.baseline},
                 "method": {r.seed: r.run_id for r in runs.method}},
    )


def recompute(
    runs: Mapping[str, DatasetRuns],
    *,
    benchmark_version: str = BENCHMARK_VERSION,
    n_resamples: int = 2000,
    confidence_level: float = 0.95,
    method: str = "BCa",
    rng: np.random.Generator | int | None = 0,
) -> Recomputed:
    """Recompute every GalKva number of both datasets from paired per-frame predictions."""
    if benchmark_version not in SCORING_SETS:
        raise DataError(
            f"unknown benchmark version {benchmark_version!r}; known: {sorted(SCORING_SETS)}"
        )
    missing = [d for d in DATASETS if d not in runs]
    if missing:
        raise DataError(f"predictions of {missing} are missing; GalKva needs kvasir and galar")
    gen = np.random.default_rng(rng)
    streams = dict(zip(DATASETS, gen.spawn(len(DATASETS))))
    rec = {
        ds: recompute_dataset(ds, runs[ds], classes=SCORING_SETS[benchmark_version],
                              n_resamples=n_resamples, confidence_level=confidence_level,
                              method=method, rng=streams[ds])
        for ds in DATASETS
    }
    ratio = ratio_bootstrap(rec["galar"].bootstrap, rec["kvasir"].bootstrap,
                            confidence_level=confidence_level)
    ci = ratio.percentile_interval if ratio.n_finite >= 2 else None
    retention = classify_retention(
        rec["kvasir"].delta, rec["galar"].delta,
        delta_kvasir_ci=rec["kvasir"].bootstrap.confidence_interval, confidence_interval=ci,
    )
    return Recomputed(benchmark_version, rec["kvasir"], rec["galar"], retention, ratio,
                      headline_kvasir(runs["kvasir"]))


# --------------------------------------------------------------------------- comparison
def _differs(reported, computed: float, tol: float) -> bool:
    return not math.isclose(float(reported), computed, abs_tol=tol)


def compare_with_submission(
    submission: dict, rec: Recomputed, *, tolerance: float = 1e-3,
) -> list[Discrepancy]:
    """Self-reported numbers of ``submission`` that the predictions do not reproduce.

    AUCs, sds and deltas must agree within ``tolerance`` (default 0.001: numbers rounded to
    three decimals pass); counts and "k/n" strings exactly. Per-seed values are compared as
    sorted lists (seed order is not part of the format).
    """
    out: list[Discrepancy] = []

    def check(path: str, reported, computed, *, exact: bool = False) -> None:
        if reported is None:
            return
        if exact:
            if reported != computed:
                out.append(Discrepancy(path, reported, computed))
        elif _differs(reported, computed, tolerance):
            out.append(Discrepancy(path, reported, round(computed, 4)))

    n_seeds = submission.get("n_seeds")
    for ds in DATASETS:
        r = rec[ds]
        res = submission["results"][ds]
        p = f"$.results.{ds}"
        mac = res["macro_auc"]
        check(f"{p}.macro_auc.mean", mac["mean"], float(r.method_macro.mean()))
        if len(r.seeds) > 1:  # one seed has no sd to check (the schema makes it a number)
            sds = (r.sd(r.method_macro), float(np.std(r.method_macro)))
            if min(abs(mac["sd"] - s) for s in sds) > tolerance:
                out.append(Discrepancy(f"{p}.macro_auc.sd", mac["sd"], round(sds[0], 4)))
        seeds = mac.get("per_seed_values")
        if seeds is not None:
            if len(seeds) != len(r.seeds):
                out.append(Discrepancy(f"{p}.macro_auc.per_seed_values", f"{len(seeds)} values",
                                       f"{len(r.seeds)} seeds"))
            else:
                for i, (a, b) in enumerate(zip(sorted(seeds), sorted(r.method_macro.tolist()))):
                    check(f"{p}.macro_auc.per_seed_values[{i}] (sorted)", a, b)
        for j, c in enumerate(r.classes):
            entry = res["per_class_auc"].get(c)
            if entry is None:
                continue
            q = f'{p}.per_class_auc["{c}"]'
            check(f"{q}.mean", entry.get("mean"), float(r.method_per_class[:, j].mean()))
            if entry.get("sd") is not None and len(r.seeds) > 1:
                check(f"{q}.sd", entry["sd"], r.sd(r.method_per_class[:, j]))
            check(f"{q}.n_positive", entry.get("n_positive"), r.n_positive[c], exact=True)
        for c in r.missing_classes:
            if c in res["per_class_auc"]:
                out.append(Discrepancy(f'{p}.per_class_auc["{c}"]', "reported",
                                       "no positive frame in the predictions"))
        check(f"{p}.n_test_frames", res["n_test_frames"], r.n_test_frames, exact=True)
        check(f"{p}.delta_vs_rgb_baseline", res.get("delta_vs_rgb_baseline"), r.delta)
        check(f"{p}.sign_positive_seeds", res.get("sign_positive_seeds"), r.sign_positive_seeds,
              exact=True)
    if n_seeds is not None:
        check("$.n_seeds", n_seeds, len(rec.kvasir.seeds), exact=True)
    return out


def _details(rec: Recomputed) -> list[str]:
    lines = []
    for ds in DATASETS:
        r = rec[ds]
        lines.append(
            f"{ds}: {len(r.seeds)} seed pair(s), {r.n_videos} videos, RGB baseline macro-AUC "
            f"{r.baseline_macro.mean():.3f} ± {format_number(r.sd(r.baseline_macro))}; bootstrap over "
            f"{r.bootstrap.unit} ({r.bootstrap.n_resamples} resamples, "
            f"{r.bootstrap.method}), p = {r.bootstrap.pvalue:.3g}"
        )
        for s, d, dl in zip(r.seeds, r.deltas, r.delong):
            lines.append(f"  seed {s}: Δ {d:+.4f}  DeLong z {dl.statistic:+.2f}  p {dl.pvalue:.3g}"
                         "  (frames treated as independent)")
        per = ", ".join(f"{c} {r.method_per_class[:, j].mean():.3f} "
                        f"({r.method_per_class[:, j].mean() - r.baseline_per_class[:, j].mean():+.3f})"
                        for j, c in enumerate(r.classes))
        lines.append(f"  per-class AUC (Δ): {per}")
        if r.per_class:
            ps = ", ".join(f"{c} {cd.pvalues['stouffer']:.3g} ({cd.adjusted['stouffer_bonferroni']:.3g}"
                           f" / {cd.adjusted['stouffer_bh']:.3g})"
                           for c, cd in zip(r.classes, r.per_class, strict=True))
            lines.append(f"  per-class Stouffer p (Bonferroni / BH): {ps}")
        if r.missing_classes:
            lines.append(f"  not scored (no positive frame): {list(r.missing_classes)}")
    rb = rec.retention_bootstrap
    lines.append(f"retention {100 * rb.confidence_level:.0f}% CI: percentile "
                 f"[{rb.percentile_interval.low:+.2f}, {rb.percentile_interval.high:+.2f}], BCa "
                 f"[{rb.bca_interval.low:+.2f}, {rb.bca_interval.high:+.2f}] "
                 "(`--report` for every p-value and interval)")
    h = rec.kvasir_headline
    if h is not None:
        ret = classify_retention(h.delta, rec.galar.delta)
        lines += [
            f"Kvasir over the paper's headline ({len(h.classes)} evaluable classes, all test "
            f"frames): method {h.method_macro.mean():.3f}, RGB baseline "
            f"{h.baseline_macro.mean():.3f}, Δ {h.delta:+.4f}; Δ_Galar / this Δ = "
            + (f"{ret.value:+.2f}" if math.isfinite(ret.value) else "n/a") + f" -> {ret.label}",
            (f"  (the GalKva {rec.benchmark_version} leaderboard uses the retention above: both "
             "Δ over the scoring set; the paper's reference entries divide by the headline Δ)"),
        ]
    return lines


def score_predictions(
    runs_or_recomputed: Mapping[str, DatasetRuns] | Recomputed,
    *,
    submission=None,
    tolerance: float = 1e-3,
    method_name: str = "predictions",
    n_resamples: int = 2000,
    confidence_level: float = 0.95,
    rng: np.random.Generator | int | None = 0,
) -> SubmissionScore:
    """Score from predictions: every number recomputed; with ``submission`` (a dict or a
    JSON path, validated by the caller) its self-reported numbers are checked against them."""
    doc = None if submission is None else load_submission(submission)
    rec = runs_or_recomputed
    if not isinstance(rec, Recomputed):
        version = doc["benchmark_version"] if doc else BENCHMARK_VERSION
        rec = recompute(rec, benchmark_version=version, n_resamples=n_resamples,
                        confidence_level=confidence_level, rng=rng)
    disc = compare_with_submission(doc, rec, tolerance=tolerance) if doc else []
    return SubmissionScore(
        method=doc["method"]["name"] if doc else method_name,
        submitter=doc["submitter"]["name"] if doc else "n/a",
        affiliation=doc["submitter"]["affiliation"] if doc else "n/a",
        trained_on=doc["method"].get("trained_on", "n/a") if doc else "n/a",
        benchmark_version=rec.benchmark_version,
        kvasir=rec.kvasir.summary(), galar=rec.galar.summary(), retention=rec.retention,
        discrepancies=tuple(disc), details=tuple(_details(rec)),
        checks=tuple(str(w) for w in check_submission(doc, tolerance=tolerance,
                                                      scoring_sets=SCORING_SETS)) if doc else (),
    )
