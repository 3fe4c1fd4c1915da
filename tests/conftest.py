"""Shared fixtures: a real `mlflow server` process, the tiny synthetic release, staging."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see pipi/__init__.py
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
ROOT = Path(__file__).resolve().parent.parent


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


_RUN_ENV = ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID")


@pytest.fixture(autouse=True)
def _isolate_mlflow_env():
    """mlflow.set_experiment exports MLFLOW_EXPERIMENT_ID into os.environ, where it would leak
    into later tests and their subprocesses (pointing at another store). Reset per test."""
    saved = {k: os.environ.pop(k) for k in _RUN_ENV if k in os.environ}
    yield
    for k in _RUN_ENV:
        os.environ.pop(k, None)
    os.environ.update(saved)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (SQLite backend, local artifacts) on a free loopback port."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server
    server.stop()


@pytest.fixture()
def tracking(mlflow_server, monkeypatch):
    """Point mlflow (in-process and in subprocesses) at the session's server."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    mlflow.set_tracking_uri(mlflow_server.uri)
    yield mlflow_server.uri
    while mlflow.active_run():
        mlflow.end_run()


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory, request) -> str:
    """A SQLite tracking and registry store of one test module (a registry needs no server)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    return f"sqlite:///{tmp_path_factory.mktemp(f'{name}-store') / 'mlflow.db'}"


@pytest.fixture()
def sqlite_tracking(sqlite_store, monkeypatch):
    """Point mlflow (in-process and in subprocesses) at the module's SQLite store."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store)
    mlflow.set_tracking_uri(sqlite_store)
    yield sqlite_store


@pytest.fixture(scope="session")
def pipi_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("pipi-home")
    os.environ["PIPI_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory) -> Path:
    from pipi.data.synthetic import synthesize_kvasir

    return synthesize_kvasir(tmp_path_factory.mktemp("rel") / "kvasir-tiny", preset="tiny",
                             seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_staged(tiny_release, tmp_path_factory, pipi_home) -> Path:
    from pipi.data.kvasir import stage_kvasir

    out = tmp_path_factory.mktemp("staged") / "tiny"
    stage_kvasir(tiny_release / "labelled_images", tiny_release / "metadata.csv", out, seed=42,
                 progress=False)
    return out
