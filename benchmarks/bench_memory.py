"""Training memory against the size of the release: peak RSS of one training process.

For each size a synthetic staged release is made without decoding any JPEG: its frame index
(Kvasir-Capsule's split proportions, 67 / 19 / 14 % train / val / test, frames sorted by
split as staging writes them) and its decode cache, a ``[N, 3, S, S]`` uint8 ``.npy`` of
random bytes at the path ``build_cache`` looks in, so the training code path is the real one
(``pipi.training.frames.run_frame_cell``: cache opened as a memmap, splits, class weights,
training steps, validation each epoch, final predictions). Each size trains in a fresh
subprocess that samples its anonymous RSS (``RssAnon``: memory the process owns, what a
copy of the data costs) every 20 ms and reads its peak total RSS (``VmHWM``, which also
counts the cache's file pages the process maps in: page cache, shared and reclaimable).

    .venv/bin/python benchmarks/bench_memory.py [--sizes 5000,20000,47000] [--image-size 224]
        [--eval-frames N] [--backbone resnet18]

Training is cut to ``--max-batches`` steps (the memory of a step does not depend on the
release's size). ``--eval-frames N`` caps val and test at N frames each (the rest goes to
train) so that a CPU-only machine scores them in reasonable time; by default it is 256 on a
machine without CUDA and uncapped with it. The goal: peak anonymous RSS flat in the number
of frames.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

FRACTIONS = {"train": 0.67, "val": 0.19, "test": 0.14}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def make_release(root: Path, n: int, size: int, eval_frames: int | None) -> None:
    """Frame index, manifest and a random uint8 decode cache of ``n`` frames under ``root``."""
    from pipi.classes import CLASSES
    from pipi.data.cache import cache_path

    n_val, n_test = (round(n * FRACTIONS[s]) for s in ("val", "test"))
    if eval_frames is not None:
        n_val, n_test = min(n_val, eval_frames), min(n_test, eval_frames)
    n_train = n - n_val - n_test
    split = np.array(["test"] * n_test + ["train"] * n_train + ["val"] * n_val)  # sorted
    cls = np.arange(n) % 11  # every class present in each split
    frames = pd.DataFrame({"path": [f"{s}/{i}.jpg" for i, s in enumerate(split)],
                           "filename": [f"{i}.jpg" for i in range(n)],
                           "class": [CLASSES[c] for c in cls], "class_index": cls,
                           "video_id": [f"v{i % 43:02d}" for i in range(n)],
                           "frame_number": np.arange(n), "split": split, "multilabel": False})
    digest = f"bench-memory-{n}-" + "0" * 40
    frames.to_parquet(root / "frames.parquet", index=False)
    (root / "manifest.json").write_text(json.dumps({"data_digest": digest}))
    path = cache_path(root / "cache", digest, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, 3, size, size))
    rng = np.random.default_rng(0)
    for i in range(0, n, 512):
        mm[i:i + 512] = rng.integers(0, 256, mm[i:i + 512].shape, dtype=np.uint8)
    mm.flush()
    del mm


def child(root: Path, args) -> dict:
    """Train once on the release in ``root``; the process's memory figures."""
    import torch

    from pipi.config import make_config
    from pipi.training.frames import run_frame_cell

    peak = {"anon": _status_kib("RssAnon")}
    before = peak["anon"]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.02):
            peak["anon"] = max(peak["anon"], _status_kib("RssAnon"))

    frames = pd.read_parquet(root / "frames.parquet")
    manifest = json.loads((root / "manifest.json").read_text())
    cfg = make_config(cell="a", backbone=args.backbone, profile="smoke", weights="none",
                      image_size=args.image_size, epochs=args.epochs, patience=args.epochs,
                      batch_size=args.batch_size, max_batches=args.max_batches,
                      device="cuda" if torch.cuda.is_available() else "cpu")
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t = time.perf_counter()
    out = run_frame_cell(cfg, data=root, staged=(frames, manifest), cache_dir=root / "cache",
                         progress=False)
    wall = time.perf_counter() - t
    stop.set()
    thread.join()
    peak["anon"] = max(peak["anon"], _status_kib("RssAnon"))
    return {"frames": len(frames), "anon_before_mib": before / 1024,
            "peak_anon_mib": peak["anon"] / 1024,
            # VmHWM: this process's own peak (ru_maxrss would also carry the parent's RSS
            # across fork and exec: the parent has just written the cache through a map)
            "peak_rss_mib": _status_kib("VmHWM") / 1024,
            "wall_s": wall, "n_val": len(out.predictions["val"]),
            "n_test": len(out.predictions["test"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,20000,47000")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--eval-frames", type=int, default=None)
    ap.add_argument("--backbone", default="resnet18")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-batches", type=int, default=4)
    ap.add_argument("--workdir", default=None, help="where the synthetic caches go (temp)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args)))
        return
    import torch

    eval_frames = args.eval_frames
    if eval_frames is None and not torch.cuda.is_available():
        eval_frames = 256
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"bench-memory-{n}-", dir=args.workdir))
        try:
            t = time.perf_counter()
            make_release(root, n, args.image_size, eval_frames)
            made = time.perf_counter() - t
            cmd = [sys.executable, __file__, "--child", str(root),
                   *(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                     if k not in ("child", "sizes", "workdir", "eval_frames") and v is not None)]
            got = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
            if got.returncode != 0:
                sys.exit(f"training on {n} frames failed:\n{got.stderr[-3000:]}")
            r = json.loads(got.stdout.strip().splitlines()[-1])
            r["cache_gib"] = n * 3 * args.image_size ** 2 / 2 ** 30
            r["make_s"] = made
            rows.append(r)
            print(f"  {n} frames done ({r['wall_s']:.0f} s training, {made:.0f} s to write "
                  "the cache)", file=sys.stderr)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nTraining peak memory, {args.image_size} px, {args.backbone}, "
          f"{args.max_batches} training steps of {args.batch_size}, "
          + (f"val/test capped at {eval_frames} frames each" if eval_frames
             else "val/test at the release's proportions") + "\n")
    print("| frames | cache (GiB) | val / test frames | anon RSS before (MiB) | "
          "peak anon RSS (MiB) | peak RSS incl. mapped cache (MiB) | training (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['frames']:,} | {r['cache_gib']:.2f} | {r['n_val']:,} / {r['n_test']:,} | "
              f"{r['anon_before_mib']:.0f} | {r['peak_anon_mib']:.0f} | "
              f"{r['peak_rss_mib']:.0f} | {r['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
