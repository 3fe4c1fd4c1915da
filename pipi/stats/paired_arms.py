"""Two arms scored by the same seeds on the same test frames, and the ratio of two datasets.

One engine for ``aggregate``'s cross-vendor retention table and the GalKva-2026 evaluator:

* :func:`compare_arms`: per-seed per-class and macro AUCs of a baseline and a method arm
  (seed s of one paired with seed s of the other), the video bootstrap of the cross-seed
  mean macro delta (:func:`pipi.stats.macro_auc_delta_bootstrap`, percentile and BCa) and,
  with ``tests=True``, per class: the paired DeLong test of every seed, its cross-seed
  combinations (:data:`PVALUE_KINDS`), a video bootstrap of the class's mean delta
  (:class:`pipi.stats.PairedAUCBootstrap`, percentile and BCa) and Bonferroni and
  Benjamini-Hochberg adjustments over the classes of the comparison (one family);
* :func:`ratio_bootstrap`: the ratio of two independently bootstrapped statistics (the
  retention Delta_Galar / Delta_Kvasir), its percentile and two-sample BCa intervals.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pipi.errors import DataError
from pipi.stats._common import as_rng, check_level
from pipi.stats._results import (
    NAN_CI,
    BootstrapResult,
    ConfidenceInterval,
    DegenerateDataWarning,
    DeLongMacroResult,
    DeltaBootstrapResult,
    SignFlipResult,
    StoufferResult,
)
from pipi.stats.auc import per_class_auc
from pipi.stats.bootstrap import bootstrap_intervals
from pipi.stats.combine import stouffer_combine
from pipi.stats.delong import delong_macro_test
from pipi.stats.delta_bootstrap import PairedAUCBootstrap, macro_auc_delta_bootstrap
from pipi.stats.multiple import ADJUST_METHODS, adjust_pvalues
from pipi.stats.permutation import sign_flip_test

__all__ = ["PVALUE_KINDS", "ArmComparison", "ClassDelta", "PairedDeltas",
           "RatioBootstrapResult", "compare_arms", "evaluable_classes", "ratio_bootstrap"]

#: Cross-seed p-values of a per-class (or macro) delta: key -> label. The first is the
#: paper's; the others do not assume that seeds scored on the same frames are independent.
PVALUE_KINDS = {
    "stouffer": "paired DeLong z per seed, Stouffer-combined (the paper; assumes independent "
                "seeds, anti-conservative when they share the test frames)",
    "sign_flip": "sign-flip permutation test of the per-seed deltas (as aggregate)",
    "bootstrap": "video bootstrap of the cross-seed mean delta (one resample of the test "
                 "videos applied to every seed)",
}


class SeedDeltas:
    """The cross-seed summary of per-seed deltas (``deltas``, one value per seed, is given by
    the class that mixes this in)."""

    deltas: np.ndarray

    @property
    def delta(self) -> float:
        return float(self.deltas.mean())

    @property
    def sign_positive(self) -> str:
        """``"<positive seeds>/<seeds>"``."""
        return f"{int((self.deltas > 0).sum())}/{len(self.deltas)}"


class PairedDeltas(SeedDeltas):
    """Seed-paired macro-AUC deltas of a method over its baseline (``method_macro`` and
    ``baseline_macro``, one value per seed, are fields of the class that mixes this in)."""

    method_macro: np.ndarray
    baseline_macro: np.ndarray

    @property
    def deltas(self) -> np.ndarray:
        return self.method_macro - self.baseline_macro


@dataclass(frozen=True)
class ClassDelta(SeedDeltas):
    """One class's paired delta (method - baseline) across seeds and its tests.

    ``pvalues`` maps each key of :data:`PVALUE_KINDS` to its raw p-value; ``adjusted`` maps
    ``"<kind>_<method>"`` (method: ``bonferroni`` or ``bh``) to the p-value adjusted over
    the classes of the comparison.
    """

    cls: int                              # class index (column of the probabilities)
    deltas: np.ndarray                    # (S,) per-seed AUC delta
    delong_statistic: np.ndarray          # (S,) per-seed paired DeLong z
    delong_pvalue: np.ndarray             # (S,) its two-sided p (frames independent)
    stouffer: StoufferResult
    sign_flip: SignFlipResult
    bootstrap: DeltaBootstrapResult       # percentile and BCa intervals, bootstrap p
    pvalues: dict[str, float]
    adjusted: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ArmComparison(PairedDeltas):
    """A method arm against its baseline on one dataset; arrays are (S,) or (S, K).

    ``per_class``, ``delong``, ``stouffer`` and ``sign_flip`` are empty / None unless
    :func:`compare_arms` ran with ``tests=True``.
    """

    classes: tuple[int, ...]              # evaluable classes (positives and negatives)
    n_frames: int
    n_videos: int
    n_positive: dict[int, int]
    baseline_per_class: np.ndarray        # (S, K)
    method_per_class: np.ndarray          # (S, K)
    baseline_macro: np.ndarray            # (S,)
    method_macro: np.ndarray              # (S,)
    bootstrap: DeltaBootstrapResult       # of the cross-seed mean macro delta
    delong: tuple[DeLongMacroResult, ...] = ()   # per seed, baseline -> method
    stouffer: StoufferResult | None = None       # of the per-seed macro DeLong z
    sign_flip: SignFlipResult | None = None      # of the per-seed macro deltas
    per_class: tuple[ClassDelta, ...] = ()

    @property
    def distribution(self) -> np.ndarray:
        """(B,) bootstrap values of the mean macro delta."""
        return self.bootstrap.bootstrap_distribution

    @property
    def pvalues(self) -> dict[str, float]:
        """The macro delta's cross-seed p-values (keys of :data:`PVALUE_KINDS`)."""
        nan = float("nan")
        return {"stouffer": self.stouffer.pvalue if self.stouffer else nan,
                "sign_flip": self.sign_flip.pvalue if self.sign_flip else nan,
                "bootstrap": self.bootstrap.pvalue}


