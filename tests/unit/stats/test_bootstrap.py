"""Bootstrap CIs: hand-written BCa on the same resamples, scipy, strata, clusters, macro delta."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import special, stats

from pipi.errors import ConfigError, DataError
from pipi.stats import (
    DegenerateDataWarning,
    bootstrap_ci,
    macro_auc_delta_bootstrap,
    per_class_auc,
)


class _Recorder:
    """A statistic that records the rows it was given (data = (row ids, values))."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, rows, values):
        self.calls.append(np.array(rows))
        return self.fn(values)


def _hand_bca(x, fn, resamples, jack_rows, level):
    """BCa from Efron & Tibshirani (1993) eqs. 14.10-14.15, written out independently."""
    theta = fn(x)
    boot = np.array([fn(x[r]) for r in resamples])
    b = boot.size
    below = np.sum(boot < theta) + 0.5 * np.sum(boot == theta)
    z0 = stats.norm.ppf(below / b)
    jack = np.array([fn(x[r]) for r in jack_rows])
    dev = jack.mean() - jack
    a = np.sum(dev**3) / (6 * np.sum(dev**2) ** 1.5)
    lo_q, hi_q = stats.norm.ppf([(1 - level) / 2, (1 + level) / 2])
    a1 = stats.norm.cdf(z0 + (z0 + lo_q) / (1 - a * (z0 + lo_q)))
    a2 = stats.norm.cdf(z0 + (z0 + hi_q) / (1 - a * (z0 + hi_q)))
    return (
        boot,
        z0,
        a,
        np.quantile(boot, [a1, a2]),
        np.quantile(boot, [(1 - level) / 2, (1 + level) / 2]),
    )


def test_bca_equals_hand_formula_on_the_same_resamples():
    x = np.random.default_rng(0).lognormal(size=30)

    def fn(v):  # a skewed, biased statistic
        return float(np.std(v))

    rec = _Recorder(fn)
    res = bootstrap_ci((np.arange(x.size), x), rec, n_resamples=400, confidence_level=0.9, rng=3)
    resamples = rec.calls[1:401]
    jack_rows = rec.calls[401:]
    assert len(jack_rows) == x.size
    assert all(np.array_equal(r, np.delete(np.arange(30), i)) for i, r in enumerate(jack_rows))
    boot, z0, a, bca, pct = _hand_bca(x, fn, resamples, jack_rows, 0.9)
    np.testing.assert_allclose(res.bootstrap_distribution, boot, rtol=0, atol=0)
    assert res.bias_correction == pytest.approx(z0, rel=1e-12)
    assert res.acceleration == pytest.approx(a, rel=1e-12)
    assert res.bca_interval == pytest.approx(tuple(bca), rel=1e-12)
    assert res.percentile_interval == pytest.approx(tuple(pct), rel=1e-12)
    assert res.confidence_interval == res.bca_interval and res.method == "BCa"
    assert res.standard_error == pytest.approx(np.std(boot, ddof=1))
    assert res.statistic == pytest.approx(fn(x))
    assert abs(z0) > 0.05 and abs(a) > 0.005  # the corrections are really exercised


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_agrees_with_scipy_bootstrap_for_many_resamples(method):
    x = np.random.default_rng(1).exponential(size=40)
    ours = bootstrap_ci((x,), np.mean, n_resamples=20_000, method=method, rng=5)
    ref = stats.bootstrap(
        (x,), np.mean, n_resamples=20_000, method=method, rng=np.random.default_rng(6)
    ).confidence_interval
    # Monte Carlo error of an endpoint here is ~0.01; BCa and percentile differ by ~0.15
    assert ours.confidence_interval.low == pytest.approx(ref.low, abs=0.04)
    assert ours.confidence_interval.high == pytest.approx(ref.high, abs=0.04)
    other = ours.percentile_interval if method == "BCa" else ours.bca_interval
    assert abs(other.high - ref.high) > 0.1
    assert ours.method == method


def test_seeded_reproducibility():
    x = np.random.default_rng(2).normal(size=25)
    a = bootstrap_ci((x,), np.median, n_resamples=200, rng=11)
    b = bootstrap_ci((x,), np.median, n_resamples=200, rng=np.random.default_rng(11))
    c = bootstrap_ci((x,), np.median, n_resamples=200, rng=12)
    np.testing.assert_array_equal(a.bootstrap_distribution, b.bootstrap_distribution)
    assert a.confidence_interval == b.confidence_interval
    assert not np.array_equal(a.bootstrap_distribution, c.bootstrap_distribution)


