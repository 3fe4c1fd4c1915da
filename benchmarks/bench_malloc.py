"""Benchmark: the process's allocator keeping freed memory (``pipi.runtime.keep_freed_memory``)
against glibc's default, on an EfficientNet-B0 forward and training step on the CPU.

Each setting runs in a process of its own (malloc's settings are per process): the same
network, input and batches, first with ``PIPI_MALLOC=system`` (glibc's default: a large
block is mapped on its own and unmapped when freed), then with freed memory kept. Prints
frames/s of the forward and of the training step, the kernel's share of the CPU time, the
page faults and the peak resident memory of each process, and the speed ratio.

    python benchmarks/bench_malloc.py [--image-size 224] [--batch-size 64] [--batches 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _child(args) -> None:
    from pipi.runtime import keep_freed_memory

    kept = keep_freed_memory()
    import torch
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.efficientnet_b0(weights=None, num_classes=14)
    x = torch.rand(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 14, (args.batch_size,))
    rates = {}
    net.eval()
    with torch.inference_mode():
        net(x)   # warm-up
        t0 = time.perf_counter()
        for _ in range(args.batches):
            net(x)
        rates["forward"] = args.batches * len(x) / (time.perf_counter() - t0)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    xs, ys = x[: args.batch_size // 2], y[: args.batch_size // 2]   # a training batch
    for i in range(args.batches // 2 + 1):
        if i == 1:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(xs), ys).backward()
        opt.step()
    rates["train step"] = args.batches // 2 * len(xs) / (time.perf_counter() - t0)
    print(json.dumps({"kept": kept, **rates}))


def _run(setting: str, args) -> dict:
    env = {**os.environ, "PIPI_MALLOC": "system" if setting == "system" else ""}
    cmd = [sys.executable, __file__, "--child", "--image-size", str(args.image_size),
           "--batch-size", str(args.batch_size), "--batches", str(args.batches)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read()
    if status != 0:
        raise SystemExit(f"{setting}: the child failed")
    got = json.loads(out.strip().splitlines()[-1])
    got.update(user=usage.ru_utime, system=usage.ru_stime, faults=usage.ru_minflt,
               rss=usage.ru_maxrss // 1024)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return 0
    print(f"bench_malloc: efficientnet_b0, {args.image_size} px, forward batch "
          f"{args.batch_size}, train batch {args.batch_size // 2}, {args.batches} batches, "
          f"{os.cpu_count()} CPUs")
    print(f"{'allocator':<22} {'forward f/s':>11} {'train f/s':>9} {'kernel CPU':>10} "
          f"{'page faults':>12} {'peak RSS':>9}")
    got = {}
    for setting in ("system", "kept"):
        r = got[setting] = _run(setting, args)
        name = "glibc default" if setting == "system" else (
            "freed memory kept" if r["kept"] else "kept (not applied)")
        share = r["system"] / (r["system"] + r["user"])
        print(f"{name:<22} {r['forward']:>11.1f} {r['train step']:>9.1f} {share:>10.0%} "
              f"{r['faults']:>12,} {r['rss']:>6} MB")
    print(f"ratio kept / default: forward {got['kept']['forward'] / got['system']['forward']:.2f},"
          f" train step {got['kept']['train step'] / got['system']['train step']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
