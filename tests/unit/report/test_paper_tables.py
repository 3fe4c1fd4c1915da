"""Issue 20: the paper's tables and intervals in `aggregate`'s report, on generated
predictions (no training, no server)."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import B0, CNX, evidence_of, make_runs, paper_evidence
from scipy import stats

from pipi import analysis
from pipi.report import build_report

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_paper_tables")

SEEDS = [41, 42, 43, 44, 45, 47]


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("six")
    runs, dirs = make_runs(tmp, {"a": SEEDS, "pi": SEEDS, "distill": SEEDS})
    ev = evidence_of(runs, dirs)
    opts = analysis.AggregateOptions(n_resamples=200, figures=False)
    return ev, opts, build_report(ev, opts)


def test_seed_bca_column_beside_the_video_one_equals_scipy(six):
    ev, opts, rep = six
    t = rep.table("per_frame")
    assert {"95% BCa CI (videos)", "95% BCa CI (seeds)"} <= set(t.display.columns)
    row = t.data.set_index("cell").loc["pi"]
    assert row["seed_ci_unit"] == "seeds" and row["seed_ci_n_seeds"] == 6
    deltas = ev.arm(B0, "pi").macro - ev.arm(B0, "a").macro
    ref = stats.bootstrap((deltas,), np.mean, n_resamples=opts.n_resamples, method="BCa",
                          rng=np.random.default_rng(opts.seed))
    assert abs(row["seed_ci_bca_low"] - ref.confidence_interval.low) < 1e-9
    assert abs(row["seed_ci_bca_high"] - ref.confidence_interval.high) < 1e-9
    assert any(n.startswith("BCa CI (seeds)") for n in t.notes)


@pytest.mark.parametrize("key", ["paired_tests", "cross_backbone"])
def test_every_cross_seed_delta_table_has_both_labelled_intervals(six, key):
    _, _, rep = six
    t = rep.table(key)
    assert {"95% BCa CI (videos)", "95% BCa CI (seeds)"} <= set(t.display.columns)
    key_col = "mean_delta" if key == "paired_tests" else "delta"
    have = t.data[t.data[key_col].notna()]
    assert len(have) and have["seed_ci_bca_low"].notna().all()
    assert t.data.loc[t.data[key_col].isna(), "seed_ci_bca_low"].isna().all()


def test_per_class_seed_bca_column_equals_scipy_class_by_class(six):
    """The per-class table's seed-level interval: scipy's BCa over the six per-seed deltas of
    that class's AUC (from sklearn), for every headline class."""
    from sklearn.metrics import roc_auc_score

    from pipi.classes import CLASSES

    ev, opts, rep = six
    t = rep.table("per_class_per_frame")
    assert {"95% BCa CI (videos)", "95% BCa CI (seeds)"} <= set(t.display.columns)
    assert any("of the class's AUC" in n for n in t.notes)
    a, pi = ev.arm(B0, "a"), ev.arm(B0, "pi")
    for _, row in t.data.iterrows():
        k = CLASSES.index(row["class"])
        deltas = np.array([roc_auc_score(ev.labels == k, pi.probs[i][:, k].astype(float))
                           - roc_auc_score(ev.labels == k, a.probs[i][:, k].astype(float))
                           for i in range(len(SEEDS))])
        ref = stats.bootstrap((deltas,), np.mean, n_resamples=opts.n_resamples, method="BCa",
                              rng=np.random.default_rng(opts.seed))
        assert row["seed_ci_n_seeds"] == 6 and row["seed_ci_unit"] == "seeds"
        assert abs(row["seed_ci_bca_low"] - ref.confidence_interval.low) < 1e-9, row["class"]
        assert abs(row["seed_ci_bca_high"] - ref.confidence_interval.high) < 1e-9


def _scipy_pct(deltas, opts):
    return stats.bootstrap((deltas,), np.mean, n_resamples=opts.n_resamples,
                           confidence_level=opts.confidence_level, method="percentile",
                           rng=np.random.default_rng(opts.seed)).confidence_interval


