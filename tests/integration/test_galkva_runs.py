"""GalKva-2026: schema validation, scoring, recomputation from predictions, submissions, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import make_prediction_dir, paper_example

from pipi.cli.galkva import galkva
from pipi.galkva import (
    LEADERBOARD_HEADER,
)

# --------------------------------------------------------------------------- schema


@pytest.fixture(scope="module")
def pred_dir(tmp_path_factory) -> Path:
    return make_prediction_dir(tmp_path_factory.mktemp("preds"))


def test_cli_validate(tmp_path):
    runner = CliRunner()
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(paper_example()))
    doc = paper_example()
    doc["submitter"].pop("email")
    bad.write_text(json.dumps(doc))
    r = runner.invoke(galkva, ["validate", str(good)])
    assert r.exit_code == 0 and "valid" in r.output
    r = runner.invoke(galkva, ["validate", str(bad)])
    assert r.exit_code == 1 and "$.submitter.email" in r.output and "INVALID" in r.output


def test_cli_score_self_reported(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(paper_example()))
    r = CliRunner().invoke(galkva, ["score", str(f)])
    assert r.exit_code == 0, r.output
    assert "self-reported" in r.output and "Retention" in r.output and "Null" in r.output
    r = CliRunner().invoke(galkva, ["score", str(f), "--markdown"])
    assert r.exit_code == 0 and r.output.splitlines()[0] == LEADERBOARD_HEADER.splitlines()[0]
    assert len(r.output.strip().splitlines()) == 3
    r = CliRunner().invoke(galkva, ["score"])
    assert r.exit_code == 2


def test_cli_submission_then_score_predictions(tmp_path, pred_dir):
    runner = CliRunner()
    out = tmp_path / "sub.json"
    r = runner.invoke(galkva, [
        "submission", "--predictions", str(pred_dir), "--out", str(out),
        "--submitter-name", "A", "--affiliation", "B", "--email", "a@b.org",
        "--method-name", "pi", "--description", "five-channel input fusion (test)",
        "--n-resamples", "200",
    ])
    assert r.exit_code == 0, r.output
    assert runner.invoke(galkva, ["validate", str(out)]).exit_code == 0
    r = runner.invoke(galkva, ["score", "--predictions", str(pred_dir), "--n-resamples", "200"])
    assert r.exit_code == 0, r.output
    assert "recomputed" in r.output and "DeLong" in r.output
    doc = json.loads(out.read_text())
    doc["results"]["kvasir"]["delta_vs_rgb_baseline"] = 0.5
    out.write_text(json.dumps(doc))
    r = runner.invoke(galkva, ["score", str(out), "--predictions", str(pred_dir),
                               "--n-resamples", "200"])
    assert r.exit_code == 1 and "MISMATCH $.results.kvasir.delta_vs_rgb_baseline" in r.output


def test_cli_submission_bad_email(tmp_path, pred_dir):
    r = CliRunner().invoke(galkva, [
        "submission", "--predictions", str(pred_dir), "--out", str(tmp_path / "x.json"),
        "--submitter-name", "A", "--affiliation", "B", "--email", "nope",
        "--method-name", "pi", "--description", "five-channel input fusion (test)",
        "--n-resamples", "100",
    ])
    assert r.exit_code == 1 and "$.submitter.email" in r.output
    assert not (tmp_path / "x.json").exists()


