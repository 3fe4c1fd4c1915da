"""Where a run's prior came from: the tags that ``train`` and ``galar`` both record."""

from __future__ import annotations

import json

import pytest

from pipi import tracking
from pipi.calibration.objective import PriorParams, prior_params_document
from pipi.errors import ConfigError
from pipi.runs.prior_params import check_prior_params, prior_tags, resolve_prior
from pipi.workflows import galar

RUN = "0123456789abcdef" * 2


def test_tags_name_the_source_and_the_calibrate_run_of_the_document():
    doc = prior_params_document(PriorParams(5.0, 0.4), image_size=32, calibrate_run_id=RUN)
    assert prior_tags(doc, "/x/prior_params.json") == {
        "pipi.prior_params": "/x/prior_params.json", "pipi.prior_params_run": RUN}


def test_a_run_id_given_wins_and_a_hand_written_document_names_no_run():
    other = "f" * 32
    doc = {"format": "pipi.prior_params", "version": 1, "alpha": 2, "lambda_eff_fraction": 0.2}
    assert prior_tags(doc, "pp.json") == {tracking.tags.TAG_PRIOR_PARAMS: "pp.json"}
    assert prior_tags({**doc, "calibrate_run_id": RUN}, f"run {other}", run_id=other) == {
        tracking.tags.TAG_PRIOR_PARAMS: f"run {other}", tracking.tags.TAG_PRIOR_PARAMS_RUN: other}


def test_a_file_resolves_to_its_prior_and_tags(tmp_path):
    # written by hand, as a user would (integers, an extra key, no calibrate run)
    path = tmp_path / "mine.json"
    path.write_text('{"format": "pipi.prior_params", "version": 1, "alpha": 7, '
                    '"lambda_eff_fraction": 1, "note": "from the lab notebook"}')
    prior = resolve_prior(str(path))
    assert (prior.params.alpha, prior.params.lambda_eff_fraction) == (7.0, 1.0)
    assert dict(prior.tags) == {tracking.tags.TAG_PRIOR_PARAMS: str(path)}
    path.write_text(json.dumps(prior_params_document(PriorParams(7.0, 1.0), image_size=64,
                                                     calibrate_run_id=RUN)))
    assert resolve_prior(str(path)).tags[tracking.tags.TAG_PRIOR_PARAMS_RUN] == RUN


def test_galar_records_the_same_tags_as_train(tmp_path):
    path = tmp_path / "pp.json"
    path.write_text(json.dumps(prior_params_document(PriorParams(3.0, 0.3), image_size=32,
                                                     calibrate_run_id=RUN)))
    prior = resolve_prior(str(path))
    ev = galar.galar_evaluation("auto", prior)
    assert ev.tags[tracking.tags.TAG_PRIOR_PARAMS] == str(path)
    assert ev.tags[tracking.tags.TAG_PRIOR_PARAMS_RUN] == RUN
    assert ev.options["alpha"] == 3.0 and ev.tags[galar.TAG_FOLD] == "evaluation"


def test_prior_params_and_an_explicit_prior_are_refused_together():
    check_prior_params("pp.json", {"alpha": 4.0, "lambda_eff": None})  # the defaults: fine
    check_prior_params("", {"alpha": 2.0, "lambda_eff": 9.0})           # no prior_params: fine
    with pytest.raises(ConfigError, match="pass either prior_params or alpha and lambda_eff"):
        check_prior_params("pp.json", {"alpha": 2.0, "lambda_eff": 9.0})


def test_a_calibrate_run_id_is_read_from_its_logged_document_and_nothing_stays_behind(
        store_uri, tmp_path, monkeypatch):
    """``prior_params=<calibrate run id>``: the run's ``prior_params.json`` is downloaded,
    read and its temporary folder removed; a run of another entry point is refused."""
    import tempfile

    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    mlflow.set_tracking_uri(store_uri)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    exp = mlflow.create_experiment("cal", artifact_location=str(tmp_path / "art"))
    doc = prior_params_document(PriorParams(4.0, 0.3), image_size=32)
    runs = {}
    for entry in ("calibrate", "train"):
        with mlflow.start_run(experiment_id=exp) as run:
            mlflow.set_tag(tracking.tags.TAG_ENTRY_POINT, entry)
            mlflow.log_dict(doc, "prior_params.json")
        runs[entry] = run.info.run_id
    try:
        got = resolve_prior(runs["calibrate"])
        assert (got.params.alpha, got.params.lambda_eff_fraction) == pytest.approx((4.0, 0.3))
        assert got.tags == {tracking.tags.TAG_PRIOR_PARAMS: f"run {runs['calibrate']}",
                            tracking.tags.TAG_PRIOR_PARAMS_RUN: runs["calibrate"]}
        assert not any(tmp.iterdir())
        with pytest.raises(ConfigError, match="is not a calibrate run"):
            resolve_prior(runs["train"])
    finally:
        mlflow.set_tracking_uri(None)
