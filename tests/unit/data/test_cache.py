"""The decode-once cache and the batched augmentation, against torchvision/PIL references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from PIL import Image

from pipi.data.cache import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    AugmentConfig,
    _affine_grid,
    augment,
    build_cache,
    cache_path,
    normalize,
    to_float,
)


def test_affine_grid_matches_torch():
    th = torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(0))
    for h, w in [(7, 9), (32, 32), (1, 5)]:
        ref = F.affine_grid(th, [6, 3, h, w], align_corners=False)
        torch.testing.assert_close(_affine_grid(th, h, w), ref, atol=1e-6, rtol=0)


def _factors(seed, n, cfg):
    u = torch.rand(n, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return [1 + (u[:, i] * 2 - 1) * a for i, a in
            [(2, cfg.brightness), (3, cfg.contrast), (4, cfg.saturation)]]


def test_colour_jitter_equals_torchvision_sequence():
    # values kept away from 0 and 1 so no intermediate clamp of torchvision applies
    x = torch.rand(5, 3, 12, 10, generator=torch.Generator().manual_seed(3)) * 0.5 + 0.25
    cfg = AugmentConfig(hflip=0.0, rotation_deg=0.0)
    out = augment(x, cfg, torch.Generator().manual_seed(7))
    fb, fc, fs = _factors(7, 5, cfg)
    ref = torch.stack([
        TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(x[i], float(fb[i])),
                                                float(fc[i])), float(fs[i]))
        for i in range(5)])
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)
    # the fused normalisation equals normalising afterwards; raw 0..255 input is the same
    outn = augment(x * 255, cfg, torch.Generator().manual_seed(7), scale=255.0, normalized=True)
    torch.testing.assert_close(outn, normalize(out), atol=1e-4, rtol=0)
    assert out.min() >= 0 and out.max() <= 1


def test_flip_and_rotation():
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    none = AugmentConfig(hflip=0.0, rotation_deg=0.0, brightness=0, contrast=0, saturation=0)
    torch.testing.assert_close(augment(x, none, torch.Generator()), x, atol=1e-6, rtol=0)
    flip = AugmentConfig(hflip=1.0, rotation_deg=0.0, brightness=0, contrast=0, saturation=0)
    torch.testing.assert_close(augment(x, flip, torch.Generator()), x.flip(-1), atol=1e-6, rtol=0)
    # a rotation about the centre by angle a equals torchvision's rotate (bilinear, zero fill)
    rot = AugmentConfig(hflip=0.0, rotation_deg=10.0, brightness=0, contrast=0, saturation=0,
                        interpolation="bilinear")
    img = torch.zeros(1, 3, 33, 33)
    img[:, :, 10:23, 14:19] = 1.0
    out = augment(img, rot, torch.Generator().manual_seed(5))
    u = torch.rand(1, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    deg = float((u[0, 1] * 2 - 1) * 10)
    ref = TF.rotate(img, -deg, interpolation=TF.InterpolationMode.BILINEAR)
    assert (out - ref).abs().mean() < 0.02  # interpolation details differ at edges only
    assert abs(out.sum() - img.sum()) / img.sum() < 0.02  # mass preserved inside the frame


def test_augment_is_seeded():
    x = torch.rand(8, 3, 20, 20)
    a = augment(x, AugmentConfig(), torch.Generator().manual_seed(1))
    b = augment(x, AugmentConfig(), torch.Generator().manual_seed(1))
    c = augment(x, AugmentConfig(), torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_cache_matches_pil_and_is_reused(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(5):
        p = tmp_path / "img" / f"f{i}.jpg"
        p.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40 + i, 50, 3), dtype=np.uint8)).save(p, quality=95)
        rows.append({"path": f"img/f{i}.jpg"})
    frames = pd.DataFrame(rows)
    arr = build_cache(tmp_path, frames, size=24, digest="d" * 64, cache_dir=tmp_path / "c",
                      progress=False)
    assert arr.shape == (5, 3, 24, 24) and arr.dtype == np.uint8
    for i in range(5):
        with Image.open(tmp_path / f"img/f{i}.jpg") as im:
            im.draft("RGB", (24, 24))
            ref = np.asarray(im.convert("RGB").resize((24, 24), Image.BILINEAR)).transpose(2, 0, 1)
        np.testing.assert_array_equal(arr[i], ref)
    path = cache_path(tmp_path / "c", "d" * 64, 24)
    mtime = path.stat().st_mtime_ns
    again = build_cache(tmp_path, frames, size=24, digest="d" * 64, cache_dir=tmp_path / "c",
                        progress=False)
    assert path.stat().st_mtime_ns == mtime and np.array_equal(again, arr)
    # gathering keeps the requested order
    t = to_float(arr, np.array([3, 0, 4]), torch.device("cpu"))
    torch.testing.assert_close(t * 255, torch.from_numpy(arr[[3, 0, 4]]).float())


def test_corrupt_frame_in_cache_build_names_the_file(tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8not a jpeg")
    from pipi.errors import DataError

    with pytest.raises(DataError, match="bad.jpg: cannot decode"):
        build_cache(tmp_path, pd.DataFrame({"path": ["bad.jpg"]}), size=8, digest="e" * 64,
                    cache_dir=tmp_path / "c", progress=False)
    assert not list((tmp_path / "c").glob("*.npy"))


def test_normalize_constants():
    x = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1).expand(1, 3, 2, 2)
    assert normalize(x).abs().max() < 1e-6
    assert len(IMAGENET_STD) == 3