def evaluable_classes(y: np.ndarray, classes: Sequence[int]) -> list[int]:
    """The classes of ``classes`` with both positive and negative frames in ``y``."""
    y = np.asarray(y)
    return [int(c) for c in classes if 0 < int((y == c).sum()) < y.size]


def _class_tests(y, videos, base, meth, present, deltas, delong, *, n_resamples, level,
                 n_permutations, rng) -> tuple[ClassDelta, ...]:
    """Per-class tests of one comparison, adjusted over its classes (one family)."""
    s = base.shape[0]
    z = np.full((s, len(present)), np.nan)
    p = np.full((s, len(present)), np.nan)
    for i, res in enumerate(delong):
        col = {c: j for j, c in enumerate(res.classes)}
        for j, c in enumerate(present):
            if c in col:
                z[i, j], p[i, j] = res.per_class_statistic[col[c]], res.per_class_pvalue[col[c]]
    cols = {("baseline", i): base[i] for i in range(s)} | {("method", i): meth[i] for i in range(s)}
    boot = PairedAUCBootstrap(y, videos, cols, present, resample="video",
                              n_resamples=n_resamples, confidence_level=level,
                              rng=int(rng.integers(2**63)))
    ref, new = [("baseline", i) for i in range(s)], [("method", i) for i in range(s)]
    perm_seed = int(rng.integers(2**63))
    out = []
    for j, c in enumerate(present):
        d = deltas[:, j]
        st = stouffer_combine(z[:, j])
        sf = sign_flip_test(d, n_resamples=n_permutations, rng=perm_seed)
        bt = boot.delta(ref, new, classes=[c])
        out.append(ClassDelta(c, d, z[:, j], p[:, j], st, sf, bt,
                              {"stouffer": st.pvalue, "sign_flip": sf.pvalue,
                               "bootstrap": bt.pvalue}))
    adjusted: list[dict[str, float]] = [{} for _ in out]
    for kind in PVALUE_KINDS:
        raw = np.array([cd.pvalues[kind] for cd in out], dtype=float)
        for method in ADJUST_METHODS:
            adj = adjust_pvalues(raw, method=method)
            for a, v in zip(adjusted, adj, strict=True):
                a[f"{kind}_{method}"] = float(v)
    return tuple(replace(cd, adjusted=a) for cd, a in zip(out, adjusted, strict=True))


