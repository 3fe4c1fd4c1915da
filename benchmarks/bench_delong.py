"""Benchmark: Sun & Xu's midrank DeLong vs the naive O(n_pos x n_neg) definition.

Paper-scale data: 6,423 test frames, 14 classes scored one-vs-rest, 60 paired comparisons
of two arms (e.g. 6 seeds x 10 arm pairs), each tested on every class (840 DeLong tests).
Prints both timings and their ratio, and asserts that both give the same AUCs, variances,
covariances and z-scores to 1e-10.

    python benchmarks/bench_delong.py [--frames 6423] [--classes 14] [--comparisons 60]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import special

from pipi.stats import delong_test


def naive_delong(y: np.ndarray, ref: np.ndarray, new: np.ndarray) -> tuple[float, ...]:
    """(auc_ref, auc_new, var_ref, var_new, cov, z) from the (m, n) Mann-Whitney kernel."""
    pos = y == 1
    m, n = int(pos.sum()), int((~pos).sum())
    aucs, v10, v01 = [], [], []
    for s in (ref, new):
        x, yy = s[pos], s[~pos]
        psi = (x[:, None] > yy[None, :]) + 0.5 * (x[:, None] == yy[None, :])  # (m, n)
        aucs.append(psi.mean())
        v10.append(psi.mean(axis=1))
        v01.append(psi.mean(axis=0))
    s10 = np.cov(np.stack(v10))  # (2, 2)
    s01 = np.cov(np.stack(v01))
    cov = s10 / m + s01 / n
    z = (aucs[1] - aucs[0]) / np.sqrt(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
    return aucs[0], aucs[1], cov[0, 0], cov[1, 1], cov[0, 1], z


def make_data(frames: int, classes: int, comparisons: int, seed: int = 0):
    """Imbalanced labels and float32 softmax scores (ties included) of paired arms."""
    rng = np.random.default_rng(seed)
    freq = 0.6 ** np.arange(classes)  # a long tail, like Kvasir-Capsule
    y = rng.choice(classes, size=frames, p=freq / freq.sum())
    onehot = np.eye(classes)[y]
    base = rng.normal(size=(frames, classes))
    arms = []
    for _ in range(comparisons + 1):
        logits = base + 1.2 * onehot + 0.8 * rng.normal(size=(frames, classes))
        arms.append(special.softmax(logits, axis=1).astype(np.float32).astype(float))
    return y, arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=6423)
    parser.add_argument("--classes", type=int, default=14)
    parser.add_argument("--comparisons", type=int, default=60)
    args = parser.parse_args()
    y, arms = make_data(args.frames, args.classes, args.comparisons)
    pairs = [(0, i + 1) for i in range(args.comparisons)]
    tests = [(a, b, k) for a, b in pairs for k in range(args.classes)]

    t0 = time.perf_counter()
    fast = []
    for a, b, k in tests:
        r = delong_test(y == k, arms[a][:, k], arms[b][:, k])
        fast.append(
            (r.auc_ref, r.auc_new, r.variance_ref, r.variance_new, r.covariance, r.statistic)
        )
    t_fast = time.perf_counter() - t0

    t0 = time.perf_counter()
    naive = [naive_delong((y == k).astype(int), arms[a][:, k], arms[b][:, k]) for a, b, k in tests]
    t_naive = time.perf_counter() - t0

    fast_a, naive_a = np.array(fast), np.array(naive)
    np.testing.assert_allclose(fast_a, naive_a, rtol=1e-10, atol=1e-12)
    print(
        f"{len(tests)} DeLong tests ({args.comparisons} comparisons x {args.classes} classes, "
        f"{args.frames} frames; class sizes {np.bincount(y).min()}..{np.bincount(y).max()})"
    )
    print(f"fast midrank (Sun & Xu): {t_fast:8.3f} s  ({1e3 * t_fast / len(tests):.2f} ms/test)")
    print(f"naive O(m n) kernel:     {t_naive:8.3f} s  ({1e3 * t_naive / len(tests):.2f} ms/test)")
    print(
        f"speed-up: {t_naive / t_fast:.1f}x; max |difference| "
        f"{np.abs(fast_a - naive_a).max():.2e} (identical to 1e-10)"
    )


if __name__ == "__main__":
    main()
