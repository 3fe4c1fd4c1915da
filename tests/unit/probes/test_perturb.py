"""Tests of pipi.probes.perturb: the paper's nine test-image perturbations and the baseline."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pipi.errors import ConfigError
from pipi.probes.perturb import (
    PERTURBATIONS,
    apply_perturbation,
    get_perturbation,
    list_perturbations,
    parse_perturbations,
)

PAPER = ["jpeg25", "jpeg50", "jpeg80", "brightness-20", "brightness+20",
         "noise0.02", "noise0.05", "noise0.10"]


def _frames(n=6, size=32, seed=0) -> np.ndarray:
    """Smooth, textured uint8 frames (N, H, W, 3): JPEG behaves as on real images."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = []
    for _ in range(n):
        f = rng.uniform(1, 4, 3)
        img = np.stack([np.sin(2 * np.pi * (f[c] * xx + yy * c)) for c in range(3)], -1)
        img = 127.5 + 100 * img + rng.normal(0, 8, img.shape)
        out.append(np.clip(img, 0, 255))
    return np.asarray(out, dtype=np.uint8)


def _keys(n):
    return [f"video_{i // 3}/frame_{i:04d}.jpg" for i in range(n)]


def test_registry_holds_the_paper_set_plus_baseline():
    # The paper says "nine perturbations" but lists eight (3 JPEG, 2 brightness, 3 noise);
    # with the baseline they are the nine rows of its robustness table.
    assert len(list_perturbations(include_baseline=False)) == 8
    assert len(list_perturbations()) == 9
    assert set(PAPER) < set(PERTURBATIONS)
    assert set(PERTURBATIONS) == set(PAPER) | {"none"}
    assert list_perturbations()[0] == "none"
    assert get_perturbation("jpeg25").level == 25
    assert get_perturbation("noise0.10").level == pytest.approx(0.10)
    assert get_perturbation("brightness-20").level == pytest.approx(-0.2)
    assert [p.stochastic for p in PERTURBATIONS.values()].count(True) == 3


@pytest.mark.parametrize("name", list(PERTURBATIONS))
def test_shape_dtype_and_input_untouched(name):
    x = _frames()
    before = x.copy()
    out = apply_perturbation(x, name, keys=_keys(len(x)))
    assert out.shape == x.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(x, before)
    assert out is not x


def test_none_is_identity():
    x = _frames()
    np.testing.assert_array_equal(apply_perturbation(x, "none", keys=_keys(len(x))), x)


@pytest.mark.parametrize("name", PAPER)
def test_every_perturbation_changes_pixels(name):
    x = _frames()
    assert (apply_perturbation(x, name, keys=_keys(len(x))) != x).any()


@pytest.mark.parametrize("name", ["noise0.02", "noise0.10", "jpeg25", "brightness+20"])
def test_deterministic_across_batch_composition_and_order(name):
    x, keys = _frames(8), _keys(8)
    full = apply_perturbation(x, name, keys=keys, seed=3)
    perm = np.random.default_rng(1).permutation(8)
    shuffled = apply_perturbation(x[perm], name, keys=[keys[i] for i in perm], seed=3)
    np.testing.assert_array_equal(shuffled, full[perm])
    # in batches of different sizes, and a frame alone
    parts = [apply_perturbation(x[a:b], name, keys=keys[a:b], seed=3)
             for a, b in ((0, 3), (3, 4), (4, 8))]
    np.testing.assert_array_equal(np.concatenate(parts), full)
    # in another "run" (a fresh call with the same seed)
    np.testing.assert_array_equal(apply_perturbation(x, name, keys=keys, seed=3), full)


def test_noise_depends_on_seed_key_and_strength_only():
    x = np.full((2, 16, 16, 3), 128, np.uint8)
    same_key = apply_perturbation(x, "noise0.05", keys=["k", "k"])
    np.testing.assert_array_equal(same_key[0], same_key[1])  # same key -> same noise
    diff_key = apply_perturbation(x, "noise0.05", keys=["k", "j"])
    assert (diff_key[0] != diff_key[1]).any()
    other_seed = apply_perturbation(x, "noise0.05", keys=["k", "k"], seed=1)
    assert (other_seed[0] != same_key[0]).any()
    # two strengths do not share a stream either (seeded by the perturbation name too)
    a = apply_perturbation(x, "noise0.02", keys=["k", "k"]).astype(int) - 128
    b = apply_perturbation(x, "noise0.10", keys=["k", "k"]).astype(int) - 128
    assert np.corrcoef(a[0].ravel(), b[0].ravel())[0, 1] < 0.5


