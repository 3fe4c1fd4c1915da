"""A team server for real: `mlflow server` on PostgreSQL with a SeaweedFS S3 artifact store.

A `train` run logs to it, its artifacts land in the S3 bucket, the model is registered, and a
fresh process loads `models:/...@candidate` through the server.
"""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pytest

from conftest import MlflowServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    from team_server import Postgres, SeaweedS3, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (make test installs it: scripts/system-deps.sh)")
    root = tmp_path_factory.mktemp("team")
    pg = Postgres(root / "pg")
    s3 = SeaweedS3(root / "s3")
    try:
        server = MlflowServer(root / "mlflow", backend=pg.uri,
                              extra_args=["--artifacts-destination", f"s3://{s3.bucket}/artifacts"],
                              env=s3.env())
    except Exception:
        s3.stop()
        pg.stop()
        raise
    yield server, s3
    server.stop()
    s3.stop()
    pg.stop()


def test_train_against_postgres_and_s3(team_server, tiny_staged, monkeypatch):
    from pipi.workflows import train as runner
    from pipi.config import make_config

    server, s3 = team_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    mlflow.set_tracking_uri(server.uri)
    cfg = make_config(cell="pi", profile="smoke", weights="none", seed=43)
    s = runner.train(cfg, data=str(tiny_staged), experiment="team", progress=False)
    run = mlflow.get_run(s["run_id"])
    assert run.info.status == "FINISHED"
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]]
    assert any(k.endswith("predictions/test.parquet") for k in keys)
    assert any("checkpoints/last.pt" in k for k in keys)
    # wrong S3 credentials are refused: the store is a real S3 server, not a mock
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId"):
        s3.client(secret="wrong").list_objects_v2(Bucket=s3.bucket)
    code = ("import mlflow, numpy as np\n"
            "m = mlflow.pyfunc.load_model('models:/pipi-efficientnet_b0-pi@candidate')\n"
            "print(m.predict(np.zeros((1, 40, 40, 3), np.uint8))['predicted_class'][0])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**env, "MLFLOW_TRACKING_URI": server.uri})
    assert r.returncode == 0, r.stderr[-2000:]