@pytest.mark.parametrize("key", ["per_frame", "paired_tests", "cross_backbone"])
def test_seed_percentile_column_beside_the_seed_bca_equals_scipy(six, key):
    """Issue 28: the seed-level percentile interval (the paper's "[-0.005, +0.032]") is
    scipy.stats.bootstrap(method="percentile") over the per-seed deltas, same resamples."""
    ev, opts, rep = six
    t = rep.table(key)
    cols = list(t.display.columns)
    assert cols.index("95% percentile CI (seeds)") == cols.index("95% BCa CI (seeds)") + 1
    data = t.data
    col = {"per_frame": "cell", "cross_backbone": "backbone"}.get(key)
    i = 0 if col is None else list(data[col]).index("pi" if key == "per_frame" else B0)
    row = data.iloc[i]
    new = "pi" if key != "paired_tests" else row["new"]
    ref = "a" if key != "paired_tests" else row["reference"]
    deltas = ev.arm(B0, new).macro - ev.arm(B0, ref).macro
    want = _scipy_pct(deltas, opts)
    assert abs(row["seed_ci_percentile_low"] - want.low) < 1e-12
    assert abs(row["seed_ci_percentile_high"] - want.high) < 1e-12
    assert row["seed_ci_percentile_low"] != row["seed_ci_bca_low"]
    assert t.display.iloc[i]["95% percentile CI (seeds)"] == f"[{want.low:+.3f}, {want.high:+.3f}]"
    assert any("percentile CI (seeds)" in n for n in t.notes)


def test_per_class_seed_percentile_column_equals_scipy(six):
    from sklearn.metrics import roc_auc_score

    from pipi.classes import CLASSES

    ev, opts, rep = six
    t = rep.table("per_class_per_frame")
    assert "95% percentile CI (seeds)" in t.display.columns
    a, pi = ev.arm(B0, "a"), ev.arm(B0, "pi")
    for _, row in t.data.iterrows():
        k = CLASSES.index(row["class"])
        deltas = np.array([roc_auc_score(ev.labels == k, pi.probs[i][:, k].astype(float))
                           - roc_auc_score(ev.labels == k, a.probs[i][:, k].astype(float))
                           for i in range(len(SEEDS))])
        want = _scipy_pct(deltas, opts)
        assert abs(row["seed_ci_percentile_low"] - want.low) < 1e-9, row["class"]
        assert abs(row["seed_ci_percentile_high"] - want.high) < 1e-9, row["class"]


# --------------------------------------------------------------------------- 4: figures, per class


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    ev = paper_evidence(tmp_path_factory.mktemp("paper"))
    return ev, build_report(ev, analysis.AggregateOptions(n_resamples=100))


def test_focal_pr_curves_are_the_papers_four_with_erosion(paper):
    _, rep = paper
    assert list(rep.curves["focal_pr"]) == ["Lymphangiectasia", "Blood - fresh", "Angiectasia",
                                            "Erosion"]
    assert "pr_focal" in rep.figures


def test_channel_ablation_for_every_backbone_with_runs(paper):
    ev, rep = paper
    keys = [t.key for t in rep.tables]
    assert {"channel_train", "channel_infer", f"channel_train_{CNX}"} <= set(keys)
    assert f"channel_infer_{CNX}" not in keys  # no pi@zero_* runs of ConvNeXt-Tiny
    t = rep.table(f"channel_train_{CNX}").data
    t = t[t["reference"] == "pi"].set_index("arm")
    a, pb = ev.arm(CNX, "pi"), ev.arm(CNX, "pblood_only")
    assert t.loc["pblood_only", "delta"] == pytest.approx(np.mean(pb.macro - a.macro), abs=1e-12)


#: The paper's five paired tests of the training-time channel ablation, as (reference, new).
FIVE = [("pi", "a"), ("pi", "pblood_only"), ("pi", "phi_only"), ("a", "pblood_only"),
        ("a", "phi_only")]