@pytest.mark.parametrize("name,sigma", [("noise0.02", 0.02), ("noise0.05", 0.05),
                                        ("noise0.10", 0.10)])
def test_noise_has_the_stated_sigma(name, sigma):
    x = np.full((4, 64, 64, 3), 128, np.uint8)  # mid-grey: no clipping
    out = apply_perturbation(x, name, keys=_keys(4))
    d = (out.astype(np.float64) - 128) / 255.0
    assert abs(d.mean()) < 0.1 * sigma
    assert d.std() == pytest.approx(sigma, rel=0.05)
    # independent per channel: the channels' noises are uncorrelated
    assert abs(np.corrcoef(d[..., 0].ravel(), d[..., 1].ravel())[0, 1]) < 0.05


def test_noise_is_clipped():
    x = np.zeros((2, 32, 32, 3), np.uint8)
    x[1] = 255
    out = apply_perturbation(x, "noise0.10", keys=["a", "b"])
    assert out[0].min() == 0 and out[0].max() > 0
    assert out[1].max() == 255 and out[1].min() < 255


def test_brightness_is_relative_and_clipped():
    x = np.array([[[[0, 100, 250]]]], np.uint8)  # (1, 1, 1, 3)
    up = apply_perturbation(x, "brightness+20", keys=["a"])
    down = apply_perturbation(x, "brightness-20", keys=["a"])
    assert up.ravel().tolist() == [0, 120, 255]  # 250 * 1.2 = 300 -> 255
    assert down.ravel().tolist() == [0, 80, 200]


def test_jpeg_matches_pillow_and_quality_orders_error():
    x = _frames(4, size=64)
    err = {}
    for q in (25, 50, 80):
        out = apply_perturbation(x, f"jpeg{q}", keys=_keys(4))
        err[q] = np.abs(out.astype(int) - x.astype(int)).mean()
        # the same as a manual Pillow round trip (default chroma subsampling)
        import io

        buf = io.BytesIO()
        Image.fromarray(x[0]).save(buf, format="JPEG", quality=q)
        np.testing.assert_array_equal(out[0], np.asarray(Image.open(buf).convert("RGB")))
    assert err[25] > err[50] > err[80] > 0


def test_parse_perturbations():
    assert parse_perturbations("all") == list(PERTURBATIONS)
    assert parse_perturbations(" noise0.05 , jpeg25 ") == ["jpeg25", "noise0.05"]
    assert parse_perturbations(["brightness+20", "none", "none"]) == ["none", "brightness+20"]
    with pytest.raises(ConfigError, match=r"Unknown perturbation.*jpeg30.*Available.*jpeg25"):
        parse_perturbations("jpeg25,jpeg30")
    with pytest.raises(ConfigError, match="No perturbation"):
        parse_perturbations(" , ")


def test_bad_inputs_are_refused_with_a_fix():
    x = _frames(2)
    with pytest.raises(ConfigError, match="Available"):
        apply_perturbation(x, "blur", keys=_keys(2))
    with pytest.raises(ValueError, match="uint8"):
        apply_perturbation(x.astype(np.float32), "none", keys=_keys(2))
    with pytest.raises(ValueError, match="keys"):
        apply_perturbation(x, "noise0.02", keys=_keys(1))
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
        apply_perturbation(x[..., :1], "none", keys=_keys(2))


def test_noise_stream_is_pinned():
    """The noise of a frame never changes silently: reused robustness runs depend on it."""
    x = np.full((1, 2, 2, 3), 128, np.uint8)
    out = apply_perturbation(x, "noise0.10", keys=["video_0/frame_0000.jpg"], seed=0)
    assert out.ravel().tolist() == [122, 91, 70, 175, 133, 135, 115, 135, 144, 133, 147, 136]
