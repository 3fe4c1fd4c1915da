"""Training throughput options (issue 15): device, precision, channels_last, determinism,
the device batch stream, and ``ablate -P parallel=N``, on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipi import tracking as pipi_tracking
from pipi.config import make_config, run_params, train_params
from pipi.errors import ConfigError
from pipi.runtime import (
    DeviceBatches,
    Runtime,
    resolve_runtime,
    runtime_of,
    weighted_cross_entropy,
)
from pipi.training.frames import FrameInputs, build_frame_model, predict_probs

ROOT = Path(__file__).resolve().parents[2]

CPU = torch.device("cpu")


def _images(n=24, size=32, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 3, size, size), dtype=np.uint8)


# --------------------------------------------------------------------------- options
def test_options_resolve_on_cpu_and_refuse_bad_values():
    rt = resolve_runtime()
    if not torch.cuda.is_available():
        assert rt == Runtime(CPU, "fp32", False, False, True)  # auto: fp32, NCHW on CPU
        with pytest.raises(ConfigError, match="device=cuda: torch sees no CUDA device"):
            resolve_runtime(device="cuda")
    assert resolve_runtime(device="cpu", precision="bf16", channels_last="true") == \
        Runtime(CPU, "bf16", True, False, True)
    # predicting on a oneDNN CPU: NHWC by default (a training run's layout is unchanged)
    assert resolve_runtime(device="cpu", profile="predict").channels_last == \
        torch.backends.mkldnn.is_available()
    assert not resolve_runtime(device="cpu", profile="predict", channels_last="false").channels_last
    for bad, match in (({"device": "tpu"}, "device='tpu'"), ({"precision": "fp8"}, "precision"),
                       ({"channels_last": "yes"}, "channels_last"),
                       ({"compile": "true"}, "compile='true'")):
        with pytest.raises(ConfigError, match=match):
            make_config(cell="a", profile="smoke", **bad)


def test_options_are_in_params_hash_and_recipe():
    base = make_config(cell="pi", profile="smoke", weights="none")
    fast = make_config(cell="pi", profile="smoke", weights="none", precision="bf16",
                       deterministic=False, channels_last="true", device="cpu", compile=True)
    p = run_params(fast)
    assert (p["device"], p["precision"], p["channels_last"], p["compile"],
            p["deterministic"]) == ("cpu", "bf16", "true", True, False)
    digest = "d" * 64
    assert pipi_tracking.config_hash(pipi_tracking.config_key(base, digest)) != \
        pipi_tracking.config_hash(pipi_tracking.config_key(fast, digest))
    tp = train_params(fast)
    assert {k: tp[k] for k in ("device", "precision", "channels_last", "compile",
                               "deterministic")} == {
        "device": "cpu", "precision": "bf16", "channels_last": "true", "compile": True,
        "deterministic": False}
    assert "precision" not in train_params(base)  # defaults stay out of the recipe


def test_device_batches_yield_the_requested_rows_in_order():
    imgs, labels = _images(10), np.arange(10) * 3
    order = [np.array([7, 2, 9]), np.array([0]), np.array([5, 1, 8, 3])]
    got = list(DeviceBatches(imgs, order, CPU, labels=labels))
    assert len(got) == 3
    for idx, (x, y) in zip(order, got):
        assert x.dtype == torch.uint8  # frames travel as uint8
        np.testing.assert_array_equal(x.numpy(), imgs[idx])
        np.testing.assert_array_equal(y.numpy(), labels[idx])
    assert list(DeviceBatches(imgs, [], CPU)) == []


def test_the_cpu_gather_runs_no_torch_operator_even_under_deterministic_algorithms():
    """Issue 40: DeviceBatches' worker thread gathers with NumPy only; a torch operator there
    (an index_select, or the memory fill torch.empty does under deterministic algorithms)
    started a second OpenMP team beside the training step's, 30% slower on 2 cores."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from pipi.runtime import _gather

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    images = np.random.default_rng(0).integers(0, 256, (20, 3, 4, 4), dtype=np.uint8)
    idx = np.array([7, 2, 19, 2, 0])
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with Ops() as ops:
            got = _gather(images, idx, pin=False)
        with Ops() as planted:   # the check sees the old form's operators
            torch.index_select(torch.from_numpy(images), 0, torch.from_numpy(idx),
                               out=torch.empty((5, 3, 4, 4), dtype=torch.uint8))
    finally:
        torch.use_deterministic_algorithms(before)
    # wrapping the NumPy result (torch.from_numpy) is all torch sees: no kernel runs
    assert set(ops.seen) <= {"aten.lift_fresh.default", "aten.detach.default"}, ops.seen
    assert any("index_select" in op for op in planted.seen)
    np.testing.assert_array_equal(got.numpy(), images[idx])


