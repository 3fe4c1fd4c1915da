"""A tracking server that accepts connections but never answers (issue 24).

MLflow's client waits ``MLFLOW_HTTP_REQUEST_TIMEOUT`` (120 s) per try and retries, so
``mlflow run`` printed nothing for over 400 s; pipi's request-header probe runs in
``mlflow run``'s own process and counts a silent server as an absent one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def silent_uri():
    """``http://127.0.0.1:<port>``: accepts every connection, reads, never replies."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held, stop = [], threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)  # kept open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    sock.close()


def test_mlflow_run_against_a_silent_server_fails_in_one_line_within_seconds(silent_uri,
                                                                             tmp_path):
    t0 = time.time()
    try:
        r = subprocess.run(
            [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", "train",
             "--env-manager", "local", "-P", "profile=smoke"],
            capture_output=True, text=True, cwd=tmp_path, timeout=90,
            env={**os.environ, "MLFLOW_TRACKING_URI": silent_uri,
                 "MLFLOW_DISABLE_TELEMETRY": "true"})
    except subprocess.TimeoutExpired:
        pytest.fail("`mlflow run` said nothing for 90 s against a server that never answers")
    elapsed = time.time() - t0
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: the MLflow tracking server at {silent_uri} accepted "
                                "the connection but did not answer within 10 s"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert elapsed < 45, elapsed
