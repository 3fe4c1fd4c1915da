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
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image

from pipi.data.normalization import IMAGENET_MEAN, IMAGENET_STATS, IMAGENET_STD  # noqa: F401
from pipi.data.progress import tqdm  # light: tqdm itself is imported when a bar is made
from pipi.errors import DataError

log = logging.getLogger(__name__)



def decode_at(im: Image.Image, size: int) -> None:
    """The decode every frame of a model of input ``size`` gets, in training and in serving:
    a JPEG at the smallest DCT scale that is at least ``size`` (PIL's ``draft``; no effect on
    other formats or once the image is loaded)."""
    im.draft("RGB", (size, size))


def load_frame(path: Path, size: int) -> np.ndarray:
    """Decode one image to RGB uint8 ``[3, size, size]`` (bilinear, like Resize((S, S)))."""
    with Image.open(path) as im:
        decode_at(im, size)
        im = im.convert("RGB").resize((size, size), Image.BILINEAR)
        return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)


def cache_path(cache_dir: Path, digest: str, size: int) -> Path:
    return Path(cache_dir) / f"{digest[:24]}-{size}px.npy"


def _fill(tmp: str, files: list[Path], size: int, workers: int, progress: bool) -> None:
    """Decode ``files`` into a new .npy memmap at ``tmp`` (closed on return)."""
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8,
                                    shape=(len(files), 3, size, size))

    def work(i: int) -> None:
        try:
            out[i] = load_frame(files[i], size)
        except (OSError, ValueError) as exc:
            raise DataError(f"{files[i]}: cannot decode ({exc})") from None


    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in tqdm(pool.map(work, range(len(files))), total=len(files),
                      desc=f"decode cache {size}px", unit="img", disable=not progress):
            pass
    out.flush()


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
        _fill(tmp, [Path(root) / p for p in frames["path"]], size, workers, progress)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return np.load(path, mmap_mode="r")


class CacheRows:
    """Rows ``rows`` of a cache, read from it only when indexed (a batch at a time): a split
    of the memory-mapped cache that is never copied whole into memory. Indexing (an int, a
    slice or an index array, positions within the split) returns those frames as an array."""

    def __init__(self, cache: np.ndarray, rows: np.ndarray):
        self.cache, self.rows = cache, np.asarray(rows, dtype=np.int64)
        self.shape = (len(self.rows), *cache.shape[1:])
        self.dtype = cache.dtype

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key) -> np.ndarray:
        sel = self.rows[key]
        if np.ndim(sel) == 0:
            return self.cache[int(sel)]
        order = np.argsort(sel, kind="stable")  # read in file order, return in the asked one
        out = np.empty((len(sel), *self.shape[1:]), self.dtype)
        out[order] = self.cache[sel[order]]
        return out


def split_rows(cache: np.ndarray, rows: np.ndarray) -> np.ndarray | CacheRows:
    """The frames ``rows`` of a cache without copying them: a view of the memmap when the
    rows are one contiguous block (staging sorts frames by split), else :class:`CacheRows`."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return cache[:0]
    if rows[-1] - rows[0] + 1 == len(rows) and (np.diff(rows) == 1).all():
        return cache[int(rows[0]):int(rows[-1]) + 1]
    return CacheRows(cache, rows)


# --------------------------------------------------------------------------- augmentation
@dataclass(frozen=True)
class AugmentConfig:
    hflip: float = 0.5                 # probability of a horizontal flip
    rotation_deg: float = 10.0         # uniform in [-deg, +deg]
    brightness: float = 0.15           # factor uniform in [1 - b, 1 + b]
    contrast: float = 0.15
    saturation: float = 0.1
    interpolation: str = "nearest"     # rotation resampling; torchvision RandomRotation's default


_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's rgb_to_grayscale


def _affine_grid(theta: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """``F.affine_grid(theta, [B, C, h, w], align_corners=False)`` by broadcasting.

    Same values; about 10x faster on CPU than the generic batched matmul over a base grid.
    """
    xs = (torch.arange(w, device=theta.device, dtype=theta.dtype) * 2 + 1) / w - 1  # (W,)
    ys = (torch.arange(h, device=theta.device, dtype=theta.dtype) * 2 + 1) / h - 1  # (H,)
    t = theta.view(-1, 2, 3, 1, 1)
    gx = t[:, 0, 0] * xs + t[:, 0, 1] * ys.view(h, 1) + t[:, 0, 2]  # (B, H, W)
    gy = t[:, 1, 0] * xs + t[:, 1, 1] * ys.view(h, 1) + t[:, 1, 2]
    return torch.stack([gx, gy], dim=-1)


def _to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """A small CPU tensor on ``dev`` without a synchronising copy (pinned, non-blocking)."""
    if dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t


@lru_cache(maxsize=64)
def _const(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor, made once per device (no host copy per call: a CUDA graph
    can capture the kernels that read it). Never written to."""
    return torch.tensor(values, dtype=dtype, device=device)


def augment_draws(gen: torch.Generator, b: int) -> torch.Tensor:
    """The random numbers ``augment`` draws for ``b`` images: float64 ``(b, 5)`` on the CPU."""
    return torch.rand(b, 5, generator=gen, dtype=torch.float64)


