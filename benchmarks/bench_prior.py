"""Benchmark ``pipi.prior.prior_channels`` against a per-image ``torch.quantile`` baseline.

Run: ``.venv/bin/python benchmarks/bench_prior.py [--batch 64] [--size 224] [--repeat 7] [--check]``

The baseline is the published implementation's approach: a loop over the frames of the batch
with one ``torch.quantile`` call (a full sort) per frame for the 1st/99th percentiles, then the
same formula. Both run on the CPU with torch's default number of threads. Timings are medians
over ``--repeat`` runs after a warm-up; the outputs must agree to 1e-5. With ``--check`` the
script exits with status 1 when the speed-up is below ``--min-ratio`` (default 5).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipi.prior import prior_channels


def baseline_prior(rgb01: torch.Tensor, alpha: float = 4.0) -> torch.Tensor:
    """The paper's prior with a per-image ``torch.quantile`` (the published code's approach)."""
    bsz, _, h, w = rgb01.shape
    ys = torch.arange(h, dtype=rgb01.dtype) - (h - 1) / 2
    xs = torch.arange(w, dtype=rgb01.dtype) - (w - 1) / 2
    r = torch.sqrt(ys[:, None] ** 2 + xs[None, :] ** 2)
    phi = torch.exp(-r / (0.25 * math.hypot(h - 1, w - 1)))
    q = torch.tensor([0.01, 0.99], dtype=rgb01.dtype)
    out = torch.empty(bsz, 2, h, w, dtype=rgb01.dtype)
    for i in range(bsz):
        red, green, blue = rgb01[i]
        hb = red / torch.clamp(red + green + blue, min=1e-6)
        lo, hi = torch.quantile(hb.flatten(), q, interpolation="linear")
        if hi - lo > 1e-6:
            hnorm = (torch.clamp(hb, lo, hi) - lo) / (hi - lo)
        else:
            hnorm = torch.full_like(hb, 0.5)
        out[i, 0] = torch.sigmoid(alpha * (hnorm - 0.5)) * phi
        out[i, 1] = phi
    return out


def median_ms(fn, x: torch.Tensor, *, warmup: int, repeat: int) -> float:
    """Median wall time of ``fn(x)`` in milliseconds."""
    for _ in range(warmup):
        fn(x)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit 1 if ratio < --min-ratio")
    parser.add_argument("--min-ratio", type=float, default=5.0)
    args = parser.parse_args(argv)

    gen = torch.Generator().manual_seed(args.seed)
    x = torch.rand(args.batch, 3, args.size, args.size, generator=gen)

    fast_out = prior_channels(x)
    base_out = baseline_prior(x)
    max_diff = (fast_out - base_out).abs().max().item()
    if not max_diff <= 1e-5:
        print(f"outputs disagree: max abs diff {max_diff:.3g} > 1e-5")
        return 2

    fast = median_ms(prior_channels, x, warmup=args.warmup, repeat=args.repeat)
    base = median_ms(baseline_prior, x, warmup=args.warmup, repeat=args.repeat)
    ratio = base / fast
    print(
        f"batch {args.batch} x 3 x {args.size} x {args.size}, CPU, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )
    print(
        f"prior_channels: {fast:.1f} ms/batch ({args.batch / fast * 1e3:.0f} frames/s)  "
        f"quantile baseline: {base:.1f} ms/batch ({args.batch / base * 1e3:.0f} frames/s)  "
        f"ratio: {ratio:.1f}x  max abs diff: {max_diff:.2g}"
    )
    if args.check and ratio < args.min_ratio:
        print(f"FAIL: ratio {ratio:.1f}x < {args.min_ratio}x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
