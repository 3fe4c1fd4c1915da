"""Real servers for the tests: a free loopback port, waiting for an HTTP endpoint, and a real
`mlflow server` process (SQLite backend, local artifacts unless told otherwise)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, *, timeout: float = 300.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


class MlflowServer:
    def __init__(self, root: Path, backend: str | None = None, extra_args=(), env=None):
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        backend = backend or f"sqlite:///{root / 'mlflow.db'}"
        self.log = open(root / "server.log", "wb")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", backend,
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             *(extra_args or ["--artifacts-destination", str(root / "artifacts")])],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})},
        )
        wait_http(self.uri + "/health", proc=self.proc)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