def compare_arms(
    y_labels,
    videos,
    probs_baseline,
    probs_method,
    *,
    classes: Sequence[int],
    tests: bool = False,
    n_resamples: int = 2000,
    confidence_level: float = 0.95,
    method: str = "BCa",
    n_permutations: int = 10_000,
    rng: np.random.Generator | int | None = None,
) -> ArmComparison:
    """Paired comparison of a method arm with its baseline, seed by seed, on one dataset.

    Parameters
    ----------
    y_labels : array_like of int, shape (N,)
        Class index of every test frame (shared by every seed and arm).
    videos : array_like, shape (N,)
        Video id of every frame: the bootstrap resamples whole videos (with fewer than two
        videos, frames stratified by class).
    probs_baseline, probs_method : array_like, shape (S, N, C)
        Class probabilities of each seed of the two arms; seed s is paired with seed s.
    classes : sequence of int
        The class set of the macro-AUC; classes without positive or negative frames are
        left out (:func:`evaluable_classes`).
    tests : bool, optional
        Also the per-seed paired DeLong tests, their cross-seed combinations and the
        per-class bootstrap intervals, with Bonferroni and BH adjustments over the classes.
    n_resamples, confidence_level, method, rng
        As in :func:`pipi.stats.macro_auc_delta_bootstrap` (the macro bootstrap draws from
        ``rng`` first, so its numbers do not depend on ``tests``).
    n_permutations : int, optional
        Sign-flip patterns (exact when 2**S is smaller).

    Returns
    -------
    ArmComparison

    Raises
    ------
    DataError
        No class of ``classes`` has both positive and negative frames.

    References
    ----------
    .. [1] E. R. DeLong, D. M. DeLong and D. L. Clarke-Pearson, Biometrics 44(3):837-845, 1988.
    .. [2] S. A. Stouffer et al., "The American Soldier, Vol. 1", 1949.
    .. [3] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 14.
    .. [4] Y. Benjamini and Y. Hochberg, JRSS B 57(1):289-300, 1995.

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import compare_arms
    >>> rng = np.random.default_rng(0)
    >>> y, video = rng.integers(0, 3, 240), np.repeat(np.arange(12), 20)
    >>> base = rng.normal(size=(2, 240, 3)) + np.eye(3)[y]
    >>> res = compare_arms(y, video, base, base + 0.8 * np.eye(3)[y], classes=[0, 1, 2],
    ...                    tests=True, n_resamples=200, rng=0)
    >>> res.sign_positive, len(res.per_class), sorted(res.per_class[0].adjusted)[:2]
    ('2/2', 3, ['bootstrap_bh', 'bootstrap_bonferroni'])
    """
    y = np.asarray(y_labels)
    vids = np.asarray(videos)
    base = np.asarray(probs_baseline, dtype=np.float64)
    meth = np.asarray(probs_method, dtype=np.float64)
    if base.ndim != 3 or base.shape != meth.shape or base.shape[1] != y.shape[0] \
            or vids.shape != y.shape:
        raise DataError(f"expected labels (N,), videos (N,) and two (S, N, C) probability arrays; "
                        f"got {y.shape}, {vids.shape}, {base.shape}, {meth.shape}")
    level = check_level(confidence_level)
    present = evaluable_classes(y, classes)
    if not present:
        raise DataError("no class of the comparison has both positive and negative frames")
    gen = as_rng(rng)
    s = base.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        bpc = np.stack([per_class_auc(y, base[i], classes=present) for i in range(s)])
        mpc = np.stack([per_class_auc(y, meth[i], classes=present) for i in range(s)])
        n_videos = len(set(vids.tolist()))
        clustered = n_videos >= 2
        boot = macro_auc_delta_bootstrap(
            y, base, meth, classes=present, clusters=vids if clustered else None,
            strata=None if clustered else y, n_resamples=n_resamples,
            confidence_level=level, method=method, rng=gen)
        extra = {}
        if tests:
            delong = tuple(delong_macro_test(y, base[i], meth[i], classes=present)
                           for i in range(s))
            macro_z = np.array([d.statistic for d in delong])
            extra = {
                "delong": delong,
                "stouffer": stouffer_combine(macro_z),
                "sign_flip": sign_flip_test(mpc.mean(axis=1) - bpc.mean(axis=1),
                                            n_resamples=n_permutations,
                                            rng=int(gen.integers(2**63))),
                "per_class": _class_tests(y, vids, base, meth, present, mpc - bpc, delong,
                                          n_resamples=n_resamples, level=level,
                                          n_permutations=n_permutations, rng=gen),
            }
    return ArmComparison(
        classes=tuple(present), n_frames=int(y.size), n_videos=n_videos,
        n_positive={c: int((y == c).sum()) for c in present},
        baseline_per_class=bpc, method_per_class=mpc,
        baseline_macro=bpc.mean(axis=1), method_macro=mpc.mean(axis=1), bootstrap=boot, **extra)


