"""Real team-server components for tests: PostgreSQL 15 and a SeaweedFS S3 server."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A throwaway PostgreSQL cluster on a loopback port (run as the `postgres` user)."""

    def __init__(self, root: Path | None = None):
        import tempfile

        self.bin = pg_bin()
        self.port = free_port()
        # outside pytest's 0700 tmp tree: the postgres user must reach it
        root = Path(tempfile.mkdtemp(prefix="pipi-pg-"))
        self.root = root
        self.data = root / "pgdata"
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o777)
        as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._as_pg = as_pg
        subprocess.run([*as_pg, str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                        "-U", "postgres"], check=True, capture_output=True)
        subprocess.run([*as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                        str(root / "pg.log"), "-o",
                        f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1", "start"],
                       check=True, capture_output=True)
        subprocess.run([*as_pg, str(self.bin / "createdb"), "-h", "127.0.0.1", "-p",
                        str(self.port), "-U", "postgres", "mlflow"], check=True, capture_output=True)
        self.uri = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/mlflow"

    def stop(self):
        subprocess.run([*self._as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                        "stop"], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


class SeaweedS3:
    """SeaweedFS `weed mini` with an S3 gateway and real credentials (wrong keys are refused)."""

    ACCESS, SECRET = "pipi-access", "pipi-secret-key"

    def __init__(self, root: Path, bucket: str = "pipi"):
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "data").mkdir(exist_ok=True)
        (root / "logs").mkdir(exist_ok=True)
        cfg = {"identities": [{"name": "pipi", "credentials": [
            {"accessKey": self.ACCESS, "secretKey": self.SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        (root / "s3.json").write_text(json.dumps(cfg))
        self.log = open(root / "weed.log", "wb")
        self.proc = subprocess.Popen(
            [weed, f"-logdir={root / 'logs'}", "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", f"-s3.config={root / 's3.json'}",
             "-master.telemetry=false", "-admin.ui=false",
             f"-master.port={free_port()}", f"-volume.port={free_port()}",
             f"-filer.port={free_port()}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.bucket = bucket
        deadline = time.time() + 60
        while True:
            try:
                self.client().create_bucket(Bucket=bucket)
                break
            except Exception:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.5)

    def env(self) -> dict:
        return {"MLFLOW_S3_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.ACCESS,
                "AWS_SECRET_ACCESS_KEY": self.SECRET, "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self, secret: str | None = None):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.ACCESS,
                            aws_secret_access_key=secret or self.SECRET, region_name="us-east-1")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
