"""Decode-once uint8 frame caches and the batched tensor pipeline that feeds training.

A staged split is decoded a single time into ``[N, 3, S, S]`` uint8 arrays at the training
size S (PIL bilinear resize, the same as torchvision's ``Resize((S, S))``), stored as
``.npy`` under ``$PIPI_HOME/cache`` keyed by the data digest and S, and memory-mapped by
every later run. Augmentation then runs on whole batches of tensors (any device), so no
JPEG is decoded per epoch.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm.auto import tqdm

from pipi.errors import DataError

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_frame(path: Path, size: int) -> np.ndarray:
    """Decode one image to RGB uint8 ``[3, size, size]`` (bilinear, like Resize((S, S)))."""
    with Image.open(path) as im:
        im.draft("RGB", (size, size))  # JPEG: decode at the smallest scale >= size
        im = im.convert("RGB").resize((size, size), Image.BILINEAR)
        return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)


def cache_path(cache_dir: Path, digest: str, size: int) -> Path:
    return Path(cache_dir) / f"{digest[:24]}-{size}px.npy"


def build_cache(root: Path, frames: pd.DataFrame, *, size: int, digest: str, cache_dir: Path,
                workers: int = 4, progress: bool = True) -> np.ndarray:
    """uint8 ``[len(frames), 3, S, S]`` memmap in ``frames`` row order, built once."""
    path = cache_path(cache_dir, digest, size)
    if path.is_file():
        arr = np.load(path, mmap_mode="r")
        if arr.shape == (len(frames), 3, size, size):
            return arr
        log.warning("cache %s has shape %s, rebuilding", path, arr.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8,
                                        shape=(len(frames), 3, size, size))
        files = [Path(root) / p for p in frames["path"]]

        def work(i):
            try:
                out[i] = load_frame(files[i], size)
            except (OSError, ValueError) as exc:
                raise DataError(f"{files[i]}: cannot decode ({exc})") from None

        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in tqdm(pool.map(work, range(len(files))), total=len(files),
                          desc=f"decode cache {size}px", unit="img", disable=not progress):
                pass
        out.flush()
        del out
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return np.load(path, mmap_mode="r")


# --------------------------------------------------------------------------- augmentation
@dataclass(frozen=True)
class AugmentConfig:
    hflip: float = 0.5                 # probability of a horizontal flip
    rotation_deg: float = 10.0         # uniform in [-deg, +deg]
    brightness: float = 0.15           # factor uniform in [1 - b, 1 + b]
    contrast: float = 0.15
    saturation: float = 0.1


def _gray(x: torch.Tensor) -> torch.Tensor:
    # ITU-R 601 luma, as torchvision's rgb_to_grayscale: (B, 1, H, W)
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def augment(x01: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    """Batched train augmentation on float ``[B, 3, H, W]`` in [0, 1].

    Per sample: horizontal flip, rotation about the centre (bilinear, zero fill), then colour
    jitter (brightness, contrast, saturation) with factors drawn per sample. Random numbers
    come from ``gen`` (on the CPU), so a seed fixes the whole pipeline.
    """
    b = x01.shape[0]
    dev = x01.device
    u = torch.rand(b, 5, generator=gen).to(dev, x01.dtype)
    if cfg.hflip > 0:
        flip = (u[:, 0] < cfg.hflip).view(b, 1, 1, 1)
        x01 = torch.where(flip, x01.flip(-1), x01)
    if cfg.rotation_deg > 0:
        ang = (u[:, 1] * 2 - 1) * math.radians(cfg.rotation_deg)
        cos, sin = torch.cos(ang), torch.sin(ang)
        zero = torch.zeros_like(ang)
        theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
        grid = F.affine_grid(theta, list(x01.shape), align_corners=False)
        x01 = F.grid_sample(x01, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    def factor(col, amount):
        return (1 + (u[:, col] * 2 - 1) * amount).view(b, 1, 1, 1)

    if cfg.brightness > 0:
        x01 = (x01 * factor(2, cfg.brightness)).clamp_(0, 1)
    if cfg.contrast > 0:
        mean = _gray(x01).mean(dim=(1, 2, 3), keepdim=True)
        f = factor(3, cfg.contrast)
        x01 = (f * x01 + (1 - f) * mean).clamp_(0, 1)
    if cfg.saturation > 0:
        f = factor(4, cfg.saturation)
        x01 = (f * x01 + (1 - f) * _gray(x01)).clamp_(0, 1)
    return x01


def normalize(x01: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN, device=x01.device, dtype=x01.dtype).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x01.device, dtype=x01.dtype).view(1, 3, 1, 1)
    return (x01 - mean) / std


def batches(n: int, batch_size: int, *, gen: torch.Generator | None = None,
            max_batches: int = 0) -> list[np.ndarray]:
    """Index batches over ``n`` items, shuffled when ``gen`` is given."""
    order = torch.randperm(n, generator=gen).numpy() if gen is not None else np.arange(n)
    out = [np.sort(order[i:i + batch_size]) if gen is None else order[i:i + batch_size]
           for i in range(0, n, batch_size)]
    return out[:max_batches] if max_batches > 0 else out


def to_float(images_u8: np.ndarray, idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """Gather rows of a uint8 memmap into a float [0, 1] batch on ``device``."""
    sel = np.sort(idx)
    order = np.argsort(np.argsort(idx))  # restore the requested order after a sorted read
    t = torch.from_numpy(np.ascontiguousarray(images_u8[sel]))[torch.from_numpy(order)]
    return t.to(device, non_blocking=True).float().div_(255.0)
