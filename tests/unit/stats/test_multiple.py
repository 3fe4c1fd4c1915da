"""Multiple-comparison adjustment and significance markers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pipi.errors import ConfigError, DataError
from pipi.stats import Family, adjust_families, adjust_pvalues, significance_marker


def _bh_by_hand(p):
    """Benjamini-Hochberg step-up: adj_(i) = min_{j >= i} m p_(j) / j, capped at 1."""
    m = p.size
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    adj_sorted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj_sorted, 1.0)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_bh_and_bonferroni_by_hand(seed):
    p = np.random.default_rng(seed).beta(0.5, 3, size=11)
    np.testing.assert_allclose(adjust_pvalues(p, method="bh"), _bh_by_hand(p), rtol=1e-12)
    np.testing.assert_allclose(
        adjust_pvalues(p, method="bh"), stats.false_discovery_control(p, method="bh"), rtol=1e-12
    )
    np.testing.assert_allclose(adjust_pvalues(p, method="bonferroni"), np.minimum(1, 11 * p))
    assert (adjust_pvalues(p, method="bh") <= adjust_pvalues(p) + 1e-15).all()


def test_nan_pvalues_are_kept_and_not_counted():
    p = np.array([0.01, np.nan, 0.02, 0.3])
    bonf = adjust_pvalues(p)
    assert np.isnan(bonf[1])
    np.testing.assert_allclose(bonf[[0, 2, 3]], [0.03, 0.06, 0.9])
    np.testing.assert_allclose(
        adjust_pvalues(p, method="bh")[[0, 2, 3]], _bh_by_hand(np.array([0.01, 0.02, 0.3]))
    )
    assert np.isnan(adjust_pvalues([np.nan, np.nan])).all()


def test_adjust_validation():
    with pytest.raises(ConfigError, match="method"):
        adjust_pvalues([0.1], method="holm")
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        adjust_pvalues([0.1, 1.2])


def test_significance_markers_are_strict():
    cases = {
        0.0009: "***",
        0.001: "**",
        0.0099: "**",
        0.01: "*",
        0.049: "*",
        0.05: "",
        0.2: "",
        float("nan"): "",
    }
    for p, marker in cases.items():
        assert significance_marker(p) == marker, p
    assert significance_marker(np.array([0.0001, 0.02, 0.5])) == ["***", "*", ""]


def test_families_are_adjusted_once_each():
    per_class = Family("perclass/rgb_vs_pi", {"Ulcer": 0.004, "Polyp": 0.03, "Erosion": 0.2})
    macro = Family("macro", {"pi": 0.01})
    out = adjust_families([per_class, macro], method="bh")
    assert set(out) == {"perclass/rgb_vs_pi", "macro"}
    fam = out["perclass/rgb_vs_pi"]
    np.testing.assert_allclose(fam.adjusted, _bh_by_hand(np.array([0.004, 0.03, 0.2])))
    assert fam.labels == ("Ulcer", "Polyp", "Erosion") and fam.method == "bh"
    assert fam.markers == tuple(significance_marker(fam.adjusted))
    assert out["macro"].as_dict() == {"pi": 0.01}
    assert per_class.adjust().as_dict()["Ulcer"] == pytest.approx(0.012)
    with pytest.raises(ConfigError, match="twice"):
        adjust_families([per_class, per_class])
    with pytest.raises(ConfigError):
        Family("empty", {})
