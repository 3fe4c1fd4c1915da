"""Seed-level BCa of per-seed paired deltas against scipy.stats.bootstrap(method="BCa")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pipi.errors import DataError
from pipi.stats import seed_delta_bca

#: Fixed per-seed deltas (six seeds, like the paper's; one negative as in "5/6 seeds").
DELTAS = np.array([0.031, 0.012, 0.027, -0.004, 0.019, 0.024])


def _scipy(deltas, *, seed, n=1000, level=0.95):
    return stats.bootstrap((deltas,), np.mean, n_resamples=n, confidence_level=level,
                           method="BCa", rng=np.random.default_rng(seed))


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("level", [0.90, 0.95])
def test_equals_scipy_bca_same_random_state(seed, level):
    mine = seed_delta_bca(DELTAS, n_resamples=1000, confidence_level=level,
                          rng=np.random.default_rng(seed))
    ref = _scipy(DELTAS, seed=seed, level=level)
    np.testing.assert_allclose(mine.bootstrap_distribution, ref.bootstrap_distribution,
                               rtol=0, atol=1e-12)
    assert abs(mine.confidence_interval.low - ref.confidence_interval.low) < 1e-9
    assert abs(mine.confidence_interval.high - ref.confidence_interval.high) < 1e-9
    assert mine.unit == "seeds" and mine.n_seeds == 6


def test_equals_scipy_bca_from_the_same_distribution():
    """scipy's BCa computed from pipi's bootstrap distribution (n_resamples=0 plus the
    previous result), so the check does not rest on the draw order."""
    mine = seed_delta_bca(DELTAS, n_resamples=2000, rng=123)
    prev = stats._resampling.BootstrapResult(
        confidence_interval=None, bootstrap_distribution=mine.bootstrap_distribution,
        standard_error=None)
    ref = stats.bootstrap((DELTAS,), np.mean, n_resamples=0, method="BCa",
                          bootstrap_result=prev, rng=0)
    assert abs(mine.confidence_interval.low - ref.confidence_interval.low) < 1e-9
    assert abs(mine.confidence_interval.high - ref.confidence_interval.high) < 1e-9


def test_skewed_deltas_equal_scipy():
    d = np.array([0.001, 0.002, 0.0025, 0.003, 0.004, 0.09])
    mine = seed_delta_bca(d, rng=np.random.default_rng(5))
    ref = _scipy(d, seed=5)
    assert abs(mine.confidence_interval.low - ref.confidence_interval.low) < 1e-9
    assert abs(mine.confidence_interval.high - ref.confidence_interval.high) < 1e-9


def test_instability_is_reported_at_six_seeds():
    # one outlying seed drives the acceleration: an endpoint is pinned to the data range
    d = np.array([0.001, 0.002, 0.0025, 0.003, 0.004, 0.09])
    res = seed_delta_bca(d, rng=5)
    assert res.unstable and "n = 6 seeds" in res.reason
    lo_level, hi_level = res.tail_levels
    assert (lo_level * 1000 < 10 or (1 - hi_level) * 1000 < 10
            or np.isclose(res.confidence_interval.high, d.max())
            or np.isclose(res.confidence_interval.low, d.min()))


def test_many_well_behaved_seeds_are_stable():
    d = np.random.default_rng(3).normal(0.02, 0.01, 40)
    res = seed_delta_bca(d, rng=1)
    assert not res.unstable and res.reason == ""


def test_equal_deltas_undefined():
    with np.errstate(all="ignore"):
        res = seed_delta_bca(np.full(6, 0.01), rng=0)
    assert res.unstable and np.isnan(res.confidence_interval.low)


def test_bad_input():
    with pytest.raises(DataError, match="per-seed deltas"):
        seed_delta_bca([0.1])
    with pytest.raises(DataError, match="NaN"):
        seed_delta_bca([0.1, np.nan])
