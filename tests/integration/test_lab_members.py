"""A second team member on `pipi server --auth` (issue 24): one line, before any work, when
the registry or the experiment is someone else's, and when `mlflow run` has no login.

No training: every refusal comes before the fit (that is the point), on the session's
`auth_lab` server.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest

from pipi import tracking
from pipi.errors import TrackingError

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BACKBONE = "resnet18"


def _api(lab, method: str, path: str, user: str, password: str, body: dict) -> dict:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(f"{lab.uri}/api/2.0/mlflow/{path}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Basic {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")


@pytest.fixture(scope="module")
def members(auth_lab):
    """alice registered pipi-resnet18-a first; bob is another member (no admin)."""
    creds = {name: f"{name}-pw-{os.urandom(6).hex()}" for name in ("alice", "bob")}
    for name, pw in creds.items():
        _api(auth_lab, "POST", "users/create", auth_lab.admin, auth_lab.password,
             {"username": name, "password": pw})
    _api(auth_lab, "POST", "registered-models/create", "alice", creds["alice"],
         {"name": f"pipi-{BACKBONE}-a"})
    return creds


def _env(lab, user=None, password=None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_TRACKING_", "MLFLOW_EXPERIMENT_", "PIPI_MODEL_PREFIX"))}
    env.update(MLFLOW_TRACKING_URI=lab.uri, MLFLOW_DISABLE_TELEMETRY="true", **extra)
    if user:
        env.update(MLFLOW_TRACKING_USERNAME=user, MLFLOW_TRACKING_PASSWORD=password)
    return env


def _train(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "entrypoints" / "train.py"), "--backbone",
                           BACKBONE, "--profile", "smoke", "--weights", "none", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0, r.stdout[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r.stderr.strip().splitlines()[-1]


def test_a_model_another_member_registered_is_refused_before_training(auth_lab, members,
                                                                       tiny_staged):
    t0 = time.time()
    r = _train(_env(auth_lab, "bob", members["bob"]), "--cell", "a", "--data", str(tiny_staged),
               "--experiment", "bob-work")
    line = _one_line_error(r)
    assert line.startswith(f"error: user bob may not add versions to the registered model "
                           f"'pipi-{BACKBONE}-a'"), r.stderr[-2000:]
    assert "-P model_prefix=bob" in line and "--model-prefix bob" in line
    assert "train/loss" not in r.stdout + r.stderr and time.time() - t0 < 120
    # nothing was started: bob's experiment holds no run
    os.environ.update(MLFLOW_TRACKING_USERNAME="bob", MLFLOW_TRACKING_PASSWORD=members["bob"])
    try:
        client = mlflow.MlflowClient(auth_lab.uri)
        exp = client.get_experiment_by_name("bob-work")
        assert exp is None or not client.search_runs([exp.experiment_id])
        # under bob's own prefix the same family is free; alice's own model is hers
        tracking.check_can_register(f"bob-{BACKBONE}-a", auth_lab.uri)
        with pytest.raises(TrackingError, match="may not add versions"):
            tracking.check_can_register(f"pipi-{BACKBONE}-a", auth_lab.uri)
        os.environ.update(MLFLOW_TRACKING_USERNAME="alice",
                          MLFLOW_TRACKING_PASSWORD=members["alice"])
        tracking.check_can_register(f"pipi-{BACKBONE}-a", auth_lab.uri)
        os.environ.update(MLFLOW_TRACKING_USERNAME=auth_lab.admin,
                          MLFLOW_TRACKING_PASSWORD=auth_lab.password)
        tracking.check_can_register(f"pipi-{BACKBONE}-a", auth_lab.uri)
    finally:
        os.environ.pop("MLFLOW_TRACKING_USERNAME")
        os.environ.pop("MLFLOW_TRACKING_PASSWORD")


def test_a_sequence_cell_whose_base_model_is_anothers_is_refused_before_any_run(
        auth_lab, members, tiny_staged):
    """Cell b trains its base (cell a) first when there is none; alice owns pipi-<bb>-a, so
    bob's b is refused before its own run is even created."""
    r = _train(_env(auth_lab, "bob", members["bob"]), "--cell", "b", "--data", str(tiny_staged),
               "--experiment", "bob-seq")
    line = _one_line_error(r)
    assert line.startswith(f"error: user bob may not add versions to the registered model "
                           f"'pipi-{BACKBONE}-a'"), r.stderr[-2000:]
    os.environ.update(MLFLOW_TRACKING_USERNAME="bob", MLFLOW_TRACKING_PASSWORD=members["bob"])
    try:
        client = mlflow.MlflowClient(auth_lab.uri)
        exp = client.get_experiment_by_name("bob-seq")
        assert exp is None or not client.search_runs([exp.experiment_id])
    finally:
        os.environ.pop("MLFLOW_TRACKING_USERNAME")
        os.environ.pop("MLFLOW_TRACKING_PASSWORD")


def test_a_member_in_the_default_experiment_gets_one_line(auth_lab, members, tiny_staged):
    r = _train(_env(auth_lab, "bob", members["bob"]), "--cell", "pi", "--data", str(tiny_staged))
    line = _one_line_error(r)
    assert line.startswith("error: user bob may not create runs in experiment 'Default'"), \
        r.stderr[-2000:]
    assert "--experiment-name" in line and "--experiment <name>" in line


def test_mlflow_run_without_login_or_into_default_says_so_in_one_line(auth_lab, members,
                                                                      tmp_path):
    mlflow_cli = str(Path(sys.executable).parent / "mlflow")
    cmd = [mlflow_cli, "run", str(ROOT), "-e", "train", "--env-manager", "local",
           "-P", "profile=smoke"]
    anon = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=_env(auth_lab))
    assert _one_line_error(anon).startswith(
        f"error: the MLflow tracking server {auth_lab.uri} needs a login (HTTP 401)"), \
        anon.stderr[-2000:]
    bob = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=_env(auth_lab, "bob", members["bob"]))
    assert _one_line_error(bob).startswith(
        "error: user bob may not create runs in experiment 'Default'"), bob.stderr[-2000:]
