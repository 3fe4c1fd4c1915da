"""`pipi train` builds one request: the config built once, the staged data resolved and its
index loaded once, the runtime resolved once, the prior applied once (issue 21, part 3).

The click command runs in-process; the workflow's ``run`` is replaced by a stand-in that
keeps the request, so nothing trains and no run starts.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from pipi import tracking
from pipi.calibration.objective import PriorParams, diagonal, prior_params_document
from pipi.cli.train import train as train_cmd
from pipi.runs import data as runs_data
from pipi.workflows import train as workflow

CALIBRATE_RUN = "c" * 32


@pytest.fixture
def counted(monkeypatch):
    """Count the calls of what a request resolves; keep the request ``run`` is given."""
    calls, kept = Counter(), {}

    def count(module, name):
        real = getattr(module, name)

        def wrapper(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        monkeypatch.setattr(module, name, wrapper)

    count(workflow, "make_config")
    count(workflow, "runtime_of")
    count(workflow, "resolve_prior")
    count(runs_data, "load_staged")
    count(runs_data, "ensure_synthetic_staged")
    monkeypatch.setattr(tracking, "configure", lambda *a, **k: calls.update(["configure"]))

    def fake_run(req, **kw):
        kept["req"], kept["kw"] = req, kw
        return workflow.TrainSummary(run_id="r" * 32, test_macro_auc=0.5, val_macro_auc=0.5,
                                     best_epoch=1, test_classes=[])
    monkeypatch.setattr(workflow, "run", fake_run)
    monkeypatch.setattr(tracking, "ui_hint", lambda run_id: "")
    return calls, kept


def _train(*args):
    res = CliRunner().invoke(train_cmd, list(args))
    assert res.exit_code == 0, res.output
    return res


def test_train_cli_resolves_everything_once(counted, tiny_staged, tmp_path):
    calls, kept = counted
    pp = tmp_path / "prior_params.json"
    pp.write_text(json.dumps(prior_params_document(
        PriorParams(3.0, 0.3), image_size=64, calibrate_run_id=CALIBRATE_RUN)))
    _train("--cell", "pi", "--profile", "smoke", "--weights", "none", "--data",
           str(tiny_staged), "--prior-params", str(pp))
    assert dict(calls) == {"make_config": 1, "runtime_of": 1, "resolve_prior": 1,
                           "load_staged": 1, "configure": 1}, dict(calls)
    req = kept["req"]
    assert req.staged.root == tiny_staged.resolve() and len(req.staged.frames)
    assert req.cfg.cell == "pi" and req.cfg.profile == "smoke" and req.cfg.image_size == 32
    # the calibrated prior, lambda_eff at the resolved image size (32 px, not the file's 64)
    assert req.cfg.prior.alpha == 3.0
    assert req.cfg.prior.lambda_eff == pytest.approx(0.3 * diagonal(32))
    assert req.tags == {tracking.TAG_PRIOR_PARAMS: str(pp),
                        tracking.TAG_PRIOR_PARAMS_RUN: CALIBRATE_RUN}
    assert req.runtime.device.type in ("cpu", "cuda") and req.resume is None


def test_profile_auto_follows_the_staged_data_without_a_second_config(counted, tiny_staged):
    calls, kept = counted
    _train("--cell", "a", "--weights", "none", "--data", str(tiny_staged), "--epochs", "1")
    # tiny_staged is staged as a Kvasir-Capsule release (its manifest's dataset): auto ->
    # paper, decided from the staged index before the one config is built
    assert kept["req"].staged.manifest["dataset"] == "kvasir-capsule"
    assert kept["req"].cfg.profile == "paper" and kept["req"].cfg.epochs == 1
    assert calls["make_config"] == 1 and calls["load_staged"] == 1
    assert "resolve_prior" not in calls and kept["req"].tags == {}


def test_a_bad_combination_is_refused_before_the_data_is_touched(counted, tmp_path):
    calls, _ = counted
    pp = tmp_path / "prior_params.json"
    pp.write_text(json.dumps(prior_params_document(PriorParams(3.0, 0.3), image_size=32)))
    res = CliRunner().invoke(train_cmd, ["--cell", "pi", "--profile", "smoke", "--alpha", "2",
                                         "--prior-params", str(pp)])
    assert res.exit_code == 2 and "pass either prior_params or alpha" in res.output, res.output
    # the default synthetic data: nothing staged, loaded or connected before the refusal
    assert "ensure_synthetic_staged" not in calls and "load_staged" not in calls
    assert "configure" not in calls
