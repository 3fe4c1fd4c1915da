"""Data path: frames/s delivered to the model by pipi vs. torchvision ImageFolder + PIL.

Both pipelines read the same staged train split and apply the same augmentations (resize to
the training size, horizontal flip, rotation up to 10 degrees, colour jitter 0.15/0.15/0.1,
ImageNet normalisation) and hand float batches of 32 to a (no-op) model. pipi decodes once into
a uint8 cache (built before timing; its one-off cost is printed) and augments whole batches
as tensors; the baseline decodes every JPEG with PIL every epoch in a DataLoader.

    .venv/bin/python benchmarks/bench_datapath.py [--data STAGED] [--size 224] [--frames 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torchvision import datasets, transforms

from pipi.data.cache import AugmentConfig, augment, batches, build_cache, to_float
from pipi.data.kvasir import load_staged


def pipi_fps(cache, n, bs, gen) -> float:
    t = time.perf_counter()
    seen = 0
    for idx in batches(n, bs, gen=gen):
        x = augment(to_float(cache, idx, torch.device("cpu"), scale01=False), AugmentConfig(), gen,
                    scale=255.0, normalized=True)
        seen += x.shape[0]
    return seen / (time.perf_counter() - t)


def imagefolder_fps(root: Path, size: int, n: int, bs: int, workers: int) -> float:
    tf = transforms.Compose([
        transforms.Resize((size, size)), transforms.RandomHorizontalFlip(),
        transforms.RandomRotation(10), transforms.ColorJitter(0.15, 0.15, 0.1),
        transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    ds = datasets.ImageFolder(str(root), transform=tf)
    sub = torch.utils.data.Subset(ds, list(range(min(n, len(ds)))))
    dl = torch.utils.data.DataLoader(sub, batch_size=bs, shuffle=True, num_workers=workers,
                                     generator=torch.Generator().manual_seed(0))
    t = time.perf_counter()
    seen = 0
    for x, _y in dl:
        seen += x.shape[0]
    return seen / (time.perf_counter() - t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="", help="staged folder (default: the synthetic demo)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers of the baseline")
    ap.add_argument("--check", action="store_true", help="exit 1 if the ratio is below 5")
    a = ap.parse_args(argv)
    if a.data:
        root = Path(a.data)
    else:
        from pipi.staging import ensure_synthetic_staged
        root = ensure_synthetic_staged("demo", log_run=False)
    frames, manifest = load_staged(root)
    train = frames[frames["split"] == "train"].reset_index(drop=True)
    n = min(a.frames, len(train))
    with tempfile.TemporaryDirectory() as cache_dir:
        t = time.perf_counter()
        cache = build_cache(root, train, size=a.size, digest=manifest["data_digest"] + "-bench",
                            cache_dir=Path(cache_dir), progress=False)
        build = time.perf_counter() - t
        gen = torch.Generator().manual_seed(0)
        pipi_fps(cache, min(n, 128), 32, gen)  # warm-up
        ours = np.median([pipi_fps(cache, n, 32, gen) for _ in range(3)])
    base = imagefolder_fps(root / "train", a.size, n, 32, a.workers)
    ratio = ours / base
    print(f"staged data: {root} ({n} train frames at {a.size}px; one-off cache build "
          f"{build:.1f} s for {len(train)} frames)")
    print(f"pipi cache + batched tensor augmentation: {ours:8.1f} frames/s")
    print(f"ImageFolder + PIL ({a.workers} workers):        {base:8.1f} frames/s")
    print(f"ratio: {ratio:.1f}x")
    return 1 if a.check and ratio < 5 else 0


if __name__ == "__main__":
    sys.exit(main())
