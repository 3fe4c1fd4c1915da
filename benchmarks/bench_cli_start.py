"""Benchmark: how fast pipi's doors open (issue 39).

Times whole processes, as a user's shell runs them, over paired rounds: ``python -c pass`` (the
interpreter alone, the baseline), ``pipi --help``, ``pipi stage --help``, ``pipi train --help``
and ``pipi calibrate --help`` (the widest option lists) and ``mlflow --help``
(MLflow's own door, for scale), and prints each one's median wall time, its ratio to the
baseline and its peak RSS. Targets (issue 39): ``pipi --help`` and ``pipi stage --help`` at
most 1.5 s on the 2-core machine.

    python benchmarks/bench_cli_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def _cmd(*args: str) -> list[str]:
    tool = BIN / args[0]
    return [str(tool) if tool.exists() else shutil.which(args[0]) or args[0], *args[1:]]


COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "pipi --help": _cmd("pipi", "--help"),
    "pipi stage --help": _cmd("pipi", "stage", "--help"),
    "pipi train --help": _cmd("pipi", "train", "--help"),
    "pipi calibrate --help": _cmd("pipi", "calibrate", "--help"),
    "mlflow --help": _cmd("mlflow", "--help"),
}


def _run(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, the child's own peak RSS in KB: ``os.wait4`` returns its rusage)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
    return wall, usage.ru_maxrss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    walls: dict[str, list[float]] = {k: [] for k in COMMANDS}
    rss: dict[str, list[int]] = {k: [] for k in COMMANDS}
    for _ in range(args.rounds):   # paired: every command once per round, in turn
        for name, cmd in COMMANDS.items():
            w, r = _run(cmd)
            walls[name].append(w)
            rss[name].append(r)
    base = statistics.median(walls["python -c pass"])
    print(f"{'command':<22} {'median s':>9} {'x python':>9} {'peak RSS MB':>12}"
          f"   (rounds: {args.rounds})")
    for name in COMMANDS:
        med = statistics.median(walls[name])
        print(f"{name:<22} {med:9.3f} {med / base:9.1f} {max(rss[name]) / 1024:12.0f}")
    ok = all(statistics.median(walls[k]) <= 1.5 for k in ("pipi --help", "pipi stage --help"))
    print("target (pipi --help, pipi stage --help <= 1.5 s):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
