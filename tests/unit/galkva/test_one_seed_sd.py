"""The sd of one seed is null in JSON and n/a in tables, never 0.000 (issue 31)."""

from __future__ import annotations

import json

import pytest
from fakes import make_prediction_dir

from pipi.galkva import (
    MethodInfo,
    Submitter,
    build_submission,
    load_prediction_dir,
    recompute,
    score_predictions,
    score_submission,
)
from pipi.galkva.report import evaluation, markdown_report
from pipi.report.tables import fmt_mean_sd


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    d = make_prediction_dir(tmp_path_factory.mktemp("one-seed"), seeds=("1",))
    return recompute(load_prediction_dir(d), n_resamples=100, rng=0)


def _sd_cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")][3:5]  # the two macro-AUC cells


def test_one_seed_recomputed_sd_is_null_and_na(one_seed):
    score = score_predictions(one_seed)
    assert score.kvasir.macro_auc_sd is None and score.galar.macro_auc_sd is None
    for cell in _sd_cells(score.markdown_row()):
        assert cell.endswith("± n/a"), cell
    assert "± 0.000" not in score.report() and "± n/a" in score.report()
    ev = json.loads(json.dumps(evaluation(score, one_seed)))
    for ds in ("kvasir", "galar"):
        assert ev["summary"][ds]["macro_auc_sd"] is None
        assert ev["datasets"][ds]["macro"]["method_sd"] is None
        assert ev["datasets"][ds]["macro"]["baseline_sd"] is None
    md = markdown_report(score, one_seed)
    assert "± 0.0000" not in md and "± n/a" in md


def test_one_seed_submission_scores_sd_as_na(one_seed):
    doc = build_submission(one_seed, submitter=Submitter(name="A", affiliation="B",
                                                          email="a@b.org"),
                           method=MethodInfo(name="pi", description="five-channel input fusion"))
    # the released schema requires a number here; n_seeds and per_seed_values say it is one
    assert doc["n_seeds"] == 1 and doc["results"]["kvasir"]["macro_auc"]["sd"] == 0.0
    assert doc["provenance"]["kvasir"]["baseline_macro_auc"]["sd"] is None
    for score in (score_submission(doc), score_predictions(one_seed, submission=doc)):
        assert score.kvasir.macro_auc_sd is None, score.source
        assert not score.discrepancies, score.discrepancies
        for cell in _sd_cells(score.markdown_row()):
            assert cell.endswith("± n/a"), cell


def test_two_seeds_keep_their_sd(tmp_path):
    import numpy as np

    rec = recompute(load_prediction_dir(make_prediction_dir(tmp_path)), n_resamples=100, rng=0)
    score = score_predictions(rec)
    assert score.kvasir.macro_auc_sd == pytest.approx(float(np.std(rec.kvasir.method_macro,
                                                                   ddof=1)))


def test_aggregate_tables_show_na_for_one_seed():
    assert fmt_mean_sd(0.76, float("nan")) == "0.760 ± n/a"
    assert fmt_mean_sd(0.76, 0.0271) == "0.760 ± 0.027"
