"""A lab server for real (`pipi server`'s LabServer): PostgreSQL, a SeaweedFS S3 artifact
store and `mlflow server --serve-artifacts` with MLflow's basic-auth app.

Unauthenticated requests get 401; a smoke `train` and an `aggregate` with credentials succeed
(clients hold no S3 keys), their artifacts land in the bucket, a fresh process loads the
registered model through the server, and no secret appears in the tracking store, the
artifacts or any log.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab(team_lab):
    """The session's full lab (tests/integration/conftest.py), shared with
    test_lab_store_auth."""
    return team_lab.server


def _get(url: str, user: str | None = None, password: str | None = None) -> int:
    headers = {}
    if user:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _entry(name: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "entrypoints" / f"{name}.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)


def test_lab_server_with_auth_postgres_and_s3(lab, team_lab, tiny_staged, tmp_path):
    secrets = team_lab.secrets
    api = lab.uri + "/api/2.0/mlflow/experiments/search?max_results=5"
    user, password = secrets["MLFLOW_TRACKING_USERNAME"], secrets["MLFLOW_TRACKING_PASSWORD"]
    assert _get(api) == 401
    assert _get(api, user, "wrong-password") == 401
    assert _get(api, user, password) == 200

    # a client: tracking URI and credentials, no S3 keys
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_"))}
    env = {**base, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_TRACKING_URI": lab.uri,
           "MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    anon = _entry("train", "--cell", "a", "--profile", "smoke", "--weights", "none",
                  "--data", str(tiny_staged), "--experiment", "lab",
                  env={k: v for k, v in env.items() if "USERNAME" not in k and "PASSWORD" not in k})
    assert anon.returncode != 0
    assert anon.stderr.strip().splitlines()[-1].startswith(
        f"error: the MLflow tracking server {lab.uri} needs a login (HTTP 401)")
    assert "Traceback" not in anon.stderr
    train = _entry("train", "--cell", "pi", "--profile", "smoke", "--weights", "none",
                   "--data", str(tiny_staged), "--experiment", "lab", env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    # pipi's own "run <id>" line (MLflow also prints "View run <name> at: <url>")
    run_id = re.search(r"\brun ([0-9a-f]{32})\b", train.stdout).group(1)
    agg = _entry("aggregate", "--experiment", "lab", env=env)
    assert agg.returncode == 0, agg.stderr[-3000:]

    import mlflow

    client = mlflow.MlflowClient(lab.uri)
    os.environ.update({k: env[k] for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")})
    try:
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    finally:
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k)
    keys = lab.s3.keys()
    assert any(k.endswith(f"{run_id}/artifacts/predictions/test.parquet") for k in keys)
    # the resumable checkpoint went, through the server's proxy and its S3 store, when the
    # run FINISHED
    assert not any(k.endswith(f"{run_id}/artifacts/checkpoints/last.pt") for k in keys)
    assert any(k.endswith("dashboard.html") for k in keys)
    # the S3 store is a real server with real keys, not a mock
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId"):
        lab.s3.client(secret="wrong").list_objects_v2(Bucket=lab.s3.bucket)

    # a fresh process loads the registered model through the server
    code = ("import mlflow, numpy as np\n"
            "m = mlflow.pyfunc.load_model('models:/pipi-efficientnet_b0-pi@candidate')\n"
            "print(m.predict({'pixels': [np.zeros((40, 40, 3), np.uint8)]})"
            "['predicted_class'][0])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]

    # no secret anywhere: the tracking store, every artifact, every log, every output
    dump = subprocess.run([*lab.pg._as_pg, str(lab.pg.bin / "pg_dump"), "-h", "127.0.0.1", "-p",
                           str(lab.pg.port), "-U", "postgres", "mlflow"],
                          capture_output=True, check=True, env=lab.pg.env()).stdout
    blobs = {"tracking store": dump}
    s3 = lab.s3.client()
    for k in keys + [k for k in lab.s3.keys() if k not in keys]:
        blobs[f"s3://{lab.s3.bucket}/{k}"] = s3.get_object(Bucket=lab.s3.bucket, Key=k)["Body"].read()
    for p in lab.root.rglob("*"):
        if p.is_file() and (p.suffix == ".log" or "log" in p.parent.name or p.name.endswith("log")):
            blobs[str(p)] = p.read_bytes()
    for name, proc in {"train": train, "aggregate": agg, "anon": anon, "load": r}.items():
        blobs[f"{name} output"] = (proc.stdout + proc.stderr).encode()
    assert any("mlflow-server.log" in n for n in blobs) and any("weed" in n for n in blobs)
    # the username is an identity, not a credential: MLflow's auth app records it as the
    # owner of the runs a user creates (and the server's access log names it), by design
    for secret_name in ("MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
        value = secrets[secret_name].encode()
        leaks = [n for n, b in blobs.items() if value in b]
        assert not leaks, f"{secret_name} appears in {leaks}"
