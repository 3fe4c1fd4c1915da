"""Data path: frames/s delivered to the model by pipi vs. torchvision ImageFolder + PIL.

Both pipelines read the same staged train split and apply the same augmentations (resize to
the training size, horizontal flip, rotation up to 10 degrees, colour jitter 0.15/0.15/0.1,
ImageNet normalisation) and hand float batches of 32 to a (no-op) model. pipi decodes once into
a uint8 cache (built before timing; its one-off cost is printed) and augments whole batches
as tensors; the baseline decodes every JPEG with PIL every epoch in a DataLoader.

    .venv/bin/python benchmarks/bench_datapath.py [--data STAGED] [--size 224] [--frames 1024]

Without --data it synthesizes (once, under $PIPI_HOME) a release whose frames have the real
Kvasir-Capsule frame size, 336 x 336 JPEG, and stages it: the decode cost the baseline pays
each epoch is then the one real data would cost.
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
from pipi.data.staging import load_staged


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


def bench_release() -> Path:
    """A staged synthetic release at Kvasir-Capsule's frame size (336 px), built once."""
    from pipi.data.staging import stage_kvasir
    from pipi.data.synth import synthesize_kvasir
    from pipi.paths import pipi_home

    staged = pipi_home() / "data" / "bench-kvasir-336px"
    if not (staged / "manifest.json").is_file():
        rel = pipi_home() / "releases" / "bench-kvasir-336px"
        if not (rel / "metadata.csv").is_file():
            synthesize_kvasir(rel, preset="tiny", videos=14, frames_per_video=90, size=336, seed=0)
        stage_kvasir(rel / "labelled_images", rel / "metadata.csv", staged, seed=42)
    return staged


def measure(root: Path, size: int, n_frames: int, workers: int) -> tuple[float, float, float]:
    frames, manifest = load_staged(root)
    train = frames[frames["split"] == "train"].reset_index(drop=True)
    n = min(n_frames, len(train))
    with tempfile.TemporaryDirectory() as cache_dir:
        t = time.perf_counter()
        cache = build_cache(root, train, size=size, digest=manifest["data_digest"] + "-bench",
                            cache_dir=Path(cache_dir), progress=False)
        build = time.perf_counter() - t
        gen = torch.Generator().manual_seed(0)
        pipi_fps(cache, min(n, 128), 32, gen)  # warm-up
        ours = float(np.median([pipi_fps(cache, n, 32, gen) for _ in range(3)]))
    base = imagefolder_fps(root / "train", size, n, 32, workers)
    return ours, base, build


def main(argv=None) -> int:
    from pipi.config import PROFILES

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="", help="staged folder (default: synthetic, 336 px frames)")
    ap.add_argument("--sizes", default=f"{PROFILES['demo']['image_size']},224",
                    help="training sizes to measure (default: the demo profile's and the paper's)")
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers of the baseline")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the ratio at the first size is below 5")
    a = ap.parse_args(argv)
    root = Path(a.data) if a.data else bench_release()
    print(f"staged data: {root}; baseline: ImageFolder + PIL, {a.workers} DataLoader workers")
    ratios = []
    for size in [int(s) for s in a.sizes.split(",")]:
        ours, base, build = measure(root, size, a.frames, a.workers)
        ratios.append(ours / base)
        print(f"{size:4d} px  pipi: {ours:9.1f} frames/s   ImageFolder+PIL: {base:8.1f} frames/s"
              f"   ratio: {ours / base:5.1f}x   (one-off cache build {build:.1f} s)")
    return 1 if a.check and ratios[0] < 5 else 0


if __name__ == "__main__":
    sys.exit(main())
