"""GalKva-2026: schema validation, scoring, recomputation from predictions, submissions, CLI."""

from __future__ import annotations

import copy
import doctest
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from fakes import make_prediction_dir, paper_example
from jsonschema import Draft7Validator

import pipi.galkva.score as galkva_score
from pipi.classes import CLASSES, class_index
from pipi.errors import DataError
from pipi.galkva import (
    LEADERBOARD_HEADER,
    SCORING_SETS,
    InvalidSubmissionError,
    MethodInfo,
    Submitter,
    build_submission,
    check_submission,
    classify_retention,
    load_prediction_dir,
    recompute,
    retention_band,
    score_predictions,
    score_submission,
    submission_schema,
    validate_submission,
    write_submission,
)
from pipi.stats import ConfidenceInterval, macro_auc

SCORING = SCORING_SETS["v1.0"]


# --------------------------------------------------------------------------- schema
def test_schema_is_draft07_package_data():
    schema = submission_schema()
    Draft7Validator.check_schema(schema)
    assert schema["$schema"].startswith("http://json-schema.org/draft-07")
    assert set(schema["required"]) == {"submitter", "method", "benchmark_version", "results"}
    entry = schema["$defs"]["dataset_results"]["properties"]["per_class_auc"]
    assert "required" not in entry["additionalProperties"]  # n_positive is optional


def test_valid_submission_has_no_violations(tmp_path):
    assert validate_submission(paper_example()) == []
    p = tmp_path / "s.json"
    p.write_text(json.dumps(paper_example()))
    assert validate_submission(p) == []


def _broken(edit) -> list:
    """Errors (released schema) and pipi's warnings of the edited example."""
    doc = paper_example()
    edit(doc)
    return validate_submission(doc) + check_submission(doc, scoring_sets=SCORING_SETS)


@pytest.mark.parametrize("edit, path, fix", [
    (lambda d: d["submitter"].pop("email"), "$.submitter.email", "add 'email'"),
    (lambda d: d.update(benchmark_version="1.0"), "$.benchmark_version", '"v1.0"'),
    (lambda d: d["submitter"].update(email="lab x"), "$.submitter.email", "e-mail"),
    (lambda d: d["results"]["galar"].update(sign_positive_seeds="4 of 6"),
     "$.results.galar.sign_positive_seeds", '"4/6"'),
    (lambda d: d["results"]["kvasir"].update(macro_AUC=d["results"]["kvasir"].pop("macro_auc")),
     "$.results.kvasir.macro_AUC", "rename it to 'macro_auc'"),
    (lambda d: d["results"]["kvasir"]["per_class_auc"].update(
        Angioectasia={"mean": 0.8, "sd": None, "n_positive": 3}),
     '$.results.kvasir.per_class_auc.Angioectasia', "rename it to 'Angiectasia'"),
    (lambda d: d["method"].update(description="short"), "$.method.description", "20 characters"),
    (lambda d: d["method"].update(trained_on="kvasir"), "$.method.trained_on", "Kvasir-Capsule"),
    (lambda d: d["results"]["galar"]["macro_auc"].update(sd=-0.1), "$.results.galar.macro_auc.sd",
     ">= 0"),
    (lambda d: d["results"]["galar"]["macro_auc"].update(mean="0.6"),
     "$.results.galar.macro_auc.mean", "a number"),
    (lambda d: d["method"].update(code_url="github.com/x"), "$.method.code_url", "https://"),
    (lambda d: d["results"]["galar"].update(sign_positive_seeds="7/6"),
     "$.results.galar.sign_positive_seeds", "k <= n"),
    (lambda d: d["results"]["galar"].update(sign_positive_seeds="4/5"),
     "$.results.galar.sign_positive_seeds", "agree"),
])
def test_violations_name_the_field_and_the_fix(edit, path, fix):
    violations = _broken(edit)
    assert violations, "expected a violation"
    v = next((v for v in violations if v.path == path), None)
    assert v is not None, [str(x) for x in violations]
    assert fix in v.fix, str(v)


