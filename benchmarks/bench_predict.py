"""Benchmark: `pipi predict` end to end against the bare model (issue 40 item 2).

For each size, ``N`` 336 x 336 JPEG frames (one folder per 1,000: videos) are scored by
``pipi predict`` in a process of its own (start, model load, decoding in DataLoader workers,
the model, the parquet writes, the MLflow run: everything a user waits for), and the same
architecture runs a bare forward on ready tensors at the model's image size and the same
batch in this process (the baseline: what the model alone costs, in the faster memory format
and with the allocator setting `pipi predict` has). Prints frames/s of both,
their ratio (target: at least 0.9 on CPU at 20,000 frames) and ``pipi predict``'s peak RSS
at each size (it must stay flat: the exam is streamed): its largest process's (the kernel's
count) and the proportional set size of all its processes together (replicas and decoding
workers share the imported libraries and the weights; sampled every 0.5 s).

    python benchmarks/bench_predict.py [--frames 2000,20000] [--batch-size 64] [--workers 2]
        [--replicas auto]
        [--image-size 224] [--device cpu] [--bare-frames 4000]

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

from pipi.runtime import keep_freed_memory  # noqa: E402
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


def _tree_pss_mb(pid: int) -> float:
    """The proportional set size of ``pid`` and its descendants, MB (shared pages split
    between the processes that map them: what the job holds, replicas included)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total / 1024


def _predict(uri: str, images: Path, out: Path, args) -> tuple[float, int, float]:
    """(wall seconds, peak RSS of its largest process in MB, peak PSS of the process tree in
    MB) of one `pipi predict` process."""
    cmd = [str(Path(sys.executable).parent / "pipi"), "predict", "-m", uri, "--images",
           str(images), "--out", str(out), "--batch-size", str(args.batch_size), "--workers",
           str(args.workers), "--replicas", args.replicas, "--device", args.device,
           "--experiment", "bench-predict"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pss = 0.0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        pss = max(pss, _tree_pss_mb(proc.pid))
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"pipi predict failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss // 1024, pss


def _bare(uri: str, n: int, args) -> float:
    """Seconds of the bare forward over ``n`` frames (the network on ready tensors), in the
    faster of the two memory formats (NCHW, NHWC): the model at its best, whichever layout
    ``pipi predict`` picks."""
    m = load_module(uri).to(args.device)
    size = m.image_size
    x = torch.rand(args.batch_size, 3, size, size, device=args.device)
    best = float("inf")
    for fmt in (torch.contiguous_format, torch.channels_last):
        net = m.network.to(memory_format=fmt)
        with torch.inference_mode():
            xin, _ = m.inputs(x, train=False)
            net(xin.contiguous(memory_format=fmt))             # warm-up
            t0 = time.perf_counter()
            for _ in range(-(-n // args.batch_size)):
                xin, _ = m.inputs(x, train=False)              # the prior is part of the model
                net(xin.contiguous(memory_format=fmt))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", default="2000,20000")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--replicas", default="auto",
                    help="pipi predict --replicas (auto: one per core on a CPU of 2-4 cores)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bare-frames", type=int, default=4000,
                    help="frames the bare forward is timed over (its rate is steady)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.frames.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as t:
        tmp = Path(t)
        uri = train_model(tmp, "smoke", "bench-predict", image_size=args.image_size)
        # the baseline gets the allocator setting `pipi predict` runs with (a process setting,
        # not work: benchmarks/bench_malloc.py measures it on its own)
        kept = keep_freed_memory()
        print(f"model {uri} ({args.image_size} px), batch {args.batch_size}, "
              f"{args.workers} workers, replicas {args.replicas}, {args.device}, torch threads {torch.get_num_threads()}, "
              f"freed memory kept: {kept}")
        print(f"{'frames':>8} {'predict f/s':>12} {'bare f/s':>10} {'ratio':>7} {'peak RSS':>10} "
              f"{'peak PSS, all processes':>24}")
        for n in sizes:
            images = _frames(tmp / f"exam{n}", n)
            # the bare forward before and after: this machine's speed drifts by tens of
            # percent over minutes, and the ratio uses their mean (both printed)
            # (over at most --bare-frames frames: a steady loop's rate, scaled to n frames)
            m = min(n, args.bare_frames)
            before = _bare(uri, m, args) * n / m
            wall, rss, pss = _predict(uri, images, tmp / f"out{n}.parquet", args)
            after = _bare(uri, m, args) * n / m
            bare = statistics.mean((before, after))
            print(f"{'':>8} (bare forward before / after pipi predict: {n / before:.1f} / "
                  f"{n / after:.1f} f/s over {m} frames)")
            print(f"{n:>8} {n / wall:>12.1f} {n / bare:>10.1f} {bare / wall:>7.2f} "
                  f"{rss:>8} MB {pss:>21.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
