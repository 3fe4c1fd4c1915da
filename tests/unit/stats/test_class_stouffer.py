"""The published code's macro paired z (Stouffer over seeds per class, then over classes)
against a brute-force DeLong written from the definition (pairwise kernel, no pipi code)."""

from __future__ import annotations

import numpy as np
import pytest
from brute import kernel_delong_z
from scipy import stats

from pipi.errors import DataError
from pipi.stats import delong_macro_test, stouffer_over_classes


def _data(seed=0, n=240, k=4, seeds=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    onehot = np.eye(k)[y]
    ref = [rng.normal(size=(n, k)) + 0.6 * onehot for _ in range(seeds)]
    new = [r + 0.3 * onehot + 0.4 * rng.normal(size=(n, k)) for r in ref]
    return y, ref, new


def test_equals_the_per_class_kernel_delong_combined_by_hand():
    y, ref, new = _data()
    k = 4
    per = np.stack([delong_macro_test(y, r, w).per_class_statistic for r, w in zip(ref, new)])
    res = stouffer_over_classes(per)
    brute = np.array([[kernel_delong_z(y == c, r[:, c], w[:, c]) for c in range(k)]
                      for r, w in zip(ref, new)])                         # (S, K)
    np.testing.assert_allclose(per, brute, rtol=1e-9)
    by_class = brute.sum(0) / np.sqrt(len(ref))
    macro = by_class.sum() / np.sqrt(k)
    np.testing.assert_allclose(res.per_class_statistic, by_class, rtol=1e-9)
    assert res.statistic == pytest.approx(macro, rel=1e-9)
    assert res.pvalue == pytest.approx(2 * stats.norm.sf(abs(macro)), rel=1e-9)
    assert res.n_classes == k and list(res.n_seeds) == [3] * k
    # it is not pipi's covariance form: Stouffer over seeds of the macro DeLong z
    cov_form = sum(delong_macro_test(y, r, w).statistic for r, w in zip(ref, new)) / np.sqrt(3)
    assert abs(res.statistic - cov_form) > 0.1


def test_a_missing_z_is_left_out_of_its_class_only():
    z = np.array([[1.0, 2.0, np.nan], [3.0, np.nan, np.nan]])
    res = stouffer_over_classes(z)
    assert list(res.n_seeds) == [2, 1, 0] and res.n_classes == 2
    assert res.statistic == pytest.approx((4 / np.sqrt(2) + 2.0) / np.sqrt(2))
    assert np.isnan(res.per_class_statistic[2])


def test_no_finite_z_is_nan_and_bad_shape_is_refused():
    with pytest.warns(Warning, match="no class"):
        assert np.isnan(stouffer_over_classes(np.full((2, 2), np.nan)).statistic)
    with pytest.raises(DataError, match="seeds x classes"):
        stouffer_over_classes([1.0, 2.0])