# --------------------------------------------------------------------------- the ratio
@dataclass(frozen=True)
class RatioBootstrapResult:
    """Bootstrap of numerator / denominator, each bootstrapped independently.

    ``distribution`` holds every draw's ratio (inf/NaN where the denominator's draw is 0);
    the intervals use its ``n_finite`` finite values.
    """

    statistic: float
    percentile_interval: ConfidenceInterval
    bca_interval: ConfidenceInterval
    bias_correction: float                # z0
    acceleration: float                   # a (two-sample jackknife)
    distribution: np.ndarray              # (B,)
    n_finite: int
    confidence_level: float


def ratio_bootstrap(numerator: BootstrapResult, denominator: BootstrapResult, *,
                    confidence_level: float = 0.95) -> RatioBootstrapResult:
    """Percentile and BCa intervals of theta_num / theta_den from two independent bootstraps.

    Draw b of the ratio is ``num*_b / den*_b``: the two bootstraps resample different data
    (e.g. the Galar and the Kvasir test videos) independently, so pairing their draws by
    index is a draw of the two-sample bootstrap. The BCa acceleration pools the two
    samples' jackknife influence values (leave one numerator unit out with the denominator
    whole, and the reverse; Efron & Tibshirani 1993, sec. 14.3), as
    ``scipy.stats.bootstrap`` does for several samples.

    Parameters
    ----------
    numerator, denominator : BootstrapResult
        E.g. the ``bootstrap`` of :func:`pipi.stats.macro_auc_delta_bootstrap` of each
        dataset; the same number of resamples.
    confidence_level : float, optional

    Returns
    -------
    RatioBootstrapResult
        NaN intervals where fewer than two draws are finite; a NaN BCa interval where the
        BCa constants are undefined.

    Examples
    --------
    >>> import numpy as np
    >>> from pipi.stats import bootstrap_ci, ratio_bootstrap
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(2.0, 1.0, 40), rng.normal(1.0, 1.0, 40)
    >>> den = bootstrap_ci((x,), np.mean, n_resamples=999, rng=1)
    >>> num = bootstrap_ci((y,), np.mean, n_resamples=999, rng=2)
    >>> res = ratio_bootstrap(num, den)
    >>> bool(res.bca_interval.low < y.mean() / x.mean() < res.bca_interval.high)
    True
    """
    level = check_level(confidence_level)
    num_star = np.asarray(numerator.bootstrap_distribution, dtype=float)
    den_star = np.asarray(denominator.bootstrap_distribution, dtype=float)
    if num_star.shape != den_star.shape:
        raise DataError(f"the two bootstraps have {num_star.size} and {den_star.size} "
                        "resamples; draw the same number")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = num_star / den_star
        hat = numerator.statistic / denominator.statistic if denominator.statistic else math.nan
        jack = (numerator.jackknife_values / denominator.statistic,
                numerator.statistic / denominator.jackknife_values)
    finite = ratio[np.isfinite(ratio)]
    if finite.size < 2 or not math.isfinite(hat):
        return RatioBootstrapResult(float(hat), NAN_CI, NAN_CI, math.nan, math.nan, ratio,
                                    int(finite.size), level)
    alpha = (1.0 - level) / 2.0
    pct = ConfidenceInterval(*map(float, np.percentile(finite, [100 * alpha, 100 * (1 - alpha)])))
    _, bca, z0, a = bootstrap_intervals(hat, finite, jack, level, warn=False)
    return RatioBootstrapResult(float(hat), pct, bca, z0, a, ratio, int(finite.size), level)
