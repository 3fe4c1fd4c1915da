"""Paired comparisons of arms, paired by seed on the same test frames.

Statistics (``pipi.stats``; sign convention delta = new - reference, z > 0 when the new
arm is better):

* per seed: paired DeLong test of the macro-AUC over the headline classes
  (:func:`pipi.stats.delong_macro_test`), per-class DeLong z, McNemar at the argmax;
* across seeds: Stouffer's combination of the per-seed z (the paper's method; it
  **assumes independent seeds**, which seeds sharing one test set are not), beside it the
  published code's macro z (per-class z combined over seeds, then over classes:
  :func:`pipi.stats.stouffer_over_classes`, which also treats classes as independent), the exact
  sign-flip permutation test of the per-seed deltas, Wilcoxon signed-rank, and a
  bootstrap of the cross-seed mean delta (one resample of the test videos, or frames,
  applied to every seed and arm, over a fixed class set) with percentile and BCa intervals
  (:class:`pipi.stats.PairedAUCBootstrap`), and the paper's interval: BCa over the per-seed
  deltas, resampling seeds with the test set fixed (:func:`pipi.stats.seed_delta_bca`; flagged
  unstable where six seeds cannot carry it);
* Bonferroni and Benjamini-Hochberg adjustment once per declared family of comparisons.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from pipi.analysis.evidence import Evidence
from pipi.analysis.options import AggregateOptions
from pipi.analysis.tidy import tidy_metrics
from pipi.stats import (
    DegenerateDataWarning,
    DeltaBootstrapResult,
    Family,
    PairedAUCBootstrap,
    SeedBCaResult,
    adjust_families,
    delong_macro_test,
    mcnemar_test,
    paired_wilcoxon,
    seed_delta_bca,
    sign_flip_test,
    stouffer_combine,
    stouffer_over_classes,
)

__all__ = ["ADJUSTED_TESTS", "Analysis", "Comparison", "adjust_comparisons", "collect_warnings",
           "compare_cells", "compare_pairs", "missing_notes", "seeds_text"]


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of two arms (new - reference) over their common seeds."""

    backbone: str
    reference: str
    new: str
    seeds: tuple[int, ...]                 # paired seeds
    notes: tuple[str, ...]                 # missing arm / seeds
    ref_runs: Mapping[int, str]
    new_runs: Mapping[int, str]
    ref_macro: np.ndarray                  # (S,)
    new_macro: np.ndarray                  # (S,)
    delong_z: np.ndarray                   # (S,) paired DeLong z of the macro-AUC per seed
    delong_p: np.ndarray                   # (S,)
    per_class_z: np.ndarray                # (S, K) per-class paired DeLong z per seed
    mcnemar_p: np.ndarray                  # (S,) McNemar at the argmax per seed
    accuracy_delta: np.ndarray             # (S,)
    stouffer_z: float = float("nan")
    stouffer_p: float = float("nan")
    class_stouffer_z: float = float("nan")  # the published code's macro z (over classes)
    class_stouffer_p: float = float("nan")
    sign_flip_p: float = float("nan")
    sign_flip_exact: bool = False
    wilcoxon_p: float = float("nan")
    bootstrap: DeltaBootstrapResult | None = None  # resamples test videos (or frames)
    seed_bca: SeedBCaResult | None = None  # resamples seeds (the paper's intervals)
    family: str = ""
    adjusted: Mapping[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.reference} vs {self.new}"

    @property
    def available(self) -> bool:
        return len(self.seeds) > 0

    @property
    def deltas(self) -> np.ndarray:
        return self.new_macro - self.ref_macro

    @property
    def mean_delta(self) -> float:
        return float(self.deltas.mean()) if self.available else float("nan")

    @property
    def n_positive(self) -> int:
        return int((self.deltas > 0).sum())

    @property
    def sign_text(self) -> str:
        return f"{self.n_positive}/{len(self.seeds)}" if self.available else "n/a"

    def run_ids(self) -> dict[str, dict[int, str]]:
        return {self.reference: dict(self.ref_runs), self.new: dict(self.new_runs)}


