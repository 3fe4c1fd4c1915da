"""GalKva-2026 submissions under the benchmark's released schema (issues 19 and 24).

Submissions here are written by hand in the release's form (the reference entry
`yang2026_convnext_pi`: no `n_positive`, extra keys), never only ones pipi wrote."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import make_prediction_dir
from jsonschema import Draft7Validator

from pipi.cli.galkva import galkva
from pipi.galkva import (
    SCORING_SETS,
    MethodInfo,
    Submitter,
    build_submission,
    check_submission,
    load_prediction_dir,
    recompute,
    score_submission,
    validate_submission,
    write_submission,
)

RELEASED = Path("/work/shared/reference/galkva/submission_schema.json")
SHIPPED = Path(__file__).resolve().parents[3] / "pipi" / "galkva" / "submission_schema.json"

# The release's reference entry, as its leaderboard file writes it: ConvNeXt-Tiny +PI,
# Delta_Kvasir 0.018, Delta_Galar 0.011 (retention 0.61, Partial), per-class entries with
# mean and sd only (no n_positive), a zero-shot Galar side with sd null, extra keys.
REFERENCE_TEXT = """{
  "id": "yang2026_convnext_pi",
  "submitter": {"name": "Yang et al.", "affiliation": "Reference entry (paper authors)",
                "email": "benchmark@example.org"},
  "method": {"name": "ConvNeXt-Tiny +PI",
             "description": "ConvNeXt-Tiny with the physics-informed prior channels (input fusion)",
             "preprint_url": "https://arxiv.org/abs/2605.00001", "trained_on": "Kvasir-Capsule"},
  "benchmark_version": "v1.0",
  "n_seeds": 6,
  "results": {
    "kvasir": {
      "macro_auc": {"mean": 0.771, "sd": 0.019},
      "per_class_auc": {
        "Angiectasia": {"mean": 0.912, "sd": 0.021},
        "Blood - fresh": {"mean": 0.975, "sd": 0.008},
        "Lymphangiectasia": {"mean": 0.861, "sd": 0.035},
        "Normal clean mucosa": {"mean": 0.702, "sd": 0.028},
        "Polyp": {"mean": 0.534, "sd": null},
        "Ulcer": {"mean": 0.642, "sd": 0.041}
      },
      "n_test_frames": 6423,
      "delta_vs_rgb_baseline": 0.018,
      "sign_positive_seeds": "5/6"
    },
    "galar": {
      "macro_auc": {"mean": 0.641, "sd": 0.031},
      "per_class_auc": {
        "Angiectasia": {"mean": 0.701, "sd": null},
        "Blood - fresh": {"mean": 0.812, "sd": null},
        "Ulcer": {"mean": 0.598, "sd": null}
      },
      "n_test_frames": 15298,
      "delta_vs_rgb_baseline": 0.011,
      "sign_positive_seeds": "4/6"
    }
  },
  "notes": "Reference entry; Kvasir numbers from the paper's canonical-split retrain.",
  "leaderboard": {"retention": 0.61, "band": "Partial"}
}
"""


@pytest.fixture
def reference(tmp_path) -> Path:
    p = tmp_path / "yang2026_convnext_pi.json"
    p.write_text(REFERENCE_TEXT)
    return p


# --------------------------------------------------------------------------- the schema file
@pytest.mark.skipif(not RELEASED.is_file(), reason="the released schema is not on this machine")
def test_shipped_schema_is_the_released_file_byte_for_byte():
    assert SHIPPED.read_bytes() == RELEASED.read_bytes()


def test_shipped_schema_is_a_valid_draft07_schema():
    Draft7Validator.check_schema(json.loads(SHIPPED.read_text()))


# --------------------------------------------------------------------------- the reference entry
def test_reference_entry_is_valid_and_scores_partial(reference):
    assert validate_submission(reference) == []
    assert check_submission(reference, scoring_sets=SCORING_SETS) == []  # extra keys: fine
    s = score_submission(reference)
    assert math.isclose(s.retention.value, 0.011 / 0.018)
    assert s.retention.band == "Partial" and f"{s.retention.value:.2f}" == "0.61"
    assert "| +0.61 | Partial |" in s.markdown_row()


def test_cli_accepts_the_reference_entry(reference):
    r = CliRunner().invoke(galkva, ["validate", str(reference)])
    assert r.exit_code == 0, r.output
    assert "valid GalKva-2026 submission" in r.output and "n_positive" not in r.output
    r = CliRunner().invoke(galkva, ["score", str(reference)])
    assert r.exit_code == 0, r.output
    assert "+0.61 -> Partial" in r.output


def test_pipi_checks_are_warnings_not_refusals(tmp_path):
    doc = json.loads(REFERENCE_TEXT)
    doc["results"]["kvasir"]["macro_auc"]["per_seed_values"] = [0.75, 0.76, 0.77, 0.78, 0.79]
    doc["results"]["galar"]["per_class_auc"]["Angioectasia"] = {"mean": 0.7}
    doc["results"]["galar"]["macroAUC"] = 0.6
    assert validate_submission(doc) == []  # the released schema accepts all of it
    warn = {w.path: w for w in check_submission(doc, scoring_sets=SCORING_SETS)}
    assert {w.severity for w in warn.values()} == {"warning"}
    assert "per_seed_values has 5" in warn["$.results.kvasir.sign_positive_seeds"].message
    assert "n_seeds is 6" in warn["$.results.kvasir.macro_auc.per_seed_values"].message
    assert "'Angiectasia'" in warn['$.results.galar.per_class_auc.Angioectasia'].fix
    assert "'macro_auc'" in warn["$.results.galar.macroAUC"].fix
    p = tmp_path / "w.json"
    p.write_text(json.dumps(doc))
    r = CliRunner().invoke(galkva, ["validate", str(p)])
    assert r.exit_code == 0, r.output
    assert r.output.count("pipi warning (not a schema error)") == len(warn)
    r = CliRunner().invoke(galkva, ["score", str(p)])
    assert r.exit_code == 0 and "pipi warning" in r.output


def test_schema_errors_still_refuse(reference):
    doc = json.loads(reference.read_text())
    doc["results"]["galar"]["per_class_auc"]["Ulcer"]["n_positive"] = -3
    doc["results"]["kvasir"]["macro_auc"]["mean"] = 1.2
    paths = {v.path for v in validate_submission(doc)}
    assert paths == {'$.results.galar.per_class_auc.Ulcer.n_positive',
                     "$.results.kvasir.macro_auc.mean"}


# --------------------------------------------------------------------------- bad files (issue 24)
@pytest.mark.parametrize("token, word", [("NaN", "NaN"), ("Infinity", "Infinity"),
                                         ("-Infinity", "-Infinity"), ("1e400", "Infinity")])
def test_non_finite_numbers_are_refused_with_their_path(tmp_path, token, word):
    text = REFERENCE_TEXT.replace('"delta_vs_rgb_baseline": 0.011', f'"delta_vs_rgb_baseline": {token}')
    p = tmp_path / "nan.json"
    p.write_text(text)
    (v,) = validate_submission(p)
    assert v.path == "$.results.galar.delta_vs_rgb_baseline"
    assert v.message == f"{word} is not a JSON number"
    r = CliRunner().invoke(galkva, ["score", str(p)])
    assert r.exit_code == 1 and "Partial" not in r.output and "|" not in r.output
    assert "$.results.galar.delta_vs_rgb_baseline" in r.output


@pytest.mark.parametrize("content, match", [
    (bytes(range(256)) * 4, "not a UTF-8 text file"),
    (b"[" * 200000 + b"]" * 200000, "nested"),
    (REFERENCE_TEXT.replace('"notes"', '"deep": ' + "[" * 100 + "]" * 100 + ', "notes"').encode(),
     "nested more than 64 levels"),
])
def test_unreadable_files_give_one_line(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    (v,) = validate_submission(p)
    assert v.path == "$" and match in v.message
    for cmd in ("validate", "score"):
        r = CliRunner().invoke(galkva, [cmd, str(p)])
        assert r.exit_code == 1, r.output
        assert "Traceback" not in r.output and match in r.output
        assert len(r.output.strip().splitlines()) <= 2


def test_missing_file_is_one_line(tmp_path):
    r = CliRunner().invoke(galkva, ["validate", str(tmp_path / "nope.json")])
    assert r.exit_code == 1 and "cannot read the submission" in r.output


# --------------------------------------------------------------------------- what pipi writes
def test_pipi_submissions_validate_under_the_released_schema(tmp_path):
    rec = recompute(load_prediction_dir(make_prediction_dir(tmp_path / "p")),
                    n_resamples=100, rng=0)
    doc = build_submission(rec, submitter=Submitter(name="A", affiliation="B", email="a@b.org"),
                           method=MethodInfo(name="pi", description="five-channel input fusion"))
    path = write_submission(doc, tmp_path / "sub.json")
    schema = json.loads((RELEASED if RELEASED.is_file() else SHIPPED).read_text())
    written = json.loads(path.read_text())
    validator = Draft7Validator(schema, format_checker=Draft7Validator.FORMAT_CHECKER)
    assert list(validator.iter_errors(written)) == []
    assert validate_submission(path) == []
    assert check_submission(path, scoring_sets=SCORING_SETS) == []  # no pipi warning either
    r = CliRunner().invoke(galkva, [
        "submission", "--predictions", str(tmp_path / "p"), "--out", str(tmp_path / "cli.json"),
        "--submitter-name", "A", "--affiliation", "B", "--email", "a@b.org",
        "--method-name", "pi", "--description", "five-channel input fusion (test)",
        "--n-resamples", "100"])
    assert r.exit_code == 0, r.output
    assert list(validator.iter_errors(json.loads((tmp_path / "cli.json").read_text()))) == []
