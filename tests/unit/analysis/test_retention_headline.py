"""Two Kvasir numbers for the same runs (issue 19 §1): the GalKva v1.0 6-class scoring set
(the leaderboard's retention) and the paper's headline over every evaluable class (what its
reference entries divide by), both shown and labelled; checked against scikit-learn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from fakes import GALKVA, KVASIR_CLASSES, evidence, make_prediction_dir, study  # noqa: F401  (study: the module fixture)
from sklearn.metrics import roc_auc_score
from test_retention import brute_deltas

from pipi import analysis
from pipi.analysis.retention import ALL_SYSTEMS
from pipi.classes import CLASSES
from pipi.cli.galkva import galkva
from pipi.galkva import load_prediction_dir, recompute, score_predictions
from pipi.report import build_report
from pipi.report.retention import HEADLINE_COL


def test_table_shows_the_headline_kvasir_retention_beside_the_leaderboard_one(study):  # noqa: F811
    ev, cv, _ = evidence(study)
    rep = build_report(replace(ev, cross_vendor=cv),
                       analysis.AggregateOptions(n_resamples=50, figures=False))
    t = rep.table("cross_vendor")
    row = t.data[(t.data["class_set"] == "galkva") & (t.data["capsule_system"] == ALL_SYSTEMS)].iloc[0]
    dk_head = brute_deltas(study, "kvasir", KVASIR_CLASSES, restrict=False).mean()
    dk_galkva = brute_deltas(study, "kvasir", GALKVA, restrict=True).mean()
    dg = brute_deltas(study, "galar", GALKVA, restrict=True).mean()
    assert row["kvasir_delta"] == pytest.approx(dk_galkva)          # the leaderboard's
    assert row["kvasir_headline_delta"] == pytest.approx(dk_head)   # the paper's headline
    assert row["retention"] == pytest.approx(dg / dk_galkva)
    assert row["retention_headline_kvasir"] == pytest.approx(dg / dk_head)
    assert abs(dk_head - dk_galkva) > 1e-4  # really two numbers for the same runs
    shown = t.display.iloc[t.data.index.get_loc(row.name)][HEADLINE_COL]
    assert shown.startswith(f"{dg / dk_head:+.2f}")
    assert any("leaderboard" in n and "headline" in n for n in t.notes)


def _sk_macro(y, p, classes):
    return float(np.mean([roc_auc_score(y == c, p[:, c]) for c in classes]))


def test_galkva_score_prints_both_kvasir_numbers(tmp_path):
    d = make_prediction_dir(tmp_path / "p")
    runs = load_prediction_dir(d)
    rec = recompute(runs, n_resamples=100, rng=0)
    h = rec.kvasir_headline
    y = runs["kvasir"].baseline[0].predictions["label"].to_numpy()
    present = sorted(set(y.tolist()))
    assert h.classes == tuple(CLASSES[c] for c in present) and len(present) == 7
    want = []
    for b, m in zip(runs["kvasir"].baseline, runs["kvasir"].method):
        cols = [f"prob_{k:02d}" for k in range(len(CLASSES))]
        want.append(_sk_macro(y, m.predictions[cols].to_numpy(), present)
                    - _sk_macro(y, b.predictions[cols].to_numpy(), present))
    assert h.delta == pytest.approx(np.mean(want))
    text = score_predictions(rec).report()
    assert "paper's headline (7 evaluable classes" in text and f"Δ {h.delta:+.4f}" in text
    r = CliRunner().invoke(galkva, ["score", "--predictions", str(d), "--n-resamples", "100"])
    assert r.exit_code == 0 and "leaderboard uses the retention above" in r.output
