"""Serving overhead: `mlflow models serve` over HTTP vs in-process `pyfunc.predict`.

Same inputs on both sides: base64 JPEGs of 336 x 336 px in ``{"dataframe_records": [{"image":
...}]}`` (HTTP) and the same DataFrame (in process). Prints latency p50/p95 for one image,
throughput for a batch of 32, and the ratios HTTP / in-process (the serving overhead).

    .venv/bin/python benchmarks/bench_serve.py [--model-uri models:/pipi-efficientnet_b0-pi@champion]
        [--repeats 30] [--profile smoke|demo]

Without ``--model-uri`` a ``pi`` model is trained on the tiny synthetic release (profile
``smoke`` by default) into a temporary SQLite store and served from there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402

from pipi.config import make_config  # noqa: E402
from pipi.data.staging import stage_kvasir  # noqa: E402
from pipi.data.synth import synthesize_kvasir  # noqa: E402
from pipi.serving.model_input import encode_image  # noqa: E402
from pipi.runs import training as runner  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_model(tmp: Path, profile: str, experiment: str = "bench-serve", **overrides) -> str:
    """A ``pi`` model trained on the tiny synthetic release into a SQLite store under ``tmp``
    (``overrides``: train options, e.g. ``image_size``); its registered version's URI. Also
    used by bench_predict.py."""
    os.environ["PIPI_HOME"] = str(tmp / "home")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    rel = synthesize_kvasir(tmp / "rel", preset="tiny", seed=0, progress=False)
    staged = tmp / "staged"
    stage_kvasir(rel / "labelled_images", rel / "metadata.csv", staged, seed=42, progress=False)
    cfg = make_config(cell="pi", profile=profile, weights="none", seed=42, **overrides)
    s = runner.train(cfg, data=str(staged), experiment=experiment, progress=False)
    return f"models:/{s.registered_name}/{s.registered_version}"


def _pcts(xs: list[float]) -> tuple[float, float]:
    return float(np.percentile(xs, 50)), float(np.percentile(xs, 95))


def _post(url: str, body: bytes) -> float:
    t = time.perf_counter()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
        assert r.status == 200
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-uri", default="")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--profile", default="smoke", choices=["smoke", "demo"])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pipi-bench-serve-"))
    uri = args.model_uri or train_model(tmp, args.profile)
    rng = np.random.default_rng(0)
    images = [encode_image(rng.integers(0, 256, (336, 336, 3), dtype=np.uint8))
              for _ in range(32)]
    one = pd.DataFrame({"image": images[:1]})
    batch = pd.DataFrame({"image": images})
    body_one = json.dumps({"dataframe_records": one.to_dict("records")}).encode()
    body_batch = json.dumps({"dataframe_records": batch.to_dict("records")}).encode()

    model = mlflow.pyfunc.load_model(uri)
    model.predict(one)                                          # warm-up
    local_one = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        model.predict(one)
        local_one.append(time.perf_counter() - t)
    local_batch = []
    for _ in range(max(3, args.repeats // 5)):
        t = time.perf_counter()
        model.predict(batch)
        local_batch.append(time.perf_counter() - t)

    port = _free_port()
    log = open(tmp / "serve.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m", uri,
         "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(url + "/ping", timeout=2):
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit(f"server did not start; see {tmp / 'serve.log'}") from None
                time.sleep(0.5)
        _post(url + "/invocations", body_one)                   # warm-up
        http_one = [_post(url + "/invocations", body_one) for _ in range(args.repeats)]
        http_batch = [_post(url + "/invocations", body_batch)
                      for _ in range(max(3, args.repeats // 5))]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()

    lp50, lp95 = _pcts(local_one)
    hp50, hp95 = _pcts(http_one)
    lthr = 32 / float(np.median(local_batch))
    hthr = 32 / float(np.median(http_batch))
    print(f"model: {uri}")
    print(f"one 336-px JPEG   in-process p50 {lp50 * 1e3:7.1f} ms  p95 {lp95 * 1e3:7.1f} ms")
    print(f"                  HTTP       p50 {hp50 * 1e3:7.1f} ms  p95 {hp95 * 1e3:7.1f} ms")
    print(f"batch of 32       in-process {lthr:7.1f} images/s;  HTTP {hthr:7.1f} images/s")
    print(f"serving overhead (HTTP / in-process): latency p50 x{hp50 / lp50:.2f}, "
          f"p95 x{hp95 / lp95:.2f}; batch time x{lthr / hthr:.2f}")


if __name__ == "__main__":
    main()