def augment(x: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator | None, *,
            scale: float = 1.0, normalized: bool = False, return_valid: bool = False,
            draws: torch.Tensor | None = None, stats=IMAGENET_STATS):
    """Batched train augmentation of float ``[B, 3, H, W]`` images with values in [0, scale].

    Per sample: a horizontal flip and a rotation about the centre (uniform in
    ``[-deg, deg]``), done together by one resampling with zero fill (nearest neighbour by
    default, as torchvision's ``RandomRotation``), then colour
    jitter (brightness, contrast, saturation factors uniform in ``[1 - j, 1 + j]``). The
    three jitter steps are linear, so they are applied as one per-image 3 x 3 colour matrix
    and offset, clamped once to [0, 1] at the end (torchvision clamps after each step; the
    results differ only where an intermediate value left [0, 1]). Returns values in [0, 1],
    or values normalised with ``stats`` (the backbone's mean and std, ImageNet's by default)
    when ``normalized`` (the normalisation is folded into the same matrix, so it costs no
    extra pass). Random numbers come from ``gen`` (CPU), so a
    seed fixes the whole pipeline. ``return_valid`` also returns the field of view, a
    ``(B, H, W)`` bool mask of the pixels the rotation's zero fill did not create (the same
    random numbers are drawn either way).
    """
    b, _, h, w = x.shape
    dev, dt = x.device, x.dtype
    f64 = torch.float64
    valid = torch.ones((b, h, w), dtype=torch.bool, device=dev)
    # the random numbers come from the CPU generator (the same augmentation on any device);
    # everything derived from them is computed on the device, so a GPU step never waits
    u = draws if draws is not None else _to_device(augment_draws(gen, b), dev)
    # ---- geometry: flip folded into the rotation's sampling matrix (one grid_sample)
    if cfg.hflip > 0 or cfg.rotation_deg > 0:
        ang = (u[:, 1] * 2 - 1) * math.radians(cfg.rotation_deg)
        cos, sin = torch.cos(ang), torch.sin(ang)
        sx = torch.where(u[:, 0] < cfg.hflip, -1.0, 1.0)
        zero = torch.zeros_like(ang)
        theta = torch.stack([torch.stack([cos * sx, -sin * sx, zero], 1),
                             torch.stack([sin, cos, zero], 1)], 1).to(dt)
        grid = _affine_grid(theta, h, w)
        x = F.grid_sample(x, grid, mode=cfg.interpolation, padding_mode="zeros",
                          align_corners=False)
        if return_valid:
            ones = torch.ones((b, 1, h, w), dtype=dt, device=dev)
            valid = F.grid_sample(ones, grid, mode="nearest", padding_mode="zeros",
                                  align_corners=False)[:, 0] > 0.5

    # ---- colour: brightness f_b, contrast f_c (towards the mean grey), saturation f_s
    def factor(col, amount):
        return 1 + (u[:, col] * 2 - 1) * amount

    fb, fc, fs = factor(2, cfg.brightness), factor(3, cfg.contrast), factor(4, cfg.saturation)
    luma = _const(_LUMA, f64, dev)
    eye = torch.eye(3, dtype=f64, device=dev)
    # saturation matrix M_s = s I + (1 - s) 1 w^T; rows of M_s sum to 1 (w sums to 1)
    ms = fs.view(b, 1, 1) * eye + (1 - fs).view(b, 1, 1) * luma.view(1, 1, 3).expand(b, 3, 3)
    a = (fc * fb / scale).view(b, 1, 1) * ms                       # (B, 3, 3)
    chan_mean = x.mean(dim=(2, 3)).double() / scale  # (B, 3) in [0, 1]
    t = ((1 - fc) * fb * (chan_mean @ luma)).view(b, 1).expand(b, 3).clone()  # (B, 3)
    lo, hi = torch.zeros(3, dtype=f64, device=dev), torch.ones(3, dtype=f64, device=dev)
    if normalized:
        mean = _const(stats[0], f64, dev)
        std = _const(stats[1], f64, dev)
        a = a / std.view(1, 3, 1)
        t = (t - mean) / std
        lo, hi = (lo - mean) / std, (hi - mean) / std
    out = torch.baddbmm(t.to(dt).unsqueeze(2), a.to(dt), x.reshape(b, 3, h * w))
    out = out.view(b, 3, h, w).clamp_(lo.to(dt).view(1, 3, 1, 1), hi.to(dt).view(1, 3, 1, 1))
    return (out, valid) if return_valid else out


def normalize(x01: torch.Tensor, stats=IMAGENET_STATS) -> torch.Tensor:
    """``(x01 - mean) / std`` per channel; ``stats``: the backbone's (mean, std)."""
    mean = _const(stats[0], x01.dtype, x01.device).view(1, 3, 1, 1)
    std = _const(stats[1], x01.dtype, x01.device).view(1, 3, 1, 1)
    return (x01 - mean) / std


def batches(n: int, batch_size: int, *, gen: torch.Generator | None = None,
            max_batches: int = 0) -> list[np.ndarray]:
    """Index batches over ``n`` items, shuffled when ``gen`` is given."""
    order = torch.randperm(n, generator=gen).numpy() if gen is not None else np.arange(n)
    out = [np.sort(order[i:i + batch_size]) if gen is None else order[i:i + batch_size]
           for i in range(0, n, batch_size)]
    return out[:max_batches] if max_batches > 0 else out


def to_float(images_u8: np.ndarray, idx: np.ndarray, device: torch.device, *,
             scale01: bool = True) -> torch.Tensor:
    """Gather rows of a uint8 memmap into a float batch on ``device`` ([0, 1], or [0, 255])."""
    sel = np.sort(idx)
    order = np.argsort(np.argsort(idx))  # restore the requested order after a sorted read
    t = torch.from_numpy(np.ascontiguousarray(images_u8[sel]))[torch.from_numpy(order)]
    t = t.to(device, non_blocking=True).float()
    return t.div_(255.0) if scale01 else t