def _bh_by_hand(ps):
    """Benjamini-Hochberg step-up adjusted p-values, written out (no library)."""
    ps = np.asarray(ps, float)
    m = len(ps)
    order = np.argsort(ps)
    adj = np.empty(m)
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, ps[i] * m / rank)
        adj[i] = running
    return adj


def test_channel_train_bh_family_is_the_papers_five_paired_tests(paper):
    """Issue 28: BH over the five paired tests of tab:channel-ablation-train (full - RGB,
    P_blood-only - RGB, Phi-only - RGB, full - P_blood-only, full - Phi-only), each Wilcoxon p
    from scipy on the per-seed macro-AUCs, adjusted by hand and by scipy; printed under the
    table."""
    ev, rep = paper
    t = rep.table("channel_train")
    got = t.data[t.data["reference"] != ""].set_index(["reference", "arm"])
    assert sorted(got.index) == sorted(FIVE)
    macro = {c: ev.arm(B0, c).macro for c in ("a", "pi", "pblood_only", "phi_only")}
    raw = [stats.wilcoxon(macro[n] - macro[r]).pvalue for r, n in FIVE]
    want = _bh_by_hand(raw)
    np.testing.assert_allclose(want, stats.false_discovery_control(raw, method="bh"),
                               atol=1e-12)
    for (r, n), p, bh in zip(FIVE, raw, want, strict=True):
        assert got.loc[(r, n), "wilcoxon_p"] == pytest.approx(p, abs=1e-12)
        assert got.loc[(r, n), "wilcoxon_p_bh"] == pytest.approx(bh, abs=1e-12)
    fam = [x for x in t.notes if x.startswith("BH family (5 paired tests")]
    assert len(fam) == 1 and "P_blood-only (Phi zeroed) - (a) RGB-only" in fam[0]


def test_the_papers_bh_of_a_six_of_six_wilcoxon_over_five_tests():
    """The paper's p_BH = 0.156 for P_blood-only vs full (Wilcoxon 0.031, 6/6 seeds): the
    smallest of five p-values, times 5; the same rule as the table's."""
    from pipi.stats import adjust_pvalues

    p66 = stats.wilcoxon([0.012, 0.049, 0.004, 0.012, 0.002, 0.006]).pvalue
    assert p66 == pytest.approx(0.03125)
    ps = [p66, 0.44, 1.0, 0.69, 0.84]
    assert adjust_pvalues(np.array(ps), method="bh")[0] == pytest.approx(0.15625)


def test_channel_family_vs_pi_keeps_the_three_comparisons_with_full_pi(paper):
    ev, _ = paper
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=50, figures=False,
                                                     channel_family="vs_pi"))
    t = rep.table("channel_train")
    assert sorted(t.data.loc[t.data["reference"] != "", "reference"]) == ["pi"] * 3
    assert any(x.startswith("BH family (3 paired tests") for x in t.notes)


def _ece_brute(y, p, bins=15):
    """ECE by looping over frames and bins (independent of pipi.stats)."""
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i in range(len(p)) if lo <= p[i] < hi or (b == bins - 1 and p[i] == 1.0)]
        if idx:
            total += len(idx) / len(p) * abs(np.mean(y[idx]) - np.mean(p[idx]))
    return total


def test_per_class_ece_and_brier_a_vs_pi_match_brute_force_and_sklearn(paper):
    from sklearn.metrics import brier_score_loss

    from pipi.classes import CLASSES
    ev, rep = paper
    t = rep.table("calibration_per_class")
    assert len(t.data) == len(ev.classes)
    row = t.data.iloc[2]
    k = CLASSES.index(row["class"])
    y = (ev.labels == k).astype(float)
    for cell, col in (("a", "a"), ("pi", "pi")):
        arm = ev.arm(B0, cell)
        ece = [_ece_brute(y, p[:, k].astype(float)) for p in arm.probs]
        brier = [brier_score_loss(y, p[:, k].astype(float)) for p in arm.probs]
        assert row[f"ece_{col}_mean"] == pytest.approx(np.mean(ece), abs=1e-9)
        assert row[f"ece_{col}_sd"] == pytest.approx(np.std(ece, ddof=1), abs=1e-9)
        assert row[f"brier_{col}_mean"] == pytest.approx(np.mean(brier), abs=1e-9)


