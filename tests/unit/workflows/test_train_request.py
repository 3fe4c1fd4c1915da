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
from pipi.runs import training as workflow

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
    assert req.tags == {tracking.tags.TAG_PRIOR_PARAMS: str(pp),
                        tracking.tags.TAG_PRIOR_PARAMS_RUN: CALIBRATE_RUN}
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


# --------------------------------------------------------------------------- resolved once
class _Stop(Exception):
    """Ends a ``run`` where the test has seen what it needs (nothing trains)."""


def _counting(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def wrapper(*a, **k):
        calls[name] += 1
        return real(*a, **k)
    monkeypatch.setattr(module, name, wrapper)


def test_a_resume_reads_the_resumed_run_once(sqlite_tracking, tiny_staged, tmp_path,
                                             monkeypatch):
    """The resumed run is read from the server once, by the request: its data, checkpoint,
    base run, recipe and earlier resumers all come from that one read."""
    import mlflow
    import torch

    from pipi.config import make_config

    monkeypatch.setenv("PIPI_HEARTBEAT_S", "0.2")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    cfg = make_config(cell="b", backbone="resnet18", profile="smoke", weights="none")
    manifest = json.loads((tiny_staged / "manifest.json").read_text())
    c = mlflow.MlflowClient()
    exp = c.create_experiment("resume-once")
    rid = c.create_run(exp, tags={tracking.tags.TAG_DATA_DIGEST: manifest["data_digest"],
                                  tracking.tags.TAG_RECIPE: "pipi train --cell b (as started)",
                                  tracking.tags.TAG_BASE_RUN: "b" * 32,
                                  tracking.tags.TAG_RESUMED_BY: "e" * 32}).info.run_id
    c.log_param(rid, "data_dir", str(tiny_staged))
    c.log_param(rid, "model_prefix", "qa")   # as `mlflow run -P model_prefix=qa` logs it
    monkeypatch.setenv("PIPI_MODEL_PREFIX", "pipi")
    ck = tmp_path / "last.pt"
    torch.save({"config": cfg.to_dict()}, ck)
    c.log_artifact(rid, str(ck), "checkpoints")
    c.set_terminated(rid, "FAILED")

    calls, started = Counter(), {}
    _counting(monkeypatch, tracking, "get_run", calls)
    req = workflow.request(None, resume=rid)
    assert calls["get_run"] == 1
    assert req.resume == rid and req.cfg == cfg and req.base_run_id == "b" * 32
    assert req.staged.digest == manifest["data_digest"]
    # issue 38 item 9: the printed resume command registers under the run's own prefix
    assert req.model_prefix == "qa"
    with tracking.using_model_prefix(req.model_prefix):
        assert workflow.registered_name(req.cfg) == "qa-resnet18-b"
    assert workflow.registered_name(req.cfg) == "pipi-resnet18-b"   # for that run only

    def pipi_run(**kw):
        started.update(kw)
        raise _Stop
    monkeypatch.setattr(tracking, "pipi_run", pipi_run)
    monkeypatch.setattr(tracking, "tag_project_run", lambda *a, **k: "w" * 32)
    with pytest.raises(_Stop):
        workflow.run(req, register=False, progress=False)
    assert calls["get_run"] == 1                    # run() reads it no more
    assert started["run_id"] == rid
    assert started["tags"][tracking.tags.TAG_RECIPE] == "pipi train --cell b (as started)"
    assert started["tags"][tracking.tags.TAG_RESUMED_BY] == f"{'e' * 32},{'w' * 32}"


def test_a_sequence_run_searches_its_base_run_once(sqlite_tracking, tiny_staged, monkeypatch):
    """"Is there a base run?" is asked once: the answer decides both the registration check
    of the base model and whether the base run is trained first."""
    from pipi.config import make_config

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    calls, checked = Counter(), []
    monkeypatch.setattr(workflow, "find_base_run",
                        lambda cfg, digest: calls.update(["find_base_run"]))  # None: no base
    monkeypatch.setattr(tracking, "check_can_register", checked.append)
    cfg = make_config(cell="b", backbone="resnet18", profile="smoke", weights="none")
    req = workflow.request(cfg, data=str(tiny_staged))

    def runtime_of(bcfg):        # the base run's request is being built: it would train now
        calls[f"runtime_of {bcfg.cell}"] += 1
        raise _Stop
    monkeypatch.setattr(workflow, "runtime_of", runtime_of)
    with pytest.raises(_Stop):
        workflow.run(req, experiment="base-once", register=True, progress=False)
    assert dict(calls) == {"find_base_run": 1, "runtime_of a": 1}
    assert checked == [workflow.registered_name(cfg),
                       workflow.registered_name(workflow.base_config(cfg))]


def test_a_resume_leaves_no_downloaded_checkpoint_behind(sqlite_tracking, tiny_staged,
                                                          tmp_path, monkeypatch):
    """The resumed run's checkpoint is read into memory and its downloaded copy removed (each
    resume used to leave a `pipi-run-*/last.pt` of 60-180 MB in the temp folder)."""
    import tempfile

    import mlflow
    import torch

    from pipi.config import make_config

    monkeypatch.setenv("PIPI_HEARTBEAT_S", "0.2")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none")
    manifest = json.loads((tiny_staged / "manifest.json").read_text())
    c = mlflow.MlflowClient()
    rid = c.create_run(c.create_experiment("resume-tmp"),
                       tags={tracking.tags.TAG_DATA_DIGEST: manifest["data_digest"]}).info.run_id
    c.log_param(rid, "data_dir", str(tiny_staged))
    ck = tmp_path / "last.pt"
    torch.save({"config": cfg.to_dict(), "filler": torch.zeros(1000)}, ck)
    c.log_artifact(rid, str(ck), "checkpoints")
    c.set_terminated(rid, "FAILED")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    try:
        req = workflow.request(None, resume=rid)
        assert req.resume == rid and req.cfg == cfg
        assert not list(temp.rglob("*.pt")), sorted(temp.rglob("*"))
    finally:
        tracking.release_claim(rid)