@contextlib.contextmanager
def collect_warnings(notes: list[str]) -> Iterator[None]:
    """Turn the statistics' DegenerateDataWarnings into table notes (once each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if not issubclass(w.category, DegenerateDataWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        msg = f"warning: {w.message}"
        if msg not in notes:
            notes.append(msg)


class Analysis:
    """Evidence plus options, the shared video bootstrap and a cache of per-seed DeLong tests.

    ``headline`` is the options' headline backbone, or the backbone with most runs when that
    one has none.
    """

    def __init__(self, evidence: Evidence, options: AggregateOptions | None = None):
        options = options or AggregateOptions()
        self.evidence = evidence
        self.options = options
        backbones = evidence.backbones()
        if options.headline_backbone in backbones:
            self.headline = options.headline_backbone
        else:
            counts = evidence.runs["backbone"].value_counts()
            self.headline = str(counts.index[0])
        self._bootstrap: PairedAUCBootstrap | None = None
        self._delong: dict = {}
        self._tidy: pd.DataFrame | None = None

    @property
    def bootstrap(self) -> PairedAUCBootstrap:
        """The paired bootstrap of every (backbone, cell, seed) column, built once."""
        if self._bootstrap is None:
            o, ev = self.options, self.evidence
            columns = {(a.backbone, a.cell, s): a.probs[i] for a in ev.arms.values()
                       for i, s in enumerate(a.seeds)}
            self._bootstrap = PairedAUCBootstrap(
                ev.labels, ev.videos, columns, ev.classes, resample=o.resample,
                n_resamples=o.n_resamples, confidence_level=o.confidence_level, rng=o.seed)
        return self._bootstrap

    def delta_ci(self, backbone: str, reference: str, new: str, seeds: Sequence[int], *,
                 classes: Sequence[int] | None = None) -> DeltaBootstrapResult:
        """Bootstrap CI of the mean over ``seeds`` (and classes) of AUC(new) - AUC(ref)."""
        return self.bootstrap.delta([(backbone, reference, s) for s in seeds],
                                    [(backbone, new, s) for s in seeds], classes=classes)

    def retention_ci(self, backbone: str, reference: str, numerator: str, denominator: str,
                     seeds: Sequence[int]) -> DeltaBootstrapResult:
        """Bootstrap CI (shared draws) of mean(num - ref) / mean(den - ref) over ``seeds``."""
        return self.bootstrap.ratio([(backbone, reference, s) for s in seeds],
                                    [(backbone, numerator, s) for s in seeds],
                                    [(backbone, denominator, s) for s in seeds])

    def seed_bca(self, deltas) -> SeedBCaResult | None:
        """The seed-level BCa interval of per-seed paired deltas under the options, or None
        where it is undefined (fewer than 2 seeds, a non-finite delta)."""
        d = np.asarray(deltas, dtype=float)
        if d.size < 2 or not np.isfinite(d).all():
            return None
        o = self.options
        return seed_delta_bca(d, n_resamples=o.n_resamples, confidence_level=o.confidence_level,
                              rng=o.seed)

    @property
    def bootstrap_unit(self) -> str:
        """What the bootstrap resamples: "videos" (with the class-stratified frame fallback
        of :mod:`pipi.stats.delta_bootstrap`) or "frames"."""
        return "videos" if self.options.resample == "video" else "frames"

    @property
    def tidy(self) -> pd.DataFrame:
        if self._tidy is None:
            self._tidy = tidy_metrics(self.evidence, ece_bins=self.options.ece_bins)
        return self._tidy

    def delong(self, backbone: str, reference: str, new: str, seed: int):
        key = (backbone, reference, new, seed)
        if key not in self._delong:
            ev = self.evidence
            ra, na = ev.arm(backbone, reference), ev.arm(backbone, new)
            self._delong[key] = delong_macro_test(
                ev.labels, ra.probs[ra.index(seed)].astype(np.float64),
                na.probs[na.index(seed)].astype(np.float64), classes=ev.classes,
                confidence_level=self.options.confidence_level)
        return self._delong[key]


def seeds_text(seeds: Sequence[int]) -> str:
    return ",".join(str(s) for s in seeds) if len(seeds) else "-"


def missing_notes(ev: Evidence, backbone: str, cells: Sequence[str]) -> list[str]:
    """'cell X: no runs' / 'cell X: missing seeds [..]' against the backbone's seed universe."""
    universe = ev.seed_universe(backbone)
    notes = []
    for c in cells:
        arm = ev.arm(backbone, c)
        if arm is None:
            notes.append(f"{c} ({backbone}): no runs")
        elif set(universe) - set(arm.seeds):
            notes.append(f"{c} ({backbone}): missing seeds "
                         f"{sorted(set(universe) - set(arm.seeds))} (present in other arms)")
    return notes