def test_mechanism_transplant_and_example_figures(paper):
    ev, rep = paper
    assert {"mechanism_localization", "transplant_reconstruction", "prior_examples",
            "gradcam_examples"} <= set(rep.figures)
    assert rep.figures["prior_examples"] == ev.images["g" * 32]["gradcam/prior.png"]
    assert "g" * 32 in rep.captions["gradcam_examples"]
    for name in ("mechanism_localization", "transplant_reconstruction"):
        assert rep.figures[name][:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- 2: deployment
def test_deployment_options_table(paper):
    ev, rep = paper
    t = rep.table("deployment_options")
    d = t.data.set_index("arm")
    assert list(d.index) == ["a", "pi", "distill", "pi@zero_both"]
    a, pi, zb = (ev.arm(B0, c) for c in ("a", "pi", "pi@zero_both"))
    for arm, cell in (("pi", pi), ("distill", ev.arm(B0, "distill"))):
        assert d.loc[arm, "mean"] == pytest.approx(cell.macro.mean(), abs=1e-12)
    want = np.mean(zb.macro - a.macro) / np.mean(pi.macro - a.macro)
    row = d.loc["pi@zero_both"]
    assert row["retention"] == pytest.approx(want, abs=1e-12)
    assert row["retention_ci_videos_low"] <= want <= row["retention_ci_videos_high"]
    assert row["retention_ci_unit"] == "videos"
    # the seed-level retention interval equals scipy's BCa from the same bootstrap distribution
    num, den = zb.macro - a.macro, pi.macro - a.macro
    from pipi.report.deployment import _seed_retention
    ours = _seed_retention(rep_an(ev), num, den, [])
    prev = stats._resampling.BootstrapResult(
        confidence_interval=None, bootstrap_distribution=ours.bootstrap_distribution,
        standard_error=None)
    ref = stats.bootstrap((num, den), lambda x, y: np.mean(x) / np.mean(y), paired=True,
                          vectorized=False, n_resamples=0, bootstrap_result=prev, method="BCa")
    assert abs(ours.bca_interval.low - ref.confidence_interval.low) < 1e-9
    assert abs(ours.bca_interval.high - ref.confidence_interval.high) < 1e-9
    assert row["retention_ci_seeds_low"] == pytest.approx(ours.bca_interval.low, abs=1e-12)
    # costs from the cell table; the served recipe is named
    assert (d.loc["pi", "infer_channels"], d.loc["pi", "infer_prior"]) == (5, True)
    assert (d.loc["pi@zero_both", "infer_channels"], d.loc["pi@zero_both", "infer_prior"]) == \
        (3, False)
    assert d.loc["distill", "train_prior"] and d.loc["distill", "infer_channels"] == 3
    assert '"strip_prior": true' in row["served_as"]
    assert any('"strip_prior": true' in r for r in t.display["recipe"])


def rep_an(ev):
    return analysis.Analysis(ev, analysis.AggregateOptions(n_resamples=100))


def test_strip_and_serve_never_computes_the_prior(monkeypatch):
    import torch

    from pipi.config import make_config
    from pipi.serving import frame_model as training  # FrameInputs' home (serving code)

    fi = training.FrameInputs(make_config(cell="pi", profile="smoke"))
    x01 = torch.rand(2, 3, 32, 32)
    full, _ = fi(x01, train=False)

    def boom(*a, **k):
        raise AssertionError("prior computed under strip_prior")

    monkeypatch.setattr(training, "prior_channels", boom)
    stripped, _ = fi(x01, train=False, strip_prior=True)
    assert stripped.shape == full.shape == (2, 5, 32, 32)
    assert torch.equal(stripped[:, :3], full[:, :3])
    assert not stripped[:, 3:].any()


# --------------------------------------------------------------------------- the HTML report


def test_paired_tests_macro_z_in_the_published_codes_form_beside_pipis(six):
    """Issue 28: the paired-test table's macro z in the authors' form (per-class DeLong z from
    the pairwise kernel, Stouffer over seeds, then over classes), beside pipi's covariance
    form, each labelled."""
    from brute import kernel_delong_z

    from pipi.analysis import CLASS_STOUFFER_LABEL, STOUFFER_LABEL

    ev, _, rep = six
    t = rep.table("paired_tests")
    assert {CLASS_STOUFFER_LABEL, f"{STOUFFER_LABEL} z"} <= set(t.display.columns)
    row = t.data.iloc[0]
    ra, na = ev.arm(B0, row["reference"]), ev.arm(B0, row["new"])
    z = np.array([[kernel_delong_z(ev.labels == k, ra.probs[i][:, k].astype(float),
                                   na.probs[i][:, k].astype(float)) for k in ev.classes]
                  for i in range(len(SEEDS))])
    want = (z.sum(0) / np.sqrt(len(SEEDS))).sum() / np.sqrt(len(ev.classes))
    assert row["class_stouffer_z"] == pytest.approx(want, rel=1e-7)
    assert row["class_stouffer_p"] == pytest.approx(2 * stats.norm.sf(abs(want)), rel=1e-6)
    assert row["class_stouffer_z"] != pytest.approx(row["stouffer_z"], rel=1e-3)
    assert any(n.startswith("Macro z, two forms") for n in t.notes)


def test_per_class_distillation_vs_rgb_table(six):
    """Issue 28: per-class AUC of distill vs (a) (the paper's Reduced Mucosal View +0.069):
    AUCs from sklearn, the per-class p from a kernel DeLong combined over seeds by Stouffer,
    Bonferroni over the classes by hand."""
    from brute import kernel_delong_z
    from sklearn.metrics import roc_auc_score

    from pipi.classes import CLASSES

    ev, _, rep = six
    t = rep.table("per_class_distill")
    assert t.ok and t.paper == "sec:distill-results" and len(t.data) == len(ev.classes)
    assert any("Reduced Mucosal View (+0.069" in n for n in t.notes)
    a, d = ev.arm(B0, "a"), ev.arm(B0, "distill")
    n_cls = len(ev.classes)
    for _, row in t.data.iterrows():
        k = CLASSES.index(row["class"])
        y = ev.labels == k
        auc_a = [roc_auc_score(y, p[:, k].astype(float)) for p in a.probs]
        auc_d = [roc_auc_score(y, p[:, k].astype(float)) for p in d.probs]
        assert row["ref_mean"] == pytest.approx(np.mean(auc_a), abs=1e-9)
        assert row["new_mean"] == pytest.approx(np.mean(auc_d), abs=1e-9)
        assert row["delta"] == pytest.approx(np.mean(auc_d) - np.mean(auc_a), abs=1e-9)
        z = [kernel_delong_z(y, pa[:, k].astype(float), pd_[:, k].astype(float))
             for pa, pd_ in zip(a.probs, d.probs, strict=True)]
        p = 2 * stats.norm.sf(abs(sum(z) / np.sqrt(len(z))))
        assert row["p"] == pytest.approx(p, rel=1e-6, abs=1e-300)
        assert row["p_bonferroni"] == pytest.approx(min(1.0, p * n_cls), rel=1e-6, abs=1e-300)


def test_per_class_distillation_lift_figure(paper):
    _, rep = paper
    assert rep.figures["per_class_lift_distill"][:8] == b"\x89PNG\r\n\x1a\n"


def test_probe_rows_seed_percentile_equals_scipy(tmp_path):
    """The foundation-probe rows of the per-frame table carry the seed-level percentile
    interval too (scipy's percentile bootstrap of probe - (a) per seed)."""
    import pandas as pd

    runs, dirs = make_runs(tmp_path / "b0", {"a": SEEDS, "pi": SEEDS})
    pr, pdirs = make_runs(tmp_path / "dino", {"probe": SEEDS}, start=7)
    pr["backbone"] = "dinov2_vitb14"
    pr["recipe"] = pr["recipe"].str.replace(B0, "dinov2_vitb14")
    ev = evidence_of(pd.concat([runs, pr], ignore_index=True), {**dirs, **pdirs})
    opts = analysis.AggregateOptions(n_resamples=200, figures=False)
    t = build_report(ev, opts).table("per_frame")
    i = list(t.data["cell"]).index("probe")
    row = t.data.iloc[i]
    deltas = ev.arm("dinov2_vitb14", "probe").macro - ev.arm(B0, "a").macro
    want = _scipy_pct(deltas, opts)
    assert row["vs_a_seed_ci_percentile_low"] == pytest.approx(want.low, abs=1e-12)
    assert row["vs_a_seed_ci_percentile_high"] == pytest.approx(want.high, abs=1e-12)
    assert t.display.iloc[i]["95% percentile CI (seeds)"] == f"[{want.low:+.3f}, {want.high:+.3f}]"


def test_the_eight_cell_figure_annotates_the_summary_c1_cells_against_b():
    """Issue 42 item 4: the paper's figure labels c, c' and c'' against (b) ("flat" / -0.019,
    the RGB+C2 model their C1 channel is added to) and every other bar against (a). Means of
    the paper's eight-cell table: a 0.7598, b 0.7788, c 0.7774, c' 0.7787, c'' 0.7596,
    e+ 0.8038; its text: c, c', c'' at -0.001, +0.001 (the table's means give -0.000),
    -0.019 against (b), e+ at +0.044 against (a)."""
    import numpy as np

    from pipi.report.figures import SUMMARY_C1_CELLS, bar_deltas

    cells = ["a", "b", "c", "c_prime", "c_dprime", "e_plus"]
    means = np.array([0.7598, 0.7788, 0.7774, 0.7787, 0.7596, 0.8038])
    got = bar_deltas(cells, means, "a", {c: "b" for c in SUMMARY_C1_CELLS})
    assert {k: f"{v:+.3f}" for k, v in got.items()} == {
        1: "+0.019", 2: "-0.001", 3: "-0.000", 4: "-0.019", 5: "+0.044"}
    # pipi's old labels were all against (a): c read +0.018 where the paper reads -0.001
    assert f"{means[2] - means[0]:+.3f}" == "+0.018"
    # without (b) in the figure, every bar is against (a)
    assert bar_deltas(["a", "c"], means[[0, 2]], "a", {"c": "b"}) == pytest.approx({1: 0.0176})


def test_the_report_draws_the_eight_cell_bars_with_the_papers_references(tmp_path,
                                                                        monkeypatch):
    """The eight-cell figure of a report on runs of every ablation cell: the bars of c, c'
    and c'' are labelled against (b), the others against (a), and the caption says so."""
    from fakes import evidence_of

    from pipi import analysis
    from pipi.report import build_report, figures

    seen = {}
    real = figures.cell_bars

    def spy(cells, labels, per_seed, seeds, **kw):
        if "ablation" in kw.get("title", "").lower():
            means = np.array([v.mean() for v in per_seed])
            seen["labels"] = {cells[i]: d for i, d in figures.bar_deltas(
                cells, means, kw.get("reference", "a"), kw.get("references")).items()}
            seen["means"] = dict(zip(cells, means))
        return real(cells, labels, per_seed, seeds, **kw)

    monkeypatch.setattr(figures, "cell_bars", spy)
    cells = ("a", "b", "c", "c_prime", "c_dprime", "e_plus")
    runs, dirs = make_runs(tmp_path, {c: (41, 42) for c in cells})
    rep = build_report(evidence_of(runs, dirs), analysis.AggregateOptions(n_resamples=20))
    m, got = seen["means"], seen["labels"]
    for c in ("c", "c_prime", "c_dprime"):
        assert got[c] == pytest.approx(m[c] - m["b"])
    for c in ("b", "e_plus"):
        assert got[c] == pytest.approx(m[c] - m["a"])
    assert "a" not in got
    assert "for c, c' and c'' against cell (b)" in rep.captions["eight_cell"]
