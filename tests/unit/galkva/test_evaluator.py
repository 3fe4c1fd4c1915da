"""The evaluator the paper describes: per-class p-values combined across seeds, Bonferroni and
BH, percentile and BCa intervals of every delta and of the retention, and the Markdown report.

Every statistic is checked against an independent computation (scipy, brute force); the
report against the JSON written by the same command.
"""

from __future__ import annotations

import doctest
import itertools
import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner
from fakes import make_prediction_dir, paper_example
from scipy import stats

from pipi.classes import CLASSES
from pipi.cli.galkva import galkva
from pipi.galkva import load_prediction_dir, recompute
from pipi.stats import (
    PVALUE_KINDS,
    BootstrapResult,
    ConfidenceInterval,
    bootstrap_intervals,
    compare_arms,
    paired_arms,
    ratio_bootstrap,
)

SEEDS = ("1", "2", "3")


@pytest.fixture(scope="module")
def pred_dir(tmp_path_factory):
    return make_prediction_dir(tmp_path_factory.mktemp("eval"), seeds=SEEDS, seed=7)


@pytest.fixture(scope="module")
def rec(pred_dir):
    return recompute(load_prediction_dir(pred_dir), n_resamples=300, rng=0)


def _arms(seed: int = 0, n_seeds: int = 3, n_videos: int = 10, per_video: int = 24, k: int = 4):
    """Labels, videos and two (S, N, K) score arrays, the method a little better."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n_videos * per_video)
    videos = np.repeat(np.arange(n_videos), per_video)
    base = rng.normal(size=(n_seeds, y.size, k)) + 0.9 * np.eye(k)[y]
    meth = base + rng.normal(0.15, 0.5, size=base.shape) * np.eye(k)[y]
    return y, videos, base, meth


# --------------------------------------------------------------------------- brute force
def _delong_z(y_pos: np.ndarray, ref: np.ndarray, new: np.ndarray) -> float:
    """Paired DeLong z of AUC(new) - AUC(ref) from the O(m n) structural components."""
    def comps(s):
        x, w = s[y_pos], s[~y_pos]
        psi = (x[:, None] > w[None, :]) + 0.5 * (x[:, None] == w[None, :])
        return psi.mean(), psi.mean(axis=1), psi.mean(axis=0)

    a_r, v10_r, v01_r = comps(ref)
    a_n, v10_n, v01_n = comps(new)
    s10 = np.cov(np.stack([v10_r, v10_n]))
    s01 = np.cov(np.stack([v01_r, v01_n]))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / v10_r.size \
        + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / v01_r.size
    return float((a_n - a_r) / math.sqrt(var))


def _bonferroni(p):
    p = np.asarray(p, float)
    return np.minimum(1.0, p * p.size)


def _bh(p):
    """Benjamini-Hochberg adjusted p: min over j >= i of m p_(j) / j, capped at 1."""
    p = np.asarray(p, float)
    m = p.size
    order = np.argsort(p)
    out = np.empty(m)
    for rank, i in enumerate(order, start=1):
        out[i] = min(1.0, min(m * p[order[j - 1]] / j for j in range(rank, m + 1)))
    return out


def _stouffer_two_sided(z):
    """scipy's Stouffer combination of one-sided p-values, made two-sided."""
    res = stats.combine_pvalues(stats.norm.sf(z), method="stouffer")
    return float(res.statistic), float(2 * min(res.pvalue, 1 - res.pvalue))


# --------------------------------------------------------------------------- p-values
def test_per_seed_delong_z_match_a_brute_force_computation():
    y, videos, base, meth = _arms()
    res = compare_arms(y, videos, base, meth, classes=[0, 1, 2, 3], tests=True,
                       n_resamples=100, rng=0)
    for cd in res.per_class:
        pos = y == cd.cls
        want = [_delong_z(pos, base[s][:, cd.cls], meth[s][:, cd.cls]) for s in range(3)]
        np.testing.assert_allclose(cd.delong_statistic, want, rtol=1e-9)
        np.testing.assert_allclose(cd.delong_pvalue, 2 * stats.norm.sf(np.abs(want)), rtol=1e-9)
    macro = [d.statistic for d in res.delong]
    assert np.isclose(res.stouffer.statistic, _stouffer_two_sided(macro)[0])