def test_weighted_cross_entropy_equals_torch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(32, 14, generator=g)
    y = torch.randint(0, 14, (32,), generator=g)
    w = torch.rand(14, generator=g)
    torch.testing.assert_close(weighted_cross_entropy(logits, y, w),
                               F.cross_entropy(logits, y, weight=w), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(weighted_cross_entropy(logits, y, None),
                               F.cross_entropy(logits, y), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- precision
def test_bf16_autocast_and_channels_last_predict_close_to_fp32():
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none", seed=3)
    torch.manual_seed(3)
    model = build_frame_model(cfg).eval()
    imgs = _images(24)
    seen = []
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    hook = conv.register_forward_hook(
        lambda m, args, out: seen.append((out.dtype, args[0].is_contiguous(
            memory_format=torch.channels_last) and not args[0].is_contiguous())))

    def probs(rt):
        seen.clear()
        return predict_probs(model, imgs, FrameInputs(cfg), device=CPU, runtime=rt,
                             batch_size=8)

    ref = probs(Runtime(CPU))
    assert set(seen) == {(torch.float32, False)}
    bf16 = probs(Runtime(CPU, "bf16"))
    assert set(seen) == {(torch.bfloat16, False)}  # the convolutions really ran in bf16
    model.to(memory_format=torch.channels_last)
    cl = probs(Runtime(CPU, "fp32", channels_last=True))
    assert set(seen) == {(torch.float32, True)}
    hook.remove()
    np.testing.assert_allclose(cl, ref, atol=1e-5)
    np.testing.assert_allclose(bf16, ref, atol=0.03)
    assert np.abs(bf16 - ref).max() > 0  # bf16 rounding is visible, so the path differs
    assert (bf16.argmax(1) == ref.argmax(1)).mean() >= 0.9


def test_runtime_of_prefers_the_explicit_device():
    cfg = make_config(cell="a", profile="smoke")
    assert runtime_of(cfg, device="cpu").device == CPU


# --------------------------------------------------------------------------- parallel


_HELD = """
import sys
from pipi.runtime import keep_freed_memory
kept = keep_freed_memory()
import numpy as np

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 >> 20

base = rss()
block = np.ones(256 << 20, np.uint8)   # 256 MB, every page touched
del block
print(kept, rss() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
@pytest.mark.parametrize("setting", ["", "system"])
def test_freed_memory_is_kept_for_the_next_batch_unless_asked_not_to(setting):
    """The allocator setting is per process, so each case is a fresh interpreter: with it,
    a freed 256 MB block stays in the process for reuse; with PIPI_MALLOC=system, glibc
    hands it back to the kernel at once, as it does by default."""
    r = subprocess.run([sys.executable, "-c", _HELD], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={**os.environ, "PIPI_MALLOC": setting})
    assert r.returncode == 0, r.stderr
    kept, held_mb = r.stdout.split()
    if setting == "system":
        assert kept == "False" and int(held_mb) < 16
    else:
        assert kept == "True" and int(held_mb) >= 250
