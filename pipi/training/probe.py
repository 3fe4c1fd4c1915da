"""The cached probe's features: the frozen backbone run once over every staged frame, cached on
disk by (backbone, weights, image size, transform, precision, data digest).

Two views of a frame (``cfg.probe_transform``):

* ``frame``: pipi's frame cache (``Resize((S, S))``, bilinear, the JPEG decoded at the smallest
  DCT scale that is at least S), as every other cell sees it;
* the published scripts' own preprocessing, on each file decoded whole as torchvision's
  ``ImageFolder`` decodes it: ``dinov2`` (dinov2_linear_probe.py: ``Resize(int(1.14 S))``
  bilinear, ``CenterCrop(S)``) and ``biomedclip`` (open_clip's BiomedCLIP preprocess:
  ``Resize(S)`` bicubic, ``CenterCrop(S)``); then ``ToTensor`` and the backbone's own
  normalisation (:class:`pipi.serving.frame_model.FrameInputs`).

``cfg.probe_fp16`` runs the backbone under fp16 autocast on a GPU (biomedclip_linear_probe.py
does; on a CPU it runs in fp32, as the script).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torchvision import transforms

from pipi.config import TrainConfig
from pipi.data.cache import to_float
from pipi.data.progress import tqdm
from pipi.errors import DataError
from pipi.paths import pipi_home

__all__ = ["features_path", "probe_features", "published_features", "published_transform"]


def published_transform(name: str, size: int) -> transforms.Compose:
    """The published probe script's geometric preprocessing at ``size`` (then ToTensor)."""
    if name == "dinov2":
        resize = transforms.Resize(int(size * 1.14),
                                   interpolation=transforms.InterpolationMode.BILINEAR)
    elif name == "biomedclip":
        resize = transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC)
    else:
        raise ValueError(f"no published transform {name!r}")
    return transforms.Compose([resize, transforms.CenterCrop(size), transforms.ToTensor()])


def features_path(cfg: TrainConfig, digest: str, cache_dir: Path | None) -> Path:
    """Where the frozen backbone's features of a staged folder are cached: a digest of the
    backbone, its weights (a file by path, size and mtime), the image size, the transform,
    the precision and the data."""
    w = cfg.weights
    if w not in ("imagenet", "none", "", None) and Path(w).is_file():
        st = Path(w).stat()
        w = f"{Path(w).resolve()}:{st.st_size}:{st.st_mtime_ns}"
    key = {"backbone": cfg.backbone, "weights": w, "image_size": cfg.image_size,
           "data_digest": digest, "format": 1}
    if cfg.probe_transform != "frame" or cfg.probe_fp16:   # the frame view keeps its old key
        key |= {"transform": cfg.probe_transform, "fp16": cfg.probe_fp16}
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return (cache_dir or pipi_home() / "cache") / "features" / f"{name}.npy"


def _save(path: Path, feats: np.ndarray) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, feats.astype(np.float32))
    os.replace(tmp, path)
    return feats


def _embed(model, x: torch.Tensor, *, fp16: bool) -> np.ndarray:
    on_gpu = x.device.type == "cuda"
    with torch.autocast("cuda", dtype=torch.float16, enabled=fp16 and on_gpu):
        return model.embed(x).float().cpu().numpy()


@torch.no_grad()
def probe_features(model, images: np.ndarray, inputs, *, device, path: Path,
                   batch_size: int = 128, fp16: bool = False) -> np.ndarray:
    """The frozen backbone's pooled features ``[N, D]`` of every row of a uint8 image array,
    with the evaluation preprocessing; read from ``path`` when cached, else computed once and
    written there (atomically)."""
    if path.is_file():
        return np.load(path)
    model.eval()
    out = []
    for i in range(0, len(images), batch_size):
        x, _ = inputs(to_float(images, np.arange(i, min(len(images), i + batch_size)), device),
                      train=False)
        out.append(_embed(model, x, fp16=fp16))
    return _save(path, np.concatenate(out) if out else
                 np.zeros((0, model.head.in_features), np.float32))


def _load(path: Path, tf) -> torch.Tensor:
    try:
        with Image.open(path) as im:
            return tf(im.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot decode ({exc})") from None


@torch.no_grad()
def published_features(model, root: Path, frames: pd.DataFrame, inputs, cfg: TrainConfig, *,
                       device, path: Path, batch_size: int = 64, workers: int = 4,
                       progress: bool = False) -> np.ndarray:
    """:func:`probe_features` with the published script's preprocessing of each staged file
    (``cfg.probe_transform``), in ``frames`` row order."""
    if path.is_file():
        return np.load(path)
    model.eval()
    tf = published_transform(cfg.probe_transform, cfg.image_size)
    files = [Path(root) / p for p in frames["path"]]
    out = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i in tqdm(range(0, len(files), batch_size), desc="probe features", unit="batch",
                      disable=not progress):
            x01 = torch.stack(list(pool.map(lambda f: _load(f, tf), files[i:i + batch_size])))
            x, _ = inputs(x01.to(device), train=False)
            out.append(_embed(model, x, fp16=cfg.probe_fp16))
    return _save(path, np.concatenate(out) if out else
                 np.zeros((0, model.head.in_features), np.float32))