def test_per_class_pvalues_combined_across_seeds_match_scipy_and_brute_force():
    y, videos, base, meth = _arms(seed=1)
    res = compare_arms(y, videos, base, meth, classes=[0, 1, 2, 3], tests=True,
                       n_resamples=100, rng=0)
    assert len(res.per_class) == 4
    for cd in res.per_class:
        z, p = _stouffer_two_sided(cd.delong_statistic)
        assert math.isclose(cd.stouffer.statistic, z, rel_tol=1e-12)
        assert math.isclose(cd.pvalues["stouffer"], p, rel_tol=1e-9)
        # sign-flip: every one of the 2^3 sign patterns of the per-seed deltas
        d = cd.deltas
        null = [abs(np.mean(np.array(sg) * d)) for sg in itertools.product((1, -1), repeat=3)]
        want = sum(x >= abs(d.mean()) * (1 - 1e-14) for x in null) / 8
        assert cd.pvalues["sign_flip"] == pytest.approx(want)
        # the per-seed deltas are the per-class AUC differences (sklearn-free: rank AUC)
        for s in range(3):
            pos = y == cd.cls

            def auc(col, pos=pos):
                return stats.mannwhitneyu(col[pos], col[~pos]).statistic / (pos.sum() * (~pos).sum())

            assert math.isclose(d[s], auc(meth[s][:, cd.cls]) - auc(base[s][:, cd.cls]),
                                abs_tol=1e-12)
        assert cd.pvalues["bootstrap"] == cd.bootstrap.pvalue


def test_bonferroni_and_bh_over_the_classes_match_brute_force_and_scipy():
    y, videos, base, meth = _arms(seed=2, k=5)
    res = compare_arms(y, videos, base, meth, classes=range(5), tests=True,
                       n_resamples=100, rng=0)
    for kind in PVALUE_KINDS:
        raw = np.array([cd.pvalues[kind] for cd in res.per_class])
        bonf = np.array([cd.adjusted[f"{kind}_bonferroni"] for cd in res.per_class])
        bh = np.array([cd.adjusted[f"{kind}_bh"] for cd in res.per_class])
        np.testing.assert_allclose(bonf, _bonferroni(raw), rtol=1e-12)
        np.testing.assert_allclose(bh, _bh(raw), rtol=1e-12)
        np.testing.assert_allclose(bh, stats.false_discovery_control(raw, method="bh"),
                                   rtol=1e-12)