def _compare(an: Analysis, backbone: str, reference: str, new: str) -> Comparison:
    ev, o = an.evidence, an.options
    ra, na = ev.arm(backbone, reference), ev.arm(backbone, new)
    k = len(ev.classes)
    empty = np.zeros(0)
    if ra is None or na is None:
        missing = [c for c, a in ((reference, ra), (new, na)) if a is None]
        return Comparison(backbone, reference, new, (), tuple(f"{c} ({backbone}): no runs"
                                                             for c in missing),
                          {}, {}, empty, empty, empty, empty, np.zeros((0, k)), empty, empty)
    seeds = tuple(sorted(set(ra.seeds) & set(na.seeds)))
    notes = []
    for arm, other in ((ra, na), (na, ra)):
        lack = sorted(set(other.seeds) - set(arm.seeds))
        if lack:
            notes.append(f"{arm.cell} ({backbone}): no run for seeds {lack}; those seeds of "
                         f"{other.cell} are unpaired and left out of this comparison")
    if not seeds:
        notes.append(f"{reference} and {new} share no seed")
        return Comparison(backbone, reference, new, (), tuple(notes), ra.runs(), na.runs(),
                          empty, empty, empty, empty, np.zeros((0, k)), empty, empty)
    ri = [ra.index(s) for s in seeds]
    ni = [na.index(s) for s in seeds]
    dl = [an.delong(backbone, reference, new, s) for s in seeds]
    mc = [mcnemar_test(ev.labels, ra.probs[i], na.probs[j]) for i, j in zip(ri, ni, strict=True)]
    c = Comparison(
        backbone, reference, new, seeds, tuple(notes),
        {s: ra.run_ids[i] for s, i in zip(seeds, ri, strict=True)},
        {s: na.run_ids[j] for s, j in zip(seeds, ni, strict=True)},
        ra.macro[ri], na.macro[ni],
        np.array([d.statistic for d in dl]), np.array([d.pvalue for d in dl]),
        np.stack([d.per_class_statistic for d in dl]),
        np.array([m.pvalue for m in mc]), np.array([m.delta for m in mc]))
    z = c.delong_z
    st = stouffer_combine(z) if np.isfinite(z).all() else None
    cs = stouffer_over_classes(c.per_class_z)
    sf = sign_flip_test(c.deltas, n_resamples=o.n_permutations, rng=o.seed)
    wx = paired_wilcoxon(c.ref_macro, c.new_macro) if len(seeds) >= 2 else None
    boot = an.delta_ci(backbone, reference, new, seeds)
    sb = an.seed_bca(c.deltas)
    return replace(c, stouffer_z=st.statistic if st else float("nan"),
                   stouffer_p=st.pvalue if st else float("nan"),
                   class_stouffer_z=cs.statistic, class_stouffer_p=cs.pvalue,
                   sign_flip_p=sf.pvalue,
                   sign_flip_exact=sf.exact, wilcoxon_p=wx.pvalue if wx else float("nan"),
                   bootstrap=boot, seed_bca=sb)


#: p-values adjusted within each family, and the names of the adjusted entries.
ADJUSTED_TESTS = ("stouffer", "sign_flip", "wilcoxon", "bootstrap")


def compare_pairs(an: Analysis, pairs: Sequence[tuple[str, str]], *, family: str,
                  backbone: str | None = None, notes: list[str] | None = None
                  ) -> list[Comparison]:
    """Paired comparisons of (reference, new) arms, adjusted once as one family.

    Each comparison pairs the arms by seed and gets the per-seed DeLong macro z and p,
    Stouffer's combination (assumes independent seeds), the exact sign-flip p, Wilcoxon's p,
    the video-clustered bootstrap (percentile and BCa) and McNemar per seed. The raw
    p-values of each kind (``ADJUSTED_TESTS``) are then adjusted by Bonferroni and BH over
    the comparisons of this family that could be tested: ``adjusted["<test>_bonferroni"]``
    and ``adjusted["<test>_bh"]``. A pair whose arm is missing is returned with no seeds.
    """
    backbone = backbone or an.headline
    notes = notes if notes is not None else []
    with collect_warnings(notes):
        comps = [_compare(an, backbone, r, n) for r, n in pairs]
    return adjust_comparisons(comps, family=family)


def compare_cells(an: Analysis, *, baseline: str, cells: Sequence[str], family: str,
                  backbone: str | None = None, notes: list[str] | None = None
                  ) -> list[Comparison]:
    """Every cell of ``cells`` against ``baseline`` (delta = cell - baseline), one family."""
    return compare_pairs(an, [(baseline, c) for c in cells if c != baseline], family=family,
                         backbone=backbone, notes=notes)


def adjust_comparisons(comps: Sequence[Comparison], *, family: str) -> list[Comparison]:
    """Bonferroni and BH over the family, per kind of p-value (NaN stays NaN)."""
    labels = [f"{c.backbone}:{c.label}" for c in comps]
    raw = {"stouffer": [c.stouffer_p for c in comps],
           "sign_flip": [c.sign_flip_p for c in comps],
           "wilcoxon": [c.wilcoxon_p for c in comps],
           "bootstrap": [c.bootstrap.pvalue if c.bootstrap else float("nan") for c in comps]}
    adjusted: list[dict[str, float]] = [{} for _ in comps]
    for test, ps in raw.items():
        if not comps or np.isnan(np.asarray(ps, float)).all():
            continue
        fam = Family(f"{family}/{test}", dict(zip(labels, ps, strict=True)))
        for method in ("bonferroni", "bh"):
            res = adjust_families([fam], method=method)[fam.name]
            for i, p in enumerate(res.adjusted):
                adjusted[i][f"{test}_{method}"] = float(p)
    return [replace(c, family=family, adjusted=a) for c, a in zip(comps, adjusted, strict=True)]