def test_malformed_json_is_one_violation(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"submitter": {,}')
    (v,) = validate_submission(p)
    assert v.path == "$" and "line 1" in v.message


# --------------------------------------------------------------------------- retention
@pytest.mark.parametrize("r, band", [
    (1.0, "Strong"), (1.7, "Strong"), (0.99, "Positive"), (0.75, "Positive"), (0.74, "Partial"),
    (0.30, "Partial"), (0.29, "Null"), (-0.10, "Null"), (-0.11, "Negative"),
])
def test_bands(r, band):
    assert retention_band(r) == band


def test_retention_undefined_and_unstable():
    r = classify_retention(-0.017, -0.010)  # the paper's ResNet-18 row
    assert r.band == "undefined/unstable" and not r.stable and "flips sign" in r.reason
    assert math.isclose(r.value, 0.010 / 0.017)
    assert classify_retention(0.0, 0.01).band == "undefined/unstable"
    u = classify_retention(0.018, 0.011, delta_kvasir_ci=ConfidenceInterval(-0.002, 0.04))
    assert u.band == "Partial" and u.label == "Partial (unstable)" and "includes 0" in u.reason
    assert classify_retention(None, 0.01).reason == "Delta_Kvasir is not reported"


def test_score_self_reported():
    s = score_submission(paper_example())
    assert math.isclose(s.retention.value, 0.002 / 0.023)
    assert s.retention.band == "Null" and s.source == "self-reported"
    text = s.report()
    assert "self-reported" in text and "5/6" in text and "Null" in text
    row = s.markdown_row()
    assert row.count("|") == LEADERBOARD_HEADER.splitlines()[0].count("|")
    assert "| +0.09 | Null |" in row and row.endswith("self-reported |")


def test_score_checks_self_consistency():
    doc = paper_example()
    doc["results"]["kvasir"]["macro_auc"]["per_seed_values"] = [0.70, 0.72, 0.74, 0.71, 0.73, 0.7]
    s = score_submission(doc)
    assert any("not the mean of per_seed_values" in c for c in s.checks)


def test_score_rejects_invalid():
    doc = paper_example()
    del doc["results"]["galar"]
    with pytest.raises(InvalidSubmissionError, match=r"\$\.results\.galar") as exc:
        score_submission(doc)
    assert exc.value.violations


# --------------------------------------------------------------------------- predictions


@pytest.fixture(scope="module")
def pred_dir(tmp_path_factory) -> Path:
    return make_prediction_dir(tmp_path_factory.mktemp("preds"))


@pytest.fixture(scope="module")
def rec(pred_dir):
    return recompute(load_prediction_dir(pred_dir), n_resamples=200, rng=0)


def test_recompute_matches_direct_computation(pred_dir, rec):
    runs = load_prediction_dir(pred_dir)
    idx = [class_index(c) for c in SCORING]
    for ds in ("kvasir", "galar"):
        r = rec[ds]
        assert r.seeds == ("1", "2") and set(r.classes) == set(SCORING)
        for i, s in enumerate(r.seeds):
            for arm, got in (("baseline", r.baseline_macro[i]), ("method", r.method_macro[i])):
                df = next(x for x in getattr(runs[ds], arm) if x.seed == s).predictions
                df = df[df["label"].isin(idx)]
                probs = df[[f"prob_{k:02d}" for k in range(len(CLASSES))]].to_numpy()
                assert math.isclose(got, macro_auc(df["label"].to_numpy(), probs, classes=idx))
        assert r.n_test_frames == int(runs[ds].baseline[0].predictions["label"].isin(idx).sum())
        assert r.delta > 0 and r.sign_positive_seeds == "2/2"
        assert r.bootstrap.unit == "videos" and r.n_videos == 8
        assert r.run_ids["method"]["2"] == f"{ds}-method-2"
    assert rec.retention.confidence_interval is not None
    assert math.isclose(rec.retention.value, rec.galar.delta / rec.kvasir.delta)


def test_build_submission_is_valid_and_reproduces(tmp_path, rec):
    doc = build_submission(
        rec, submitter=Submitter(name="A", affiliation="B", email="a@b.org"),
        method=MethodInfo(name="pi", description="five-channel input fusion (test)"),
    )
    assert validate_submission(doc) == []
    assert doc["provenance"]["runs"]["galar"]["baseline"]["1"] == "galar-baseline-1"
    path = write_submission(doc, tmp_path / "sub.json")
    assert validate_submission(path) == []
    s = score_predictions(rec, submission=path)
    assert s.discrepancies == () and s.source == "recomputed"
    assert "DeLong" in s.report() and "MISMATCH" not in s.report()
    bad = copy.deepcopy(doc)
    bad["results"]["galar"]["macro_auc"]["mean"] = round(doc["results"]["galar"]["macro_auc"]["mean"] + 0.05, 4)
    bad["results"]["kvasir"]["sign_positive_seeds"] = "1/2"
    flagged = {d.path for d in score_predictions(rec, submission=bad).discrepancies}
    assert flagged == {"$.results.galar.macro_auc.mean", "$.results.kvasir.sign_positive_seeds"}


def test_build_submission_names_bad_fields(rec):
    with pytest.raises(InvalidSubmissionError, match=r"\$\.submitter\.email"):
        build_submission(rec, submitter=Submitter(name="A", affiliation="B", email="nope"),
                         method=MethodInfo(name="pi", description="five-channel input fusion"))


def test_unpaired_or_mismatched_seeds(tmp_path):
    d = make_prediction_dir(tmp_path / "a")
    (d / "galar" / "method" / "2").rename(d / "galar" / "method" / "3")
    with pytest.raises(DataError, match=r"galar: seeds are paired by name"):
        recompute(load_prediction_dir(d), n_resamples=100)
    d2 = make_prediction_dir(tmp_path / "b")
    p = d2 / "kvasir" / "method" / "1" / "predictions" / "test.parquet"
    pd.read_parquet(p).iloc[5:].to_parquet(p)
    with pytest.raises(DataError, match="scores other frames"):
        recompute(load_prediction_dir(d2), n_resamples=100)
    with pytest.raises(DataError, match=r"no seed folders"):
        load_prediction_dir(tmp_path / "empty")


# --------------------------------------------------------------------------- CLI
def test_doctests():
    assert doctest.testmod(galkva_score).failed == 0
