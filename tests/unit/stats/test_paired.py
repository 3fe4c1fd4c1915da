"""Cross-seed and paired tests: sign-flip, Stouffer, Wilcoxon, McNemar."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from scipy import stats

from pipi.errors import DataError
from pipi.stats import (
    MCNEMAR_EXACT_BELOW,
    DegenerateDataWarning,
    mcnemar_test,
    paired_wilcoxon,
    sign_flip_test,
    stouffer_combine,
)

# ---------------------------------------------------------------------------------------
# Sign-flip permutation test


def test_six_seeds_smallest_two_sided_p_is_2_over_64():
    res = sign_flip_test([0.010, 0.004, 0.021, 0.007, 0.013, 0.002])
    assert res.exact and res.n_resamples == 64
    assert res.pvalue == 2 / 64 == 0.03125
    assert sign_flip_test(-np.array([0.010, 0.004, 0.021, 0.007, 0.013, 0.002])).pvalue == 2 / 64
    assert (
        sign_flip_test([0.01, 0.02, 0.03, 0.04, 0.05, 0.06], alternative="greater").pvalue == 1 / 64
    )
    assert sign_flip_test(np.zeros(6)).pvalue == 1.0


def _brute_null(d):
    return np.array([np.mean(np.array(s) * d) for s in itertools.product([1, -1], repeat=d.size)])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_sign_flip_equals_scipy_permutation_test(seed, alternative):
    d = np.random.default_rng(seed).normal(0.004, 0.01, size=6 + seed % 3)
    ours = sign_flip_test(d, alternative=alternative)
    ref = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative=alternative, n_resamples=np.inf
    )
    assert ours.exact
    assert ours.pvalue == pytest.approx(ref.pvalue, rel=1e-12)
    assert ours.statistic == pytest.approx(ref.statistic)
    np.testing.assert_allclose(np.sort(ours.null_distribution), np.sort(_brute_null(d)), atol=1e-15)


def test_monte_carlo_sign_flip_has_plus_one_correction():
    d = np.random.default_rng(7).normal(0.003, 0.01, size=14)  # 16,384 patterns
    exact = sign_flip_test(d, n_resamples=2**14)
    mc = sign_flip_test(d, n_resamples=4000, rng=1)
    assert exact.exact and not mc.exact and mc.n_resamples == 4000
    b = np.sum(np.abs(mc.null_distribution) >= abs(mc.statistic) * (1 - 1e-14))
    assert mc.pvalue == pytest.approx((b + 1) / 4001)
    assert mc.pvalue == pytest.approx(exact.pvalue, abs=4 * np.sqrt(exact.pvalue / 4000) + 1e-3)
    again = sign_flip_test(d, n_resamples=4000, rng=1)
    assert again.pvalue == mc.pvalue
    extreme = sign_flip_test(np.full(20, 0.01), n_resamples=999, rng=0)  # nothing as extreme
    assert extreme.pvalue >= 1 / 1000


def test_sign_flip_validation():
    with pytest.raises(DataError):
        sign_flip_test([0.1, np.nan])
    with pytest.raises(DataError):
        sign_flip_test([])


# ---------------------------------------------------------------------------------------
# Stouffer


def test_stouffer_equals_scipy_combine_pvalues():
    z = np.array([1.2, 0.4, 2.1, -0.3, 1.7, 0.9])
    res = stouffer_combine(z, alternative="greater")
    ref = stats.combine_pvalues(stats.norm.sf(z), method="stouffer")
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.pvalue == pytest.approx(ref.pvalue, rel=1e-10)
    two = stouffer_combine(z)
    assert two.statistic == pytest.approx(z.sum() / np.sqrt(6))
    assert two.pvalue == pytest.approx(2 * stats.norm.sf(two.statistic))
    assert "independent" in two.assumption and two.n == 6
    with pytest.warns(DegenerateDataWarning):
        assert np.isnan(stouffer_combine([1.0, np.nan]).pvalue)


# ---------------------------------------------------------------------------------------
# Wilcoxon signed-rank


def _brute_wilcoxon_p(d):
    """Exact two-sided p by enumerating signs of ranks 1..n (no ties, no zeros)."""
    ranks = stats.rankdata(np.abs(d))
    w = ranks[d > 0].sum()
    null = np.array(
        [ranks[np.array(s) > 0].sum() for s in itertools.product([1, -1], repeat=d.size)]
    )
    return min(1.0, 2 * min(np.mean(null <= w), np.mean(null >= w)))


@pytest.mark.parametrize("seed", range(4))
def test_wilcoxon_exact_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    ref = rng.normal(0.7, 0.01, size=6 + seed)
    new = ref + rng.normal(0.003, 0.01, size=ref.size)
    res = paired_wilcoxon(ref, new)
    assert res.method == "exact" and res.n == ref.size
    assert res.pvalue == pytest.approx(_brute_wilcoxon_p(new - ref), rel=1e-12)
    greater = paired_wilcoxon(ref, new, alternative="greater")
    ranks = stats.rankdata(np.abs(new - ref))
    assert greater.statistic == pytest.approx(ranks[new > ref].sum())


def test_wilcoxon_six_seeds_smallest_p_and_methods():
    ref = np.array([0.70, 0.71, 0.69, 0.72, 0.70, 0.68])
    assert paired_wilcoxon(ref, ref + [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]).pvalue == 2 / 64
    tied = paired_wilcoxon(ref, ref + [0.01, 0.01, 0.03, 0.0, 0.05, 0.06])
    assert tied.method == "permutation"
    big = np.random.default_rng(0).normal(size=60)
    assert paired_wilcoxon(big, big + 0.1).method == "asymptotic"
    with pytest.warns(DegenerateDataWarning):
        assert np.isnan(paired_wilcoxon(ref, ref).pvalue)
    with pytest.raises(DataError):
        paired_wilcoxon(ref, ref[:3])


# ---------------------------------------------------------------------------------------
# McNemar


def _paired_predictions(b: int, c: int, both: int, neither: int):
    """Labels and predictions with b ref-only-correct and c new-only-correct frames."""
    n = b + c + both + neither
    y = np.arange(n) % 3
    wrong = (y + 1) % 3
    ok_ref = np.r_[np.ones(b), np.zeros(c), np.ones(both), np.zeros(neither)].astype(bool)
    ok_new = np.r_[np.zeros(b), np.ones(c), np.ones(both), np.zeros(neither)].astype(bool)
    return y, np.where(ok_ref, y, wrong), np.where(ok_new, y, wrong)


def _exact_p(b, c):
    k, n = min(b, c), b + c
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)


@pytest.mark.parametrize("b,c", [(3, 9), (0, 5), (12, 12), (20, 4)])
def test_mcnemar_exact_below_threshold(b, c):
    y, ref, new = _paired_predictions(b, c, 30, 7)
    res = mcnemar_test(y, ref, new)
    assert res.method == "exact" and (res.ref_only, res.new_only) == (b, c)
    assert res.pvalue == pytest.approx(_exact_p(b, c), rel=1e-12)
    assert res.pvalue == pytest.approx(stats.binomtest(c, b + c).pvalue, rel=1e-12)
    assert res.delta == pytest.approx((c - b) / y.size)


@pytest.mark.parametrize("b,c", [(10, 15), (40, 22), (3, 30)])
def test_mcnemar_chi2_from_threshold(b, c):
    assert b + c >= MCNEMAR_EXACT_BELOW == 25
    y, ref, new = _paired_predictions(b, c, 50, 10)
    res = mcnemar_test(y, ref, new)
    stat = (abs(b - c) - 1) ** 2 / (b + c)
    assert res.method == "chi2" and res.statistic == pytest.approx(stat)
    # chi2(1) tail == two-sided normal tail of sqrt(stat)
    assert res.pvalue == pytest.approx(2 * stats.norm.sf(np.sqrt(stat)), rel=1e-10)


def test_mcnemar_argmax_and_no_discordance():
    y, ref, new = _paired_predictions(2, 6, 10, 4)
    scores_ref = np.eye(3)[ref] * 0.6 + 0.1
    scores_new = np.eye(3)[new] * 0.5 + 0.2
    assert mcnemar_test(y, scores_ref, scores_new) == mcnemar_test(y, ref, new)
    same = mcnemar_test(y, ref, ref)
    assert same.pvalue == 1.0 and same.ref_only == same.new_only == 0
    with pytest.raises(DataError):
        mcnemar_test(y, ref[:-1], new)
