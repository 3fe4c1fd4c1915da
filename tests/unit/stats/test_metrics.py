"""Calibration (ECE, Brier) and operating points against brute force and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score, roc_curve

from pipi.errors import ConfigError, DataError
from pipi.stats import (
    DegenerateDataWarning,
    average_precision,
    brier_score,
    expected_calibration_error,
    fpr_at_sensitivity,
    operating_points,
    roc_points,
    sensitivity_at_fpr,
)


def _probs(seed, n=500, k=5, decimals=None):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    p = special.softmax(1.5 * np.eye(k)[y] + rng.normal(size=(n, k)), axis=1)
    if decimals is not None:
        p = np.round(p, decimals)
    return y, p


def _ece_loop(y, p, k, n_bins):
    """ECE of one class by an explicit loop over bins and frames."""
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [
            i for i in range(y.size) if lo <= p[i, k] < hi or (b == n_bins - 1 and p[i, k] == 1.0)
        ]
        if members:
            acc = np.mean([1.0 if y[i] == k else 0.0 for i in members])
            conf = np.mean([p[i, k] for i in members])
            total += len(members) / y.size * abs(acc - conf)
    return total


@pytest.mark.parametrize("seed", range(3))
def test_ece_matches_loop(seed):
    y, p = _probs(seed, n=300, decimals=2 if seed else None)
    p[:15, 0] = np.arange(15) / 15  # values on the bin edges
    p[15, 1], p[16, 1] = 1.0, 0.0
    res = expected_calibration_error(y, p)
    expected = [_ece_loop(y, p, k, 15) for k in range(5)]
    np.testing.assert_allclose(res.per_class, expected, rtol=1e-12)
    assert res.statistic == pytest.approx(np.mean(expected)) and res.n_bins == 15
    sub = expected_calibration_error(y, p, classes=[3, 1], n_bins=10)
    np.testing.assert_allclose(sub.per_class, [_ece_loop(y, p, 3, 10), _ece_loop(y, p, 1, 10)])


def test_ece_perfectly_calibrated_and_validation():
    y = np.array([0] * 8 + [1] * 2)
    p = np.column_stack([np.full(10, 0.8), np.full(10, 0.2)])  # 80 % of frames are class 0
    assert expected_calibration_error(y, p).statistic == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(DataError, match="probabilities"):
        expected_calibration_error(y, p * 2)
    with pytest.raises(ConfigError, match="n_bins"):
        expected_calibration_error(y, p, n_bins=0)


@pytest.mark.parametrize("seed", range(3))
def test_brier_matches_sklearn(seed):
    y, p = _probs(seed)
    res = brier_score(y, p)
    expected = [brier_score_loss(y == k, p[:, k]) for k in range(5)]
    np.testing.assert_allclose(res.per_class, expected, rtol=1e-12)
    assert res.statistic == pytest.approx(np.mean(expected))
    onehot = np.eye(5)[y]
    assert res.multiclass == pytest.approx(np.mean(np.sum((p - onehot) ** 2, axis=1)))
    assert res.multiclass == pytest.approx(5 * res.per_class.mean())  # sum over all columns


def _sk_points(y, s):
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr, thr


@pytest.mark.parametrize("seed", range(4))
def test_operating_points_match_sklearn_roc_brute_force(seed):
    y, p = _probs(seed, n=400, decimals=2)
    for k in range(5):
        pos, s = y == k, p[:, k]
        fpr, tpr, thr = _sk_points(pos, s)
        ours = roc_points(pos, s)
        np.testing.assert_allclose(ours[0], fpr)
        np.testing.assert_allclose(ours[1], tpr)
        np.testing.assert_allclose(ours[2][1:], thr[1:])
        for budget in (0.05, 0.10):
            ok = fpr <= budget
            best = np.flatnonzero(ok)[np.argmax(fpr[ok] + 1e-9 * tpr[ok])]  # largest FPR, then TPR
            pt = sensitivity_at_fpr(pos, s, max_fpr=budget)
            assert pt.sensitivity == pytest.approx(tpr[best]) and pt.fpr == pytest.approx(fpr[best])
            assert pt.fpr <= budget
            assert ((s >= pt.threshold) & pos).sum() / pos.sum() == pytest.approx(pt.sensitivity)
        reach = tpr >= 0.9
        pt = fpr_at_sensitivity(pos, s, min_sensitivity=0.9)
        assert pt.fpr == pytest.approx(fpr[reach].min())
        assert ((s >= pt.threshold) & ~pos).sum() / (~pos).sum() == pytest.approx(pt.fpr)
        assert average_precision(pos, s) == pytest.approx(
            average_precision_score(pos, s), rel=1e-12
        )


def test_operating_points_table():
    y, p = _probs(7, n=600, k=4, decimals=3)
    res = operating_points(y, p, classes=[2, 0], fpr_targets=(0.05, 0.1, 0.2))
    assert res.classes == (2, 0) and res.sensitivity_at_fpr.shape == (2, 3)
    for i, k in enumerate((2, 0)):
        assert res.auc[i] == pytest.approx(roc_auc_score(y == k, p[:, k]))
        assert res.average_precision[i] == pytest.approx(average_precision_score(y == k, p[:, k]))
        for j, t in enumerate((0.05, 0.1, 0.2)):
            assert (
                res.sensitivity_at_fpr[i, j]
                == sensitivity_at_fpr(y == k, p[:, k], max_fpr=t).sensitivity
            )
        assert res.fpr_at_sensitivity[i] == fpr_at_sensitivity(y == k, p[:, k]).fpr
    assert np.all(np.diff(res.sensitivity_at_fpr, axis=1) >= 0)


def test_operating_points_degenerate_class():
    y = np.array([0, 0, 1, 1, 0, 1])
    p = np.random.default_rng(0).random((6, 3))
    with pytest.warns(DegenerateDataWarning, match=r"\[2\]"):
        res = operating_points(y, p)
    assert np.isnan(res.sensitivity_at_fpr[2]).all() and np.isnan(res.average_precision[2])
    assert np.isfinite(res.sensitivity_at_fpr[:2]).all()
    with pytest.warns(DegenerateDataWarning):
        assert np.isnan(average_precision(np.zeros(4), np.arange(4.0)))
    with pytest.raises(ConfigError):
        sensitivity_at_fpr(y == 0, p[:, 0], max_fpr=5)
