"""Tests of pipi.prior against straightforward references written here.

The prior reference loops over images with ``torch.quantile`` and the paper's formulas; the C1
reference sorts with numpy, crops explicitly and labels blobs with its own BFS flood fill.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from fractions import Fraction

import numpy as np
import pytest
import torch

from pipi.errors import ConfigError
from pipi.prior import (
    C1_8_NAMES,
    C1_13_NAMES,
    PriorConfig,
    c1_features,
    exact_quantile,
    fluence_map,
    prior_channels,
)

E2 = math.exp(-2.0)


def corner(n: int) -> float:
    """Phi in a corner of an n x n image: r = (n-1)/sqrt 2, lambda_eff = 0.25 n sqrt 2."""
    return math.exp(-2.0 * (n - 1) / n)


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


# ------------------------------------------------------------------------------------------
# Reference implementation of the prior (per-image loop, torch.quantile, explicit formulas)
# ------------------------------------------------------------------------------------------


def ref_phi(h, w, lambda_eff=None, dtype=torch.float64):
    lam = 0.25 * math.sqrt(h ** 2 + w ** 2) if lambda_eff is None else lambda_eff  # published
    phi = torch.empty(h, w, dtype=torch.float64)
    for i in range(h):
        for j in range(w):
            r = math.sqrt((i - (h - 1) / 2) ** 2 + (j - (w - 1) / 2) ** 2)
            phi[i, j] = 1.0 if lam == 0 else math.exp(-r / lam)
    return phi.to(dtype)


def ref_prior(x, alpha=4.0, lambda_eff=None, clip=(0.01, 0.99), hb="paper", second="phi"):
    bsz, _, h, w = x.shape
    phi = ref_phi(h, w, lambda_eff, dtype=x.dtype)
    out = torch.empty(bsz, 2, h, w, dtype=x.dtype)
    for i in range(bsz):
        red, green, blue = x[i, 0], x[i, 1], x[i, 2]
        if hb == "paper":
            index = red / torch.clamp(red + green + blue, min=1e-6)
        else:
            index = red / (green + blue + 1e-6)  # the published code's guard
        lo = torch.quantile(index.flatten(), clip[0], interpolation="linear")
        hi = torch.quantile(index.flatten(), clip[1], interpolation="linear")
        if hi - lo > 1e-6:
            hnorm = (torch.clamp(index, min=lo, max=hi) - lo) / (hi - lo)
        else:
            hnorm = torch.full_like(index, 0.5)
        out[i, 0] = torch.sigmoid(alpha * (hnorm - 0.5)) * phi
        if second == "phi":
            out[i, 1] = phi
        else:
            out[i, 1] = torch.log((green + 1e-6) / (blue + 1e-6)) * phi  # published guard
    return out


def rand_images(b, h, w, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 3, h, w, generator=g, dtype=dtype)


@pytest.mark.parametrize(
    "shape", [(4, 224, 224), (3, 17, 23), (2, 31, 8), (5, 2, 2), (2, 1, 9), (3, 64, 49)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prior_matches_reference(shape, dtype):
    b, h, w = shape
    x = rand_images(b, h, w, seed=h * 1000 + w, dtype=dtype)
    got = prior_channels(x)
    want = ref_prior(x)
    assert got.shape == (b, 2, h, w)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 9.5},
        {"alpha": 0.5, "lambda_eff": 12.0},
        {"clip": (0.05, 0.9)},
        {"clip": (0.0, 1.0)},
        {"clip": (0.4, 0.6)},  # selection falls back to a sort near the median
        {"hb_index": "code"},
        {"second_channel": "log_gb_phi"},
        {"hb_index": "code", "second_channel": "log_gb_phi", "alpha": 2.0},
    ],
)
def test_options_match_reference(kwargs):
    x = rand_images(3, 40, 33, seed=7)
    # dark and saturated pixels exercise the EPS guards and the clipping
    x[0, :, :3, :3] = 0.0
    x[1, 2, 5:9, 5:9] = 0.0
    x[2, :, -2:, :] = 1.0
    got = prior_channels(x, **kwargs)
    want = ref_prior(
        x,
        alpha=kwargs.get("alpha", 4.0),
        lambda_eff=kwargs.get("lambda_eff"),
        clip=kwargs.get("clip", (0.01, 0.99)),
        hb=kwargs.get("hb_index", "paper"),
        second=kwargs.get("second_channel", "phi"),
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_config_roundtrip_and_frozen():
    cfg = PriorConfig(alpha=3.0, clip=[0.02, 0.98], hb_index="code")
    assert cfg.clip == (0.02, 0.98)
    x = rand_images(2, 16, 16, seed=3)
    torch.testing.assert_close(
        prior_channels(x, **dataclasses.asdict(cfg)),
        ref_prior(x, alpha=3.0, clip=(0.02, 0.98), hb="code"),
        atol=1e-5,
        rtol=0,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.alpha = 1.0  # type: ignore[misc]


# ------------------------------------------------------------------------------------------
# Hand-computed values
# ------------------------------------------------------------------------------------------


def test_phi_centre_and_corners():
    phi = fluence_map(5, 5, dtype=torch.float64)
    assert phi[2, 2].item() == 1.0
    for i, j in [(0, 0), (0, 4), (4, 0), (4, 4)]:
        assert phi[i, j].item() == pytest.approx(corner(5), abs=1e-12)
    # 3 x 3: lambda = 0.25 * sqrt(18); edge midpoints at r = 1
    phi3 = fluence_map(3, 3, dtype=torch.float64)
    assert phi3[0, 1].item() == pytest.approx(math.exp(-1 / (0.25 * math.sqrt(18))), abs=1e-12)
    # 224 x 224: lambda = 0.25 * 224 * sqrt 2 = 79.2 px (published implementation)
    x = torch.full((1, 3, 224, 224), 0.3)
    p = prior_channels(x)[0, 1]
    for i, j in [(0, 0), (0, 223), (223, 0), (223, 223)]:
        assert p[i, j].item() == pytest.approx(corner(224), abs=1e-6)
    r = math.hypot(111.5, 111.5 - 100)  # pixel (0, 100)
    assert p[0, 100].item() == pytest.approx(math.exp(-r / (0.25 * 224 * math.sqrt(2))), abs=1e-6)
    # explicit lambda_eff, odd size: exactly 1 at the centre, exp(-r/lambda) elsewhere
    q = prior_channels(torch.full((3, 9, 7), 0.5), lambda_eff=2.0)[1]
    assert q[4, 3].item() == 1.0
    assert q[0, 0].item() == pytest.approx(math.exp(-math.hypot(4, 3) / 2.0), abs=1e-6)
    # a 1 x 1 image has r = 0, Phi = 1
    assert fluence_map(1, 1).item() == 1.0


def _two_by_two():
    # H = R / (R + G + B) = 0.6, 0.2, 0.3, 0.5 (raster order)
    rgb = [[0.6, 0.2, 0.2], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]
    return torch.tensor(rgb, dtype=torch.float64).T.reshape(3, 2, 2)


def test_tiny_image_hand_values_full_range():
    x = _two_by_two()
    p = prior_channels(x, clip=(0.0, 1.0))  # (2, 2, 2)
    # H_norm = (H - 0.2) / 0.4 = 1, 0, 0.25, 0.75; all four pixels are corners: Phi = e^-2
    want = [sigmoid(4 * 0.5), sigmoid(-4 * 0.5), sigmoid(4 * -0.25), sigmoid(4 * 0.25)]
    assert p[0].flatten().tolist() == pytest.approx([v * corner(2) for v in want], abs=1e-12)
    assert p[1].flatten().tolist() == pytest.approx([corner(2)] * 4, abs=1e-12)


def test_tiny_image_hand_values_default_clip():
    x = _two_by_two()
    p = prior_channels(x)[0].flatten().tolist()
    # sorted H = 0.2, 0.3, 0.5, 0.6; rank 0.03 -> lo = 0.203; rank 2.97 -> hi = 0.597
    lo, hi = 0.203, 0.597
    hn = [1.0, 0.0, (0.3 - lo) / (hi - lo), (0.5 - lo) / (hi - lo)]
    assert p == pytest.approx([sigmoid(4 * (v - 0.5)) * corner(2) for v in hn], abs=1e-9)


def test_tiny_image_code_variants():
    x = _two_by_two()
    p = prior_channels(x, clip=(0.0, 1.0), hb_index="code", second_channel="log_gb_phi")
    # H = R / (G + B) = 1.5, 0.25, 3/7, 1.0; min 0.25, max 1.5
    hn = [(v - 0.25) / 1.25 for v in (1.5, 0.25, 3 / 7, 1.0)]
    # (the published code's EPS = 1e-6 added to the denominators moves them by < 1e-5)
    assert p[0].flatten().tolist() == pytest.approx(
        [sigmoid(4 * (v - 0.5)) * corner(2) for v in hn], abs=1e-5
    )
    gb = [math.log(0.2 / 0.2), math.log(0.2 / 0.6), math.log(0.3 / 0.4), math.log(1.0)]
    assert p[1].flatten().tolist() == pytest.approx([v * corner(2) for v in gb], abs=1e-5)


def test_flat_image_is_neutral():
    x = torch.full((2, 3, 5, 6), 0.4)
    x[1] = 0.0  # black: H = 0 everywhere (guarded division)
    p = prior_channels(x)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p[:, 0], 0.5 * p[:, 1], atol=1e-7, rtol=0)
    # grey with varying brightness: R / (R + G + B) is 1/3 up to rounding, treated as flat
    y = torch.linspace(0.1, 0.9, 30).reshape(1, 1, 5, 6).repeat(1, 3, 1, 1)
    py = prior_channels(y)
    torch.testing.assert_close(py[:, 0], 0.5 * py[:, 1], atol=1e-7, rtol=0)
    # a tiny but real contrast (span 2e-6 > EPS) is rescaled to the full range
    z = torch.full((1, 3, 1, 4), 0.25, dtype=torch.float64)
    z[0, 0, 0, 3] += 6e-6  # H = 1/3 + 2e-6 at that pixel
    pz = prior_channels(z, clip=(0.0, 1.0))[0]
    assert pz[0, 0, 3].item() == pytest.approx(sigmoid(2.0) * pz[1, 0, 3].item(), rel=1e-6)


def test_single_image_equals_batched():
    x = rand_images(3, 12, 10, seed=11)
    batched = prior_channels(x)
    for i in range(3):
        single = prior_channels(x[i])
        assert single.shape == (2, 12, 10)
        torch.testing.assert_close(single, batched[i], atol=1e-7, rtol=0)


def test_non_contiguous_input():
    x = rand_images(3, 20, 14, seed=4)
    want = ref_prior(x)
    torch.testing.assert_close(
        prior_channels(x.contiguous(memory_format=torch.channels_last)), want, atol=1e-5, rtol=0
    )
    xt = rand_images(3, 14, 20, seed=4).transpose(2, 3)  # (3, 3, 20, 14), strided
    torch.testing.assert_close(prior_channels(xt), ref_prior(xt.contiguous()), atol=1e-5, rtol=0)


def test_output_is_not_the_cached_phi():
    x = rand_images(1, 8, 8, seed=0)
    first = prior_channels(x)
    first[:, 1] = -1.0
    torch.testing.assert_close(prior_channels(x), ref_prior(x), atol=1e-5, rtol=0)
    f = fluence_map(8, 8)
    f.zero_()
    assert fluence_map(8, 8)[0, 0].item() == pytest.approx(corner(8), abs=1e-6)


# ------------------------------------------------------------------------------------------
# Exact quantile
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1001, 50176])
def test_exact_quantile_bitwise(dtype, n):
    g = torch.Generator().manual_seed(n)
    cont = torch.rand(3, n, generator=g, dtype=dtype)
    ties = torch.randint(0, 4, (3, n), generator=g).to(dtype) / 3.0
    const = torch.full((2, n), 0.37, dtype=dtype)
    values = torch.cat([cont, ties, const])
    for q in (0.0, 0.01, 0.05, 0.3, 0.5, 0.73, 0.99, 1.0):
        want = torch.quantile(values, q, dim=1, interpolation="linear")
        got = exact_quantile(values, q)
        assert got.dtype == dtype
        assert torch.equal(got, want), (n, q, (got - want).abs().max())


def test_exact_quantile_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        exact_quantile(torch.rand(5), 0.5)
    with pytest.raises(ValueError, match="q must be"):
        exact_quantile(torch.rand(2, 5), 1.5)


# ------------------------------------------------------------------------------------------
# Devices, dtypes, validation
# ------------------------------------------------------------------------------------------


def test_dtype_preserved_half():
    x = rand_images(2, 20, 20, seed=5)
    got = prior_channels(x.to(torch.bfloat16))
    assert got.dtype == torch.bfloat16
    want = ref_prior(x.to(torch.bfloat16).float())
    torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    x = rand_images(8, 224, 224, seed=1)
    got = prior_channels(x.cuda())
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), ref_prior(x), atol=1e-5, rtol=0)
    feats = c1_features(got[:, 0], form=13)
    assert feats.device.type == "cuda"
    torch.testing.assert_close(feats.cpu(), c1_features(got[:, 0].cpu(), form=13))


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.rand(2, 4, 8, 8), "shape"),
        (torch.rand(8, 8), "shape"),
        (torch.rand(1, 1, 3, 8, 8), "shape"),
        (torch.randint(0, 255, (1, 3, 8, 8), dtype=torch.uint8), "floating-point"),
        (torch.rand(1, 3, 8, 8) * 255, r"\[0, 1\]"),
        (torch.rand(1, 3, 8, 8) - 0.5, r"\[0, 1\]"),
        (torch.full((1, 3, 8, 8), float("nan")), r"\[0, 1\]"),
        (torch.empty(0, 3, 8, 8), "empty"),
    ],
)
def test_bad_input_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        prior_channels(bad)


def test_non_tensor_rejected():
    with pytest.raises(TypeError):
        prior_channels(np.zeros((3, 4, 4), dtype=np.float32))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": "4"}, "alpha"),
        ({"lambda_eff": -1.0}, "lambda_eff"),
        ({"lambda_eff": 0.0}, "lambda_eff"),
        ({"clip": (0.99, 0.01)}, "clip"),
        ({"clip": (1.0, 99.0)}, "clip"),
        ({"clip": (0.1,)}, "clip"),
        ({"hb_index": "R/(G+B)"}, "Available"),
        ({"second_channel": "logGB"}, "Available"),
    ],
)
def test_bad_options_rejected(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        prior_channels(torch.rand(1, 3, 4, 4), **kwargs)
    with pytest.raises(ConfigError):
        PriorConfig(**kwargs)


# ------------------------------------------------------------------------------------------
# C1 features: brute-force numpy reference with its own flood fill
# ------------------------------------------------------------------------------------------


def flood_fill_blobs(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """8-connected components in raster order of their first pixel."""
    h, w = mask.shape
    seen = np.zeros_like(mask, dtype=bool)
    blobs = []
    for i in range(h):
        for j in range(w):
            if mask[i, j] and not seen[i, j]:
                pix, queue = [], deque([(i, j)])
                seen[i, j] = True
                while queue:
                    a, b = queue.popleft()
                    pix.append((a, b))
                    for da in (-1, 0, 1):
                        for db in (-1, 0, 1):
                            y, x = a + da, b + db
                            if 0 <= y < h and 0 <= x < w and mask[y, x] and not seen[y, x]:
                                seen[y, x] = True
                                queue.append((y, x))
                blobs.append(pix)
    return blobs


def ref_c1(p: np.ndarray, form: int) -> np.ndarray:
    h, w = p.shape
    n = h * w

    def top_mean(v, pct):
        k = max(1, math.ceil(Fraction(v.size * pct, 100)))
        return np.sort(v.ravel())[::-1][:k].mean()

    hc, wc = max(1, h // 2), max(1, w // 2)
    r0, c0 = (h - hc) // 2, (w - wc) // 2
    crop = p[r0 : r0 + hc, c0 : c0 + wc]
    feats = [
        p.mean(),
        p.max(),
        top_mean(p, 1),
        top_mean(p, 5),
        crop.max(),
        top_mean(crop, 1),
        (p > 0.5).sum() / n,
        (p > 0.7).sum() / n,
    ]
    if form == 13:
        blobs = flood_fill_blobs(p > 0.5)
        if not blobs:
            feats += [0, 0, 0, 0, 0]
        else:
            sizes = [len(b) for b in blobs]
            big = blobs[sizes.index(max(sizes))]
            ys = np.array([a for a, _ in big])
            xs = np.array([b for _, b in big])
            half_diag = math.sqrt((h - 1) ** 2 + (w - 1) ** 2) / 2
            dist = math.sqrt((ys.mean() - (h - 1) / 2) ** 2 + (xs.mean() - (w - 1) / 2) ** 2)
            bw, bh = xs.max() - xs.min() + 1, ys.max() - ys.min() + 1
            props = np.array(sizes) / sum(sizes)
            ent = -sum(q * math.log(q) for q in props) if len(blobs) > 1 else 0.0
            feats += [
                len(blobs),
                max(sizes) / n,
                dist / half_diag,
                math.log((bw + 1) / (bh + 1)),
                ent,
            ]
    return np.array(feats, dtype=np.float64)


def test_names():
    assert len(C1_8_NAMES) == 8 and len(C1_13_NAMES) == 13
    assert C1_13_NAMES[:8] == C1_8_NAMES
    assert len(set(C1_13_NAMES)) == 13


def two_rectangles() -> np.ndarray:
    p = np.full((20, 30), 0.1)
    p[2:6, 3:13] = 0.9  # 4 x 10 = 40 px, above 0.7
    p[10:18, 20:26] = 0.6  # 8 rows x 6 cols = 48 px, between 0.5 and 0.7
    return p


def test_two_rectangles_hand_values():
    p = two_rectangles()
    f = c1_features(torch.from_numpy(p)[None], form=13)[0].tolist()
    n = 600
    assert f[1] == pytest.approx(0.9)
    assert f[2] == pytest.approx(0.9)  # top 1 %: 6 px, all 0.9
    assert f[3] == pytest.approx(0.9)  # top 5 %: 30 px, all 0.9
    # central crop rows 5:15, cols 7:22 holds 0.9 (row 5) and 0.6 (rows 10-14, cols 20-21)
    assert f[4] == pytest.approx(0.9)
    assert f[5] == pytest.approx(0.9)  # 150 px -> k = 2, both 0.9
    assert f[6] == pytest.approx(88 / n)
    assert f[7] == pytest.approx(40 / n)
    assert f[8] == 2
    assert f[9] == pytest.approx(48 / n)
    centroid = (13.5, 22.5)
    dist = math.hypot(centroid[0] - 9.5, centroid[1] - 14.5) / (0.5 * math.hypot(19, 29))
    assert f[10] == pytest.approx(dist)
    assert f[11] == pytest.approx(math.log(7 / 9))
    pa, pb = 40 / 88, 48 / 88
    assert f[12] == pytest.approx(-(pa * math.log(pa) + pb * math.log(pb)))
    np.testing.assert_allclose(f, ref_c1(p, 13), atol=1e-12)


def test_top_k_definition():
    # n = 150: top 1 % is ceil(1.5) = 2 px, top 5 % is ceil(7.5) = 8 px
    v = np.zeros(150)
    v[:10] = np.arange(10, 0, -1) / 10  # 1.0, 0.9, ..., 0.1
    p = torch.from_numpy(v.reshape(10, 15))[None]
    f = c1_features(p)[0].tolist()
    assert f[2] == pytest.approx((1.0 + 0.9) / 2)
    assert f[3] == pytest.approx(sum(range(10, 2, -1)) / 10 / 8)
    # exact integer ceiling: n = 140 gives k = 7 for the top 5 %, whereas the float
    # ceil(140 * 0.01 * 5) = ceil(7.000000000000001) would give 8
    q = torch.linspace(1.0, 0.01, 140, dtype=torch.float64).reshape(1, 10, 14)
    f = c1_features(q)[0].tolist()
    assert f[2] == pytest.approx(q.flatten()[:2].mean().item())
    assert f[3] == pytest.approx(q.flatten()[:7].mean().item())


def test_diagonal_pixels_connect():
    p = np.zeros((6, 6))
    p[1, 1] = p[2, 2] = p[3, 3] = 0.8  # a diagonal line: one blob with 8-connectivity
    p[1, 4] = 0.8  # isolated: second blob
    f = c1_features(torch.from_numpy(p)[None], form=13)[0].tolist()
    assert f[8] == 2
    assert f[9] == pytest.approx(3 / 36)
    assert f[11] == pytest.approx(0.0)  # 3 x 3 bounding box
    np.testing.assert_allclose(f, ref_c1(p, 13), atol=1e-12)


def test_no_blob_and_single_blob():
    p = np.full((2, 7, 9), 0.3)
    p[1, 2:4, 1:8] = 0.55  # one 2 x 7 blob
    f = c1_features(torch.from_numpy(p), form=13).numpy()
    np.testing.assert_array_equal(f[0, 8:], 0.0)
    assert f[1, 8] == 1 and f[1, 12] == 0.0
    assert f[1, 11] == pytest.approx(math.log(8 / 3))
    for i in range(2):
        np.testing.assert_allclose(f[i], ref_c1(p[i], 13), atol=1e-12)


def test_equal_largest_blobs_take_first_in_raster_order():
    p = np.zeros((9, 9))
    p[6:8, 5:8] = 0.9  # 2 x 3, later in raster order
    p[0:3, 0:2] = 0.9  # 3 x 2, first
    f = c1_features(torch.from_numpy(p)[None], form=13)[0].tolist()
    assert f[11] == pytest.approx(math.log(3 / 4))  # the tall 3 x 2 blob
    np.testing.assert_allclose(f, ref_c1(p, 13), atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 30, 30), (2, 17, 41), (2, 1, 7), (4, 9, 5)])
@pytest.mark.parametrize("form", [8, 13])
def test_c1_random_maps_match_reference(shape, form):
    g = torch.Generator().manual_seed(sum(shape) + form)
    # smooth-ish random maps so that blobs of several sizes appear
    p = torch.rand(shape, generator=g, dtype=torch.float64) ** 2
    got = c1_features(p.unsqueeze(1), form=form)  # (B, 1, H, W) accepted
    assert got.shape == (shape[0], form) and got.dtype == torch.float64
    want = np.stack([ref_c1(m, form) for m in p.numpy()])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_c1_on_prior_output_float32():
    x = rand_images(3, 48, 40, seed=2)
    pb = prior_channels(x, alpha=12.0)[:, 0]
    got = c1_features(pb, form=13)
    assert got.dtype == torch.float32
    want = np.stack([ref_c1(m.astype(np.float64), 13) for m in pb.numpy()])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


@pytest.mark.parametrize(
    "bad, exc",
    [
        (torch.rand(4, 4), ValueError),
        (torch.rand(2, 2, 4, 4), ValueError),
        (torch.ones(1, 4, 4, dtype=torch.int64), ValueError),
        (torch.rand(1, 4, 4) + 1.0, ValueError),
    ],
)
def test_c1_bad_input(bad, exc):
    with pytest.raises(exc):
        c1_features(bad)


def test_c1_bad_form():
    with pytest.raises(ConfigError, match="form"):
        c1_features(torch.rand(1, 4, 4), form=5)


def test_phi_equals_the_published_implementation():
    """lambda_eff = 0.25 * sqrt(H**2 + W**2), centre ((H-1)/2, (W-1)/2), as published (numpy)."""
    for h, w in [(224, 224), (64, 64), (33, 20)]:
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        r = np.sqrt((yy - (h - 1) / 2) ** 2 + (xx - (w - 1) / 2) ** 2)
        published = np.exp(-r / (0.25 * np.sqrt(h ** 2 + w ** 2)))
        ours = fluence_map(h, w, dtype=torch.float32).numpy()
        assert np.abs(ours - published).max() < 1e-6
    assert PriorConfig().resolved_lambda(224, 224) == pytest.approx(79.196, abs=1e-3)


def test_fov_mask_ignores_zero_filled_corners():
    """prior_mask=fov: percentiles over the field of view; zero fill no longer pulls the 1st."""
    x = rand_images(1, 32, 32, seed=5)
    filled = x.clone()
    filled[:, :, :6, :6] = 0  # a rotation's zero-filled corner
    valid = torch.ones(1, 32, 32, dtype=torch.bool)
    valid[:, :6, :6] = False
    every = prior_channels(filled)[0, 0]
    fov = prior_channels(filled, mask="fov", valid=valid)[0, 0]
    # independent: the same percentiles computed with numpy over the valid pixels only
    r, g, b = (filled[0, c].double().numpy() for c in range(3))
    hb = r / np.maximum(r + g + b, 1e-6)
    lo, hi = np.quantile(hb[valid[0].numpy()], [0.01, 0.99])
    hn = (np.clip(hb, lo, hi) - lo) / (hi - lo)
    phi = fluence_map(32, 32, dtype=torch.float64).numpy()
    want = phi / (1 + np.exp(-4.0 * (hn - 0.5)))
    assert np.abs(fov.double().numpy() - want)[valid[0].numpy()].max() < 1e-5
    assert not torch.allclose(every, fov)
    with pytest.raises(ConfigError, match="prior_mask"):
        PriorConfig(mask="bogus")


def test_code_v2_hand_values():
    """hb_index=code_v2: sigmoid(max(alpha, 6) * ((R - G) / (R + G) - 0.30)) * Phi, no
    per-image normalisation (clip and mask do not enter); alpha below 6 is raised to 6."""
    x = _two_by_two()
    r, g = x[0], x[1]
    h = ((r - g) / (r + g)).flatten().tolist()
    for alpha, used in ((4.0, 6.0), (9.0, 9.0)):
        p = prior_channels(x, alpha=alpha, hb_index="code_v2", second_channel="log_gb_phi")
        assert p[0].flatten().tolist() == pytest.approx(
            [sigmoid(used * (v - 0.30)) * corner(2) for v in h], abs=1e-5)
        q = prior_channels(x, alpha=alpha, hb_index="code_v2", second_channel="log_gb_phi",
                           clip=(0.2, 0.8), mask="fov")
        assert torch.equal(p, q)


def test_code_v2_matches_the_published_definition():
    """The published v2 form, written here: (R-G)/(R+G+eps), pivot 0.30, alpha floored at 6,
    Phi in the input dtype; the AFI channel log((G+eps)/(B+eps)) * Phi."""
    x = rand_images(3, 40, 36, seed=11)
    eps = 1e-6
    hh, ww = x.shape[-2:]
    ys = torch.arange(hh, dtype=torch.float32).view(-1, 1) - (hh - 1) / 2
    xs = torch.arange(ww, dtype=torch.float32).view(1, -1) - (ww - 1) / 2
    phi = torch.exp(-torch.sqrt(ys ** 2 + xs ** 2) / (0.25 * (hh ** 2 + ww ** 2) ** 0.5))
    idx = (x[:, 0] - x[:, 1]) / (x[:, 0] + x[:, 1] + eps)
    want0 = torch.sigmoid(6.0 * (idx - 0.30)) * phi
    want1 = torch.log((x[:, 1] + eps) / (x[:, 2] + eps)) * phi
    got = prior_channels(x, alpha=4.0, hb_index="code_v2", second_channel="log_gb_phi")
    torch.testing.assert_close(got[:, 0], want0, atol=1e-5, rtol=0)
    torch.testing.assert_close(got[:, 1], want1, atol=1e-5, rtol=0)