# --------------------------------------------------------------------------- intervals
def _jackknife(x, stat):
    return np.array([stat(np.delete(x, i)) for i in range(x.size)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_percentile_and_bca_of_a_delta_match_scipy(seed):
    """Fixed per-unit deltas: pipi's intervals from scipy's own bootstrap draws."""
    d = np.random.default_rng(seed).gamma(2.0, 0.01, 25) - 0.01  # skewed deltas
    bca = stats.bootstrap((d,), np.mean, method="BCa", n_resamples=2000,
                          confidence_level=0.9, rng=seed)
    pct = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=0,
                          confidence_level=0.9, bootstrap_result=bca)
    star = bca.bootstrap_distribution
    got_pct, got_bca, _, _ = bootstrap_intervals(d.mean(), star, _jackknife(d, np.mean), 0.9)
    np.testing.assert_allclose(got_pct, tuple(pct.confidence_interval), rtol=1e-10)
    np.testing.assert_allclose(got_bca, tuple(bca.confidence_interval), rtol=1e-10)


def _boot(x, star) -> BootstrapResult:
    nan = ConfidenceInterval(math.nan, math.nan)
    return BootstrapResult(float(x.mean()), nan, nan, nan, math.nan, math.nan, math.nan, star,
                           _jackknife(x, np.mean), 0.95, "BCa", "videos", star.size)


@pytest.mark.parametrize("seed", [0, 3])
def test_retention_ratio_percentile_and_two_sample_bca_match_scipy(seed):
    """Delta_Galar / Delta_Kvasir as a two-sample statistic: scipy's draws of both samples
    give the same percentile and BCa intervals (two-sample jackknife acceleration)."""
    rng = np.random.default_rng(seed)
    dk, dg = rng.normal(0.03, 0.02, 30), rng.normal(0.015, 0.03, 22)

    def ratio(g, k, axis=-1):
        return np.mean(g, axis=axis) / np.mean(k, axis=axis)

    res = stats.bootstrap((dg, dk), ratio, method="BCa", n_resamples=3000, rng=seed)
    pct = stats.bootstrap((dg, dk), ratio, method="percentile", n_resamples=0,
                          bootstrap_result=res)
    # the same draws, as two independent bootstraps: recover each side from scipy's rng
    gen = np.random.default_rng(seed)
    ig = gen.integers(0, dg.size, (3000, dg.size))
    ik = gen.integers(0, dk.size, (3000, dk.size))
    num_star, den_star = dg[ig].mean(axis=1), dk[ik].mean(axis=1)
    if not np.allclose(num_star / den_star, res.bootstrap_distribution):
        pytest.skip("scipy draws its resamples in another order in this version")
    got = ratio_bootstrap(_boot(dg, num_star), _boot(dk, den_star))
    np.testing.assert_allclose(got.percentile_interval, tuple(pct.confidence_interval),
                               rtol=1e-10)
    np.testing.assert_allclose(got.bca_interval, tuple(res.confidence_interval), rtol=1e-10)
    assert got.statistic == pytest.approx(dg.mean() / dk.mean())


def test_two_sample_bca_from_fixed_draws_matches_scipy():
    """Independent of scipy's draw order: its distribution fed to pipi's two-sample BCa."""
    rng = np.random.default_rng(11)
    dk, dg = rng.normal(0.03, 0.02, 18), rng.normal(0.01, 0.03, 27)

    def ratio(g, k, axis=-1):
        return np.mean(g, axis=axis) / np.mean(k, axis=axis)

    res = stats.bootstrap((dg, dk), ratio, method="BCa", n_resamples=2000, rng=5)
    jack = (_jackknife(dg, np.mean) / dk.mean(), dg.mean() / _jackknife(dk, np.mean))
    _, bca, _, _ = bootstrap_intervals(ratio(dg, dk), res.bootstrap_distribution, jack, 0.95)
    np.testing.assert_allclose(bca, tuple(res.confidence_interval), rtol=1e-10)


def test_recomputed_retention_intervals_come_from_the_two_datasets_bootstraps(rec):
    dk, dg = rec.kvasir.bootstrap, rec.galar.bootstrap
    ratio = dg.bootstrap_distribution / dk.bootstrap_distribution
    rb = rec.retention_bootstrap
    np.testing.assert_allclose(rb.percentile_interval, np.percentile(ratio, [2.5, 97.5]))
    assert rec.retention.confidence_interval == rb.percentile_interval
    jack = (dg.jackknife_values / dk.statistic, dg.statistic / dk.jackknife_values)
    _, bca, _, _ = bootstrap_intervals(dg.statistic / dk.statistic, ratio, jack, 0.95)
    np.testing.assert_allclose(rb.bca_interval, bca)
    assert rb.bca_interval != rb.percentile_interval
    for ds in ("kvasir", "galar"):
        for cd in rec[ds].per_class:
            bt = cd.bootstrap
            assert np.isfinite(bt.percentile_interval).all() and np.isfinite(bt.bca_interval).all()
            assert bt.percentile_interval.low <= cd.delta <= bt.percentile_interval.high


def test_stats_doctests():
    result = doctest.testmod(paired_arms, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------- the report
def _sections(md: str) -> dict[str, list[list[str]]]:
    """Markdown heading -> rows of its first table (cells stripped; separator dropped)."""
    out, head = {}, None
    for line in md.splitlines():
        if line.startswith("#"):
            head = line.lstrip("#").strip()
        elif line.startswith("|") and head is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-+:?", c) for c in cells):
                out.setdefault(head, []).append(cells)
    return out


def _num(cell: str) -> float:
    return float(cell.replace("+", "")) if cell != "n/a" else math.nan


def _ci(cell: str) -> tuple[float, float]:
    low, high = cell.strip("[]").split(",")
    return _num(low.strip()), _num(high.strip())


def _close(cell: str, value, digits: int = 4) -> bool:
    if value is None:
        return cell == "n/a"
    return abs(_num(cell) - value) <= 0.5 * 10**-digits + 1e-12


def _p_close(cell: str, value) -> bool:
    if value is None:
        return cell == "n/a"
    return math.isclose(_num(cell), value, rel_tol=5e-4, abs_tol=1e-300)


def test_cli_report_numbers_match_the_json(tmp_path, pred_dir):
    md_path, js_path = tmp_path / "out" / "report.md", tmp_path / "out" / "evaluation.json"
    r = CliRunner().invoke(galkva, ["score", "--predictions", str(pred_dir), "--n-resamples",
                                    "300", "--report", str(md_path), "--json", str(js_path)])
    assert r.exit_code == 0, r.output
    ev = json.loads(js_path.read_text())
    md = md_path.read_text()
    sec = _sections(md)
    assert ev["leaderboard_row"] in md.splitlines()
    assert sec["Leaderboard row"][1] == [c.strip() for c in ev["leaderboard_row"].strip("|").split("|")]

    macro = {row[0]: row[1:] for row in sec["Macro-AUC per dataset (recomputed)"][1:]}
    for j, ds in enumerate(("kvasir", "galar")):
        m = ev["datasets"][ds]["macro"]
        assert _close(macro["Δ vs RGB baseline"][j], m["delta"])
        for label, key in (("Δ 95% CI, percentile", "percentile_interval"),
                           ("Δ 95% CI, BCa", "bca_interval")):
            got = _ci(macro[label][j])
            assert _close(str(got[0]), m[key][0]) and _close(str(got[1]), m[key][1])
        assert _p_close(macro["Δ p (Stouffer)"][j], m["pvalues"]["stouffer"])
        assert _p_close(macro["Δ p (sign-flip)"][j], m["pvalues"]["sign_flip"])
        assert macro["sign-positive seeds"][j] == m["sign_positive_seeds"]
        assert int(macro["test frames"][j]) == ev["datasets"][ds]["n_test_frames"]

    _, row = sec["Retention"]
    ret = ev["retention"]
    assert _close(row[0], ret["value"], 3) and row[1] == ret["label"]
    for cell, key in ((row[2], "percentile_interval"), (row[3], "bca_interval")):
        lo, hi = _ci(cell)
        assert _close(str(lo), ret[key][0], 3) and _close(str(hi), ret[key][1], 3)
    assert math.isclose(ret["value"], ev["datasets"]["galar"]["macro"]["delta"]
                        / ev["datasets"]["kvasir"]["macro"]["delta"], rel_tol=1e-9)

    for ds, title in (("kvasir", "Kvasir-Capsule"), ("galar", "Galar")):
        classes = {c["class"]: c for c in ev["datasets"][ds]["per_class"]}
        assert set(classes) <= set(CLASSES) and len(classes) == 6
        deltas = sec[f"Per-class AUC deltas: {title}"]
        for cells in deltas[1:]:
            c = classes[cells[0]]
            assert int(cells[1]) == c["n_positive"]
            assert _close(cells[2], c["baseline_auc_mean"]) and _close(cells[3], c["method_auc_mean"])
            assert _close(cells[4], c["delta"]) and cells[5] == c["sign_positive_seeds"]
            for cell, key in ((cells[6], "percentile_interval"), (cells[7], "bca_interval")):
                lo, hi = _ci(cell)
                assert _close(str(lo), c[key][0]) and _close(str(hi), c[key][1])
        pv = sec[f"Per-class p-values: {title}"]
        assert pv[0][:5] == ["Class", "Stouffer z", "p Stouffer", "Bonf.", "BH"]
        for cells in pv[1:]:
            c = classes[cells[0]]
            assert _close(cells[1], c["stouffer_z"], 3)
            i = 2
            for kind in ("stouffer", "sign_flip", "bootstrap"):
                assert _p_close(cells[i], c["pvalues"][kind])
                assert _p_close(cells[i + 1], c["adjusted"][f"{kind}_bonferroni"])
                assert _p_close(cells[i + 2], c["adjusted"][f"{kind}_bh"])
                i += 3
        assert len(pv) == 7


def test_report_from_the_recomputation_itself(rec, pred_dir):
    """The JSON's numbers are the recomputation's (not a re-rounding of the text)."""
    from pipi.galkva import score_predictions
    from pipi.galkva.report import evaluation

    ev = evaluation(score_predictions(rec), rec)
    for ds in ("kvasir", "galar"):
        for c, cd in zip(ev["datasets"][ds]["per_class"], rec[ds].per_class, strict=True):
            assert c["pvalues"]["stouffer"] == cd.stouffer.pvalue
            assert c["bca_interval"] == list(cd.bootstrap.bca_interval)
        assert ev["datasets"][ds]["macro"]["bca_interval"] == \
            list(rec[ds].bootstrap.bca_interval)
    assert ev["retention"]["bca_interval"] == list(rec.retention_bootstrap.bca_interval)


def test_cli_report_self_reported_and_with_mismatches(tmp_path, pred_dir):
    sub = tmp_path / "s.json"
    sub.write_text(json.dumps(paper_example()))
    md = tmp_path / "self.md"
    r = CliRunner().invoke(galkva, ["score", str(sub), "--report", str(md)])
    assert r.exit_code == 0, r.output
    text = md.read_text()
    assert "self-reported" in text and "need `pipi galkva score --predictions`" in text
    sec = _sections(text)
    assert sec["Retention"][1][1] == "Null"
    # a submission whose numbers the predictions do not reproduce: exit 1, report written
    md2, js2 = tmp_path / "mm.md", tmp_path / "mm.json"
    r = CliRunner().invoke(galkva, ["score", str(sub), "--predictions", str(pred_dir),
                                    "--n-resamples", "100", "--report", str(md2),
                                    "--json", str(js2)])
    assert r.exit_code == 1, r.output
    ev = json.loads(js2.read_text())
    sec2 = _sections(md2.read_text())
    rows = next(v for k, v in sec2.items() if k.startswith("Self-reported numbers"))
    assert {row[0].strip("`") for row in rows[1:]} == {d["path"] for d in ev["discrepancies"]}
    assert "Per-class p-values: Galar" in sec2


def test_cli_report_unwritable_path_is_one_clear_error(tmp_path, pred_dir):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = CliRunner().invoke(galkva, ["score", "--predictions", str(pred_dir), "--n-resamples",
                                    "100", "--report", str(blocker / "r.md")])
    assert r.exit_code == 2 and "cannot write" in r.output
    assert not list(tmp_path.glob("**/.r.md.*"))
