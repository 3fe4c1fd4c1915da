"""DeLong tests: fast midrank algorithm vs the O(m n) definition, macro test, AUC metrics."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import special, stats
from sklearn.metrics import roc_auc_score

from pipi.errors import ConfigError, DataError
from pipi.stats import (
    DegenerateDataWarning,
    delong_ci,
    delong_macro_test,
    delong_test,
    macro_auc,
    per_class_auc,
)

# ---------------------------------------------------------------------------------------
# Independent reference: DeLong (1988) straight from the definition, O(m n) pairs.


def _kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """psi(X_i, Y_j) matrix (m, n): 1 if x > y, 1/2 if tied, 0 otherwise."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def _sample_cov(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a - a.mean()) * (b - b.mean())).sum() / (a.size - 1))


def brute_delong(y, ref, new):
    """(auc_ref, auc_new, var_ref, var_new, cov) from the definition."""
    pos = np.asarray(y) == 1
    comps = []
    for s in (np.asarray(ref, float), np.asarray(new, float)):
        psi = _kernel(s[pos], s[~pos])
        comps.append((psi.mean(), psi.mean(axis=1), psi.mean(axis=0)))
    m, n = int(pos.sum()), int((~pos).sum())
    (a0, x0, y0), (a1, x1, y1) = comps
    var0 = _sample_cov(x0, x0) / m + _sample_cov(y0, y0) / n
    var1 = _sample_cov(x1, x1) / m + _sample_cov(y1, y1) / n
    cov = _sample_cov(x0, x1) / m + _sample_cov(y0, y1) / n
    return a0, a1, var0, var1, cov