def test_stratified_resampling_keeps_class_counts():
    y = np.repeat([0, 1, 2], [30, 5, 2])
    counts = []
    res = bootstrap_ci(
        (y,),
        lambda v: counts.append(np.bincount(v, minlength=3)) or v.mean(),
        n_resamples=100,
        unit="frames",
        strata=y,
        rng=0,
    )
    boot_counts = np.array(counts[1:101])
    assert (boot_counts == [30, 5, 2]).all()
    assert np.ptp(res.bootstrap_distribution) == 0  # the mean label cannot change
    # unstratified resamples do change the counts
    counts.clear()
    with pytest.warns(DegenerateDataWarning, match="BCa"):  # a constant statistic
        bootstrap_ci(
            (y,),
            lambda v: counts.append(np.bincount(v, minlength=3)) or 0.0,
            n_resamples=100,
            unit="frames",
            rng=0,
            method="percentile",
        )
    assert not (np.array(counts[1:101]) == [30, 5, 2]).all()


def test_video_clusters_are_resampled_whole():
    sizes = np.array([3, 8, 1, 5, 12, 4])
    video = np.repeat(np.arange(6) * 10 + 7, sizes)  # ids 7, 17, ...
    rng = np.random.default_rng(0)
    x = rng.normal(size=video.size) + np.repeat(rng.normal(size=6), sizes)
    rec = _Recorder(np.mean)
    res = bootstrap_ci((video, x), rec, n_resamples=300, unit="videos", clusters=video, rng=4)
    size_of = dict(zip(np.arange(6) * 10 + 7, sizes, strict=True))
    for rows in rec.calls[1:301]:
        ids, cnt = np.unique(rows, return_counts=True)
        copies = [c / size_of[i] for i, c in zip(ids, cnt, strict=True)]
        assert all(float(k).is_integer() for k in copies)  # whole videos only
        assert sum(copies) == 6  # as many videos as there are
    jack = rec.calls[301:]
    assert len(jack) == 6 and res.jackknife_values.size == 6
    for i, rows in enumerate(jack):  # leave one whole video out
        assert set(np.unique(rows)) == set(size_of) - {i * 10 + 7}
    assert res.unit == "videos"
    # clustering widens the interval of the mean compared to frame resampling
    flat = bootstrap_ci((x,), np.mean, n_resamples=300, rng=4)
    assert res.standard_error > flat.standard_error


def test_seed_unit_and_validation():
    deltas = np.array([0.01, -0.004, 0.02, 0.006, 0.013, 0.001])
    res = bootstrap_ci((deltas,), np.mean, unit="seeds", n_resamples=500, rng=0)
    assert res.jackknife_values.size == 6
    assert res.confidence_interval.low < deltas.mean() < res.confidence_interval.high
    with pytest.raises(ConfigError, match="clusters"):
        bootstrap_ci((deltas,), np.mean, unit="videos")
    with pytest.raises(ConfigError, match="strata"):
        bootstrap_ci((deltas,), np.mean, unit="seeds", strata=np.zeros(6))
    with pytest.raises(ConfigError, match="method"):
        bootstrap_ci((deltas,), np.mean, method="bca")
    with pytest.raises(ConfigError, match="sequence"):
        bootstrap_ci(deltas, np.mean)
    with pytest.raises(DataError, match="same first axis"):
        bootstrap_ci((deltas, deltas[:3]), lambda a, b: 0.0)


def test_nan_statistic_gives_nan_intervals_with_warning():
    x = np.arange(10.0)
    with pytest.warns(DegenerateDataWarning, match="NaN"):
        res = bootstrap_ci(
            (x,), lambda v: np.nan if v.min() > 0 else v.mean(), n_resamples=50, rng=0
        )
    assert np.isnan(res.confidence_interval.low) and np.isnan(res.bca_interval.high)


def test_constant_statistic_bca_undefined():
    with pytest.warns(DegenerateDataWarning, match="BCa"):
        res = bootstrap_ci((np.ones(8),), np.mean, n_resamples=50, rng=0)
    assert res.percentile_interval == (1.0, 1.0) and np.isnan(res.bca_interval.low)


# ---------------------------------------------------------------------------------------
# Macro-AUC delta bootstrap (fast weighted AUCs) vs the generic bootstrap


