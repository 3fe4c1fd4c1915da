"""Benchmark: `pipi predict` end to end against the bare model (issue 40 item 2).

For each size, ``N`` 336 x 336 JPEG frames (one folder per 1,000: videos) are scored by
``pipi predict`` in a process of its own (start, model load, decoding in DataLoader workers,
the model, the parquet writes, the MLflow run: everything a user waits for), and the same
architecture runs a bare forward on ready tensors at the model's image size and the same
batch in this process (the baseline: what the model alone costs). Prints frames/s of both,
their ratio (target: at least 0.9 on CPU at 20,000 frames) and ``pipi predict``'s peak RSS
at each size (it must stay flat: the exam is streamed).

    python benchmarks/bench_predict.py [--frames 2000,20000] [--batch-size 64] [--workers 2]
        [--image-size 224] [--device cpu]

A ``pi`` model (EfficientNet-B0, 5 channels: the prior is computed inside) is trained for a
few batches on the tiny synthetic release into a temporary SQLite store and registered there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import torch  # noqa: E402

from bench_serve import train_model  # noqa: E402  (this folder: the scripts' own helpers)

from pipi.tracking.scoring import load_module  # noqa: E402


def _frames(folder: Path, n: int, size: int = 336) -> Path:
    """``n`` JPEG frames, smooth colour fields with noise (compress like endoscopy frames)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        a, b, c = rng.random(3)
        rgb = np.stack([160 + 60 * np.sin(6 * a * xx + 3 * b * yy), 80 + 40 * np.cos(5 * b * yy),
                        60 + 30 * np.sin(4 * c * (xx + yy))], -1)
        rgb += rng.normal(0, 6, rgb.shape)
        dst = folder / f"video{i // 1000:03d}" / f"frame{i:06d}.jpg"
        dst.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(dst, quality=90)
    return folder


def _predict(uri: str, images: Path, out: Path, args) -> tuple[float, int]:
    """(wall seconds, peak RSS in MB) of one `pipi predict` process."""
    cmd = [str(Path(sys.executable).parent / "pipi"), "predict", "-m", uri, "--images",
           str(images), "--out", str(out), "--batch-size", str(args.batch_size), "--workers",
           str(args.workers), "--device", args.device, "--experiment", "bench-predict"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"pipi predict failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss // 1024


def _bare(uri: str, n: int, args) -> float:
    """Seconds of the bare forward over ``n`` frames (the network on ready tensors)."""
    m = load_module(uri).to(args.device)
    net, size = m.network, m.image_size
    x = torch.rand(args.batch_size, 3, size, size, device=args.device)
    with torch.inference_mode():
        xin, _ = m.inputs(x, train=False)
        net(xin)                                   # warm-up
        t0 = time.perf_counter()
        for _ in range(-(-n // args.batch_size)):
            xin, _ = m.inputs(x, train=False)      # the prior is part of the model
            net(xin)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", default="2000,20000")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    sizes = [int(s) for s in args.frames.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as t:
        tmp = Path(t)
        uri = train_model(tmp, "smoke", "bench-predict", image_size=args.image_size)
        print(f"model {uri} ({args.image_size} px), batch {args.batch_size}, "
              f"{args.workers} workers, {args.device}, torch threads {torch.get_num_threads()}")
        print(f"{'frames':>8} {'predict f/s':>12} {'bare f/s':>10} {'ratio':>7} {'peak RSS':>10}")
        for n in sizes:
            images = _frames(tmp / f"exam{n}", n)
            wall, rss = _predict(uri, images, tmp / f"out{n}.parquet", args)
            bare = statistics.median(_bare(uri, n, args) for _ in range(1))
            print(f"{n:>8} {n / wall:>12.1f} {n / bare:>10.1f} {bare / wall:>7.2f} "
                  f"{rss:>8} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