def _dataset(seed: int, n: int = 120, decimals: int | None = 1, shift: float = 0.8):
    """Correlated ref/new scores, rounded to create many ties."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(int)
    common = rng.normal(size=n)
    ref = common + 0.4 * y + rng.normal(size=n)
    new = common + shift * y + rng.normal(size=n)
    if decimals is not None:
        ref, new = np.round(ref, decimals), np.round(new, decimals)
    return y, ref, new


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_delong_matches_definition(seed, decimals):
    y, ref, new = _dataset(seed, n=90 + 17 * seed, decimals=decimals)
    res = delong_test(y, ref, new)
    a0, a1, v0, v1, c = brute_delong(y, ref, new)
    assert res.auc_ref == pytest.approx(a0, abs=1e-12)
    assert res.auc_new == pytest.approx(a1, abs=1e-12)
    np.testing.assert_allclose(
        [res.variance_ref, res.variance_new, res.covariance], [v0, v1, c], rtol=1e-10, atol=1e-14
    )
    z = (a1 - a0) / np.sqrt(v0 + v1 - 2 * c)
    assert res.statistic == pytest.approx(z, rel=1e-10)
    assert res.pvalue == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-9)
    # AUC is also the normalised Mann-Whitney U and sklearn's roc_auc_score
    u = stats.mannwhitneyu(new[y == 1], new[y == 0]).statistic
    assert res.auc_new == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()), abs=1e-12)
    assert res.auc_ref == pytest.approx(roc_auc_score(y, ref), abs=1e-12)


def test_direction_is_fixed_and_sign_convention():
    y, ref, new = _dataset(3)
    res = delong_test(y, -ref, new)  # reference ranks the wrong way round
    assert res.auc_ref < 0.5
    assert res.auc_ref == pytest.approx(1 - roc_auc_score(y, ref), abs=1e-12)
    assert res.delta == pytest.approx(res.auc_new - res.auc_ref)
    assert res.statistic > 0  # new is better
    swapped = delong_test(y, new, -ref)
    assert swapped.statistic == pytest.approx(-res.statistic)
    assert swapped.pvalue == pytest.approx(res.pvalue)
    lo, hi = res.confidence_interval
    lo2, hi2 = swapped.confidence_interval
    assert (lo, hi) == pytest.approx((-hi2, -lo2))


def test_alternatives():
    y, ref, new = _dataset(1)
    two = delong_test(y, ref, new)
    greater = delong_test(y, ref, new, alternative="greater")
    less = delong_test(y, ref, new, alternative="less")
    assert greater.pvalue == pytest.approx(special.ndtr(-two.statistic))
    assert greater.pvalue + less.pvalue == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="alternative"):
        delong_test(y, ref, new, alternative="bigger")


def test_wald_interval_of_delta():
    y, ref, new = _dataset(2)
    res = delong_test(y, ref, new, confidence_level=0.9)
    half = stats.norm.ppf(0.95) * np.sqrt(res.variance_delta)
    assert res.confidence_interval == pytest.approx((res.delta - half, res.delta + half))


def test_degenerate_inputs_give_nan_with_warning():
    y = np.zeros(10, dtype=int)
    with pytest.warns(DegenerateDataWarning, match="both classes"):
        res = delong_test(y, np.arange(10.0), np.arange(10.0))
    assert np.isnan(res.statistic) and np.isnan(res.auc_ref)
    y, ref, _ = _dataset(0)
    with pytest.warns(DegenerateDataWarning, match="zero"):
        res = delong_test(y, ref, ref)  # identical arms: delta 0, variance 0
    assert np.isnan(res.statistic) and np.isnan(res.pvalue) and res.delta == 0
    with pytest.warns(DegenerateDataWarning, match="at least 2"):
        res = delong_test([1, 0, 0, 0], [0.9, 0.1, 0.2, 0.3], [0.5, 0.6, 0.1, 0.2])
    assert res.auc_ref == 1.0 and np.isnan(res.variance_ref)


def test_input_validation():
    with pytest.raises(DataError, match="binary"):
        delong_test([0, 1, 2], [1, 2, 3], [1, 2, 3])
    with pytest.raises(DataError, match="length"):
        delong_test([0, 1, 1], [1, 2], [1, 2, 3])
    with pytest.raises(DataError, match="NaN"):
        delong_test([0, 1, 1], [1, np.nan, 3], [1, 2, 3])
    with pytest.raises(ConfigError, match="confidence_level"):
        delong_ci([0, 1, 1], [1, 2, 3], confidence_level=95)


@pytest.mark.parametrize("seed", range(4))
def test_delong_ci_matches_definition(seed):
    y, ref, _ = _dataset(seed, decimals=1)
    res = delong_ci(y, ref, confidence_level=0.95)
    _, _, v0, _, _ = brute_delong(y, ref, ref)
    assert res.variance == pytest.approx(v0, rel=1e-10)
    half = stats.norm.ppf(0.975) * np.sqrt(v0)
    assert res.confidence_interval == pytest.approx(
        (max(0.0, res.statistic - half), min(1.0, res.statistic + half))
    )


def test_delong_ci_perfect_separation_is_a_point():
    with pytest.warns(DegenerateDataWarning, match="zero"):
        res = delong_ci([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9])
    assert res.statistic == 1.0 and res.confidence_interval == (1.0, 1.0)


# ---------------------------------------------------------------------------------------
# Macro test


def _multiclass(seed: int, n: int = 400, k: int = 4, gain: float = 0.4, scale: float = 1.0):
    """Labels and softmax probabilities of two correlated arms, K classes."""
    rng = np.random.default_rng(seed)
    y = rng.choice(k, size=n, p=np.linspace(1, 2, k) / np.linspace(1, 2, k).sum())
    onehot = np.eye(k)[y]
    base = rng.normal(size=(n, k))
    ref = special.softmax(scale * (base + 1.0 * onehot + 0.7 * rng.normal(size=(n, k))), axis=1)
    new = special.softmax(
        scale * (base + (1.0 + gain) * onehot + 0.7 * rng.normal(size=(n, k))), axis=1
    )
    return y, ref, new


def test_macro_with_one_class_equals_delong_test():
    y, ref, new = _multiclass(0)
    for c in range(4):
        macro = delong_macro_test(y, ref, new, classes=[c])
        single = delong_test(y == c, ref[:, c], new[:, c])
        assert macro.statistic == pytest.approx(single.statistic, rel=1e-12)
        assert macro.pvalue == pytest.approx(single.pvalue, rel=1e-10)
        assert macro.variance_delta == pytest.approx(single.variance_delta, rel=1e-12)
        assert macro.macro_auc_ref == pytest.approx(single.auc_ref, abs=1e-14)
        assert macro.confidence_interval == pytest.approx(single.confidence_interval)


def test_macro_per_class_parts_equal_per_class_tests():
    y, ref, new = _multiclass(1)
    res = delong_macro_test(y, ref, new)
    for i, c in enumerate(res.classes):
        single = delong_test(y == c, ref[:, c], new[:, c])
        assert res.covariance[i, i] == pytest.approx(single.variance_delta, rel=1e-12)
        assert res.per_class_statistic[i] == pytest.approx(single.statistic, rel=1e-12)
        assert res.per_class_pvalue[i] == pytest.approx(single.pvalue, rel=1e-10)
    np.testing.assert_allclose(res.auc_ref, [roc_auc_score(y == c, ref[:, c]) for c in range(4)])
    assert res.macro_auc_new == pytest.approx(macro_auc(y, new))
    assert res.delta == pytest.approx(np.mean(res.auc_new - res.auc_ref))
    assert res.variance_delta == pytest.approx(res.covariance.sum() / 16)
    np.testing.assert_allclose(res.covariance, res.covariance.T)
    assert np.linalg.eigvalsh(res.covariance).min() > -1e-15  # a Gram matrix


def _weighted_auc(w, pos, s):
    """Brute-force weighted AUC: sum w_i w_j psi_ij / (W_pos W_neg)."""
    psi = _kernel(s[pos], s[~pos])
    wp, wn = w[pos], w[~pos]
    return float(wp @ psi @ wn / (wp.sum() * wn.sum()))


def test_macro_covariance_equals_infinitesimal_jackknife():
    """Derive the influence values numerically (d AUC / d w_f on brute-force weighted AUCs),
    apply the documented DeLong factors sqrt(m/(m-1)), sqrt(n/(n-1)) and rebuild the
    covariance of per-class deltas; without the factors it is the sandwich estimate."""
    y, ref, new = _multiclass(2, n=90, k=3)
    y = y.copy()
    y[:6] = [0, 0, 1, 1, 2, 2]
    res = delong_macro_test(y, ref, new)
    n, k, h = y.size, 3, 1e-5
    infl = np.zeros((k, n))  # IJ influence of each class delta
    factor = np.zeros((k, n))
    for c in range(k):
        pos = y == c
        m_c, n_c = pos.sum(), (~pos).sum()
        factor[c] = np.where(pos, np.sqrt(m_c / (m_c - 1)), np.sqrt(n_c / (n_c - 1)))
        for f in range(n):
            up, down = np.ones(n), np.ones(n)
            up[f] += h
            down[f] -= h
            d_up = _weighted_auc(up, pos, new[:, c]) - _weighted_auc(up, pos, ref[:, c])
            d_dn = _weighted_auc(down, pos, new[:, c]) - _weighted_auc(down, pos, ref[:, c])
            infl[c, f] = (d_up - d_dn) / (2 * h)
    scaled = infl * factor
    np.testing.assert_allclose(res.covariance, scaled @ scaled.T, rtol=1e-6, atol=1e-12)
    sandwich = infl @ infl.T
    np.testing.assert_allclose(res.covariance, sandwich, rtol=0.1)  # O(1/m) apart
    assert res.variance_delta == pytest.approx(sandwich.sum() / k**2, rel=0.05)


def test_macro_variance_matches_monte_carlo():
    """The estimated variance of the macro delta matches its sampling variance over
    independent simulated test sets, and cross-class covariances matter."""
    reps = 300
    deltas, est, diag_only = np.empty(reps), np.empty(reps), np.empty(reps)
    for r in range(reps):
        y, ref, new = _multiclass(1000 + r, n=300, k=4, gain=0.3, scale=2.0)
        res = delong_macro_test(y, ref, new)
        deltas[r], est[r] = res.delta, res.variance_delta
        diag_only[r] = np.trace(res.covariance) / 16
    mc = deltas.var(ddof=1)
    # sampling error of a variance from 300 replicates ~ sqrt(2/299) = 8 %
    assert est.mean() == pytest.approx(mc, rel=0.25)
    assert abs(np.log(est.mean() / mc)) < abs(np.log(diag_only.mean() / mc))


def test_macro_skips_classes_without_positives():
    y, ref, new = _multiclass(3)
    y = np.where(y == 2, 1, y)  # class 2 has no frame left
    with pytest.warns(DegenerateDataWarning, match=r"\[2\]"):
        res = delong_macro_test(y, ref, new)
    assert res.classes == (0, 1, 3) and res.skipped_classes == (2,)
    with pytest.warns(DegenerateDataWarning):
        assert res.macro_auc_ref == pytest.approx(macro_auc(y, ref))


def test_macro_accepts_one_hot_and_checks_shapes():
    y, ref, new = _multiclass(4)
    a = delong_macro_test(y, ref, new, classes=[0, 2])
    b = delong_macro_test(np.eye(4, dtype=int)[y], ref, new, classes=[0, 2])
    assert a.statistic == b.statistic and a.classes == (0, 2)
    with pytest.raises(DataError, match="shape"):
        delong_macro_test(y, ref, new[:, :3])
    with pytest.raises(ConfigError, match="not columns"):
        delong_macro_test(y, ref, new, classes=[5])


# ---------------------------------------------------------------------------------------
# AUC metrics


def test_per_class_and_macro_auc_match_sklearn():
    y, _, probs = _multiclass(5, n=200, k=5)
    assert macro_auc(y, probs) == pytest.approx(
        roc_auc_score(y, probs, multi_class="ovr", average="macro"), abs=1e-12
    )
    new = np.round(probs, 2)  # ties
    expected = [roc_auc_score(y == c, new[:, c]) for c in range(5)]
    np.testing.assert_allclose(per_class_auc(y, new), expected, atol=1e-12)
    assert macro_auc(y, new) == pytest.approx(np.mean(expected), abs=1e-12)
    np.testing.assert_allclose(per_class_auc(y, new, classes=[4, 1]), [expected[4], expected[1]])


def test_per_class_auc_nan_for_missing_class():
    y = np.array([0, 0, 1, 1, 0])
    p = np.random.default_rng(0).random((5, 3))
    with pytest.warns(DegenerateDataWarning, match=r"\[2\]"):
        aucs = per_class_auc(y, p)
    assert np.isnan(aucs[2]) and np.isfinite(aucs[:2]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        assert macro_auc(y, p) == pytest.approx(np.mean(aucs[:2]))