def _arms(seed=0, n=150, k=3, s=2):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    video = np.sort(rng.integers(0, 10, n))
    onehot = np.eye(k)[y]
    ref = np.round(rng.normal(size=(s, n, k)) + onehot, 1)  # ties
    new = np.round(ref + 0.5 * onehot + 0.5 * rng.normal(size=(s, n, k)), 1)
    return y, video, ref, new


def _generic_stat(s):
    def stat(y, ref, new):  # ref/new (N, S, K)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            d = [per_class_auc(y, new[:, i]) - per_class_auc(y, ref[:, i]) for i in range(s)]
        d = np.array(d)
        return float(np.nanmean(d)) if np.isfinite(d).any() else np.nan

    return stat


@pytest.mark.parametrize("unit", ["frames", "strata", "videos"])
def test_macro_delta_bootstrap_equals_generic_bootstrap(unit):
    y, video, ref, new = _arms()
    kw = {"videos": {"clusters": video}, "strata": {"strata": y}, "frames": {}}[unit]
    fast = macro_auc_delta_bootstrap(y, ref, new, n_resamples=60, rng=9, **kw)
    generic = bootstrap_ci(
        (y, ref.transpose(1, 0, 2), new.transpose(1, 0, 2)),
        _generic_stat(2),
        n_resamples=60,
        rng=9,
        unit="videos" if unit == "videos" else "frames",
        **({"clusters": video} if unit == "videos" else kw),
    )
    b = fast
    np.testing.assert_allclose(
        b.bootstrap_distribution, generic.bootstrap_distribution, rtol=0, atol=1e-12
    )
    np.testing.assert_allclose(b.jackknife_values, generic.jackknife_values, rtol=0, atol=1e-12)
    assert b.statistic == pytest.approx(generic.statistic, abs=1e-14)
    assert b.bca_interval == pytest.approx(generic.bca_interval, abs=1e-12)
    assert fast.statistic > 0 and fast.n_seeds == 2 and fast.classes == (0, 1, 2)
    below = np.sum(b.bootstrap_distribution <= 0) + 1
    above = np.sum(b.bootstrap_distribution >= 0) + 1
    assert fast.pvalue == pytest.approx(min(1, 2 * min(below, above) / 61))


def test_macro_delta_bootstrap_single_seed_and_class_subset():
    y, video, ref, new = _arms(seed=1, s=1)
    res = macro_auc_delta_bootstrap(
        y, ref[0], new[0], classes=[1], n_resamples=50, rng=0, method="percentile"
    )
    expected = per_class_auc(y, new[0], classes=[1]) - per_class_auc(y, ref[0], classes=[1])
    assert res.statistic == pytest.approx(expected[0])
    assert res.confidence_interval == res.percentile_interval
    with pytest.raises(ConfigError, match="not both"):
        macro_auc_delta_bootstrap(y, ref, new, clusters=video, strata=y)
    with pytest.raises(DataError, match="same shape"):
        macro_auc_delta_bootstrap(y, ref, new[:, :, :2])


def test_macro_delta_bootstrap_paper_scale_is_fast():
    """6 seeds x 6,423 frames x 14 classes, 200 video resamples, in a few seconds."""
    import time

    rng = np.random.default_rng(0)
    n, k, s = 6423, 14, 6
    y = rng.integers(0, k, n)
    video = np.sort(rng.integers(0, 40, n))
    ref = rng.random((s, n, k)).astype(np.float32)
    new = ref + 0.05 * np.eye(k, dtype=np.float32)[y]
    t0 = time.perf_counter()
    res = macro_auc_delta_bootstrap(y, ref, new, clusters=video, n_resamples=200, rng=0)
    assert time.perf_counter() - t0 < 30  # ~3 s alone; generous for shared CPUs
    assert res.confidence_interval.low > 0
    with pytest.raises(DataError):
        macro_auc_delta_bootstrap(y, ref, new, clusters=video[:10])


def test_bca_constants_sign():
    """z0 > 0 when most resamples fall below the estimate (Efron & Tibshirani 14.14)."""
    from pipi.stats import bca_constants

    z0, a = bca_constants(1.0, np.array([0.0, 0.5, 0.9, 1.5]), np.array([1.0, 2.0, 3.0]))
    assert z0 == pytest.approx(special.ndtri(0.75)) and a == 0.0
