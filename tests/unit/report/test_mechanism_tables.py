"""`robustness` and `transplant` (+ Grad-CAM) on smoke runs of cells a and pi, two seeds, and
their aggregate tables (issue 13)."""

from __future__ import annotations

import numpy as np
import pytest

from pipi.errors import ConfigError
from pipi.runs.runsets import SourceRun, looks_like_filter
from pipi.workflows.transplant import pair_runs


def _src(cell, seed, backbone="efficientnet_b0", rid=None):
    return SourceRun(rid or f"{cell}{seed}{backbone}", cell, backbone, seed, "d", "")


# --------------------------------------------------------------------------- fast
def test_runs_spec_and_pairing():
    assert looks_like_filter("tags.`pipi.cell` = 'a'")
    assert looks_like_filter("tags.`pipi.seed` = '42' and tags.`pipi.entry_point` = 'train'")
    assert not looks_like_filter("0123abc,4567def")
    pairs, notes = pair_runs([_src("a", 1), _src("a", 2), _src("a", 3)],
                             [_src("pi", 2), _src("pi", 1), _src("pi", 1, "resnet18")])
    assert [(a.seed, b.seed) for a, b in pairs] == [(1, 1), (2, 2)]
    assert len(notes) == 2 and any("seed 3" in n for n in notes)
    with pytest.raises(ConfigError, match="rgb: run .* is a pi run"):
        pair_runs([_src("pi", 1)], [_src("pi", 1)])
    with pytest.raises(ConfigError, match="share no"):
        pair_runs([_src("a", 1)], [_src("pi", 2)])
    with pytest.raises(ConfigError, match="several runs"):
        pair_runs([_src("a", 1, rid="x"), _src("a", 1, rid="y")], [_src("pi", 1)])


def test_robustness_table_lift_matches_sklearn(tmp_path):
    """The table's lift is the per-seed difference of sklearn macro-AUCs; the evaluation arms
    stay out of the headline figure and calibration table."""
    from fakes import local_runs
    from sklearn.metrics import roc_auc_score

    from pipi import analysis
    from pipi.report import build_report

    arms = {c: [1, 2] for c in ("a", "pi", "a@perturb_none", "pi@perturb_none",
                                "a@perturb_jpeg25", "pi@perturb_jpeg25")}
    runs, dirs = local_runs(tmp_path, arms)
    kept, excluded = analysis.select_runs(runs)
    ev = analysis.build_evidence(kept, dirs, excluded=excluded)
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=50))
    t = rep.table("robustness")
    assert t.ok and list(t.data["perturbation"]) == ["none", "jpeg25"]

    def macro(cell, seed):
        arm = ev.arm("efficientnet_b0", cell)
        p = arm.probs[arm.index(seed)]
        return np.mean([roc_auc_score(ev.labels == k, p[:, k]) for k in ev.classes])

    for row, ids in zip(t.data.to_dict("records"), t.run_ids):
        a, pi = f"a@perturb_{row['perturbation']}", f"pi@perturb_{row['perturbation']}"
        lifts = [macro(pi, s) - macro(a, s) for s in (1, 2)]
        assert row["lift_mean"] == pytest.approx(np.mean(lifts), abs=1e-9)
        assert row["lift_sd"] == pytest.approx(np.std(lifts, ddof=1), abs=1e-9)
        assert len(row["delong_z"]) == 2 and set(ids) == {a, pi}
    assert "robustness_lift" in rep.figures
    assert "@perturb" not in "".join(rep.figure_runs["eight_cell"])
    assert not any("@perturb" in c for c in rep.table("calibration").data["cell"])
    assert not rep.table("transplant").ok and not rep.table("gradcam").ok


@pytest.mark.parametrize("pi_quality", [1.6, 0.8])
def test_transplant_reconstruction_against_sklearn_and_undefined_without_a_lift(
        tmp_path, monkeypatch, pi_quality):
    """reconstruction = mean Δ(transplant - a) / mean (pi - a), from sklearn AUCs; with pi no
    better than a there is no lift to reconstruct and the share is undefined, not +2249%."""
    import fakes as agg_tests
    from sklearn.metrics import roc_auc_score

    from pipi import analysis
    from pipi.report import build_report

    monkeypatch.setitem(agg_tests.QUALITY, "pi", pi_quality)
    monkeypatch.setitem(agg_tests.QUALITY, "a@transplant_D", 1.3)
    runs, dirs = agg_tests.local_runs(tmp_path, {c: [1, 2] for c in ("a", "pi", "a@transplant_D")})
    kept, excluded = analysis.select_runs(runs)
    ev = analysis.build_evidence(kept, dirs, excluded=excluded)
    # the transplant table only: no figures drawn (the robustness test above checks those)
    t = build_report(ev, analysis.AggregateOptions(n_resamples=50, figures=False)).table(
        "transplant")
    assert t.ok and list(t.data["transplant"]) == ["D"]
    row, shown = t.data.iloc[0], t.display.iloc[0]

    def macro(cell, seed):
        arm = ev.arm("efficientnet_b0", cell)
        p = arm.probs[arm.index(seed)]
        return np.mean([roc_auc_score(ev.labels == k, p[:, k]) for k in ev.classes])

    delta = np.mean([macro("a@transplant_D", s) - macro("a", s) for s in (1, 2)])
    lift = np.mean([macro("pi", s) - macro("a", s) for s in (1, 2)])
    assert row["delta_mean"] == pytest.approx(delta, abs=1e-9)
    assert row["headline_lift"] == pytest.approx(lift, abs=1e-9)
    if lift > 0:
        assert row["reconstruction"] == pytest.approx(delta / lift, rel=1e-9)
        assert shown["reconstruction"] == f"{delta / lift:+.0%}"
    else:
        assert np.isnan(row["reconstruction"])
        assert shown["reconstruction"] == "n/a (no lift: pi - a <= 0)"


# --------------------------------------------------------------------------- smoke runs
