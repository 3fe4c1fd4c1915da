"""Two `promote` calls at once apply in order (issue 24): a per-model lock on the registry,
real processes on one SQLite store; and the one-line refusals of bad promote options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner
from fakes import fake_version_tags, log_fake_run, make_frames, write_run
from stores import new_sqlite_store

from pipi.cli import main

ROOT = Path(__file__).resolve().parents[2]
NAME = "pipi-efficientnet_b0-b_plus"
#: a promote whose alias move is slowed down, so that two of them overlap for sure
SLOW_PROMOTE = """
import sys, time
import pipi.tracking.registry as r
real = r.set_aliases
def slow(*a, **k):
    time.sleep(3)
    return real(*a, **k)
r.set_aliases = slow
from pipi.cli import main
main(sys.argv[1:], prog_name="pipi")
"""


@pytest.fixture()
def store(tmp_path, monkeypatch) -> str:
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    return uri


@pytest.fixture()
def versions(store, tmp_path):
    """Three registered versions of one model (synthetic runs; no baseline runs: a forced
    promotion needs no evidence); version 1 is the champion."""
    client = mlflow.tracking.MlflowClient()
    exp_id = client.create_experiment(f"promote-lock-{tmp_path.name}")
    test, val = make_frames(2, 20, 0), make_frames(1, 20, 1, split="val")
    client.create_registered_model(NAME)
    out = []
    for seed in (41, 42, 43):
        rid = log_fake_run(client, exp_id, write_run(tmp_path / f"r{seed}", test, val, 1.5, seed),
                           cell="b_plus", seed=seed)
        out.append(client.create_model_version(NAME, f"runs:/{rid}/predictions", run_id=rid,
                                               tags=fake_version_tags(client, rid)).version)
    client.set_registered_model_alias(NAME, "champion", out[0])
    return [str(v) for v in out]


def test_two_concurrent_promotions_apply_in_order(versions, store):
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_PROMOTE, "promote", "--model", NAME,
                               "--version", v, "--force-reason", f"pilot {v}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for v in versions[1:]]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    c = mlflow.tracking.MlflowClient()
    champion = str(c.get_model_version_by_alias(NAME, "champion").version)
    previous = str(c.get_model_version_by_alias(NAME, "previous-champion").version)
    # both applied, one after the other: the first one's version is the previous champion
    assert {champion, previous} == set(versions[1:]), (champion, previous)
    assert "pipi.promote.lock" not in c.get_registered_model(NAME).tags


def test_blank_force_reason_is_refused(versions):
    r = CliRunner().invoke(main, ["promote", "--model", NAME, "--version", versions[1],
                                  "--force-reason", "   "])
    assert r.exit_code == 2 and "force_reason is blank" in r.output, r.output
    c = mlflow.tracking.MlflowClient()
    assert str(c.get_model_version_by_alias(NAME, "champion").version) == versions[0]


def test_unknown_baseline_is_an_unknown_cell(versions):
    r = CliRunner().invoke(main, ["promote", "--model", NAME, "--baseline", "zzz"])
    assert r.exit_code == 2 and "baseline='zzz': unknown cell" in r.output, r.output
