"""Galar staging: label-parsing rows/s of pipi's columnar reader vs. a plain ``csv`` loop.

Stages the whole demo synthetic Galar release (``pipi synthesize galar --preset demo``) and
times, in the same process and on the same files:

* pipi: :func:`pipi.data.staging.galar_labelfile.read_label_files` (pyarrow, files of one header
  parsed in one call, int8 columns, every check) plus :func:`assign_classes` (the Kvasir
  class of every frame), as ``stage_galar`` runs them; also the same reader called file by
  file, to show the fixed per-call cost that batching removes;
* baseline: a ``csv.reader`` loop converting every cell with ``int`` into numpy arrays (no
  checks, no classes), the way a row-at-a-time script reads the files.

The demo release has about 90 frames per video; the real one about 44,000 (3.5 M frames in
80 videos). ``--rows-per-video`` therefore also times label files enlarged to that size (the
demo rows tiled, frame numbers renumbered), written to a temporary folder.

    .venv/bin/python benchmarks/bench_galar_stage.py [--release DIR] [--rows-per-video 44000]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from pipi.data.staging import stage_galar
from pipi.data.staging.galar_labelfile import read_label_files
from pipi.data.staging.galar_mapping import assign_classes, load_mapping
from pipi.data.synth import synthesize_galar
from pipi.paths import pipi_home


def csv_loop(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Row-at-a-time baseline: csv.reader, int() per cell."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = [c.strip() for c in next(reader)]
        k = header.index("frame")
        idx = [i for i, c in enumerate(header) if c not in ("index", "frame")]
        frames, values = [], []
        for row in reader:
            frames.append(int(row[k]))
            values.append([int(row[i]) for i in idx])
    return np.asarray(frames, np.int64), np.asarray(values, np.int8)


def pipi_batched(files: list[Path], mapping) -> int:
    tables = read_label_files(files)
    for t in tables:
        assign_classes(t, mapping)
    return sum(t.frame.shape[0] for t in tables)


def pipi_per_file(files: list[Path], mapping) -> int:
    return sum(pipi_batched([p], mapping) for p in files)


def csv_all(files: list[Path]) -> int:
    return sum(csv_loop(p)[0].shape[0] for p in files)


def rows_per_s(fn, repeat: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - t0)
    return rows / best, rows


def enlarge(files: list[Path], dest: Path, rows: int) -> list[Path]:
    """Label files of ``rows`` rows each: the source rows tiled, index and frame renumbered."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for p in files:
        lines = p.read_text().splitlines()
        header, body = lines[0], [ln.split(",") for ln in lines[1:]]
        cols = header.split(",")
        i_idx, i_frame = cols.index("index"), cols.index("frame")
        with open(dest / p.name, "w") as fh:
            fh.write(header + "\n")
            for n in range(rows):
                cells = list(body[n % len(body)])
                cells[i_idx], cells[i_frame] = str(n), str(n)
                fh.write(",".join(cells) + "\n")
        out.append(dest / p.name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", type=Path, help="a Galar-format release (default: demo synthetic)")
    ap.add_argument("--rows-per-video", type=int, default=44_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    release = args.release
    if release is None:
        release = pipi_home() / "releases" / "galar-synthetic-demo-s0"
        if not (release / "metadata.csv").is_file():
            t0 = time.perf_counter()
            synthesize_galar(release, preset="demo", seed=0, progress=False)
            print(f"synthesized the demo Galar release in {time.perf_counter() - t0:.1f} s")
    files = sorted((release / "Labels").glob("*.csv"))
    mapping = load_mapping()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = stage_galar(release, Path(tmp) / "staged", progress=False)
        dt = time.perf_counter() - t0
        print(f"release: {release}")
        print(f"stage_galar: {len(files)} videos, {res.manifest['label_rows']:,} label rows, "
              f"{len(res.frames):,} frames staged in {dt:.2f} s "
              f"({len(res.frames) / dt:,.0f} frames/s, images verified and hashed)")

        print("\nlabel parsing (same process, same files, best of --repeat):")
        print(f"{'files':<24} {'rows':>10} {'pipi rows/s':>12} {'per-file':>12} "
              f"{'csv rows/s':>12} {'pipi/csv':>9}")
        sets = [("demo release", files)]
        if args.rows_per_video > 0:
            big = enlarge(files, Path(tmp) / "big", args.rows_per_video)
            sets.append((f"{args.rows_per_video:,} rows/video", big))
        for name, fs in sets:
            repeat = args.repeat if name == "demo release" else max(1, args.repeat // 2)
            ours, rows = rows_per_s(lambda fs=fs: pipi_batched(fs, mapping), repeat)
            single, _ = rows_per_s(lambda fs=fs: pipi_per_file(fs, mapping), repeat)
            base, _ = rows_per_s(lambda fs=fs: csv_all(fs), repeat)
            print(f"{name:<24} {rows:>10,} {ours:>12,.0f} {single:>12,.0f} {base:>12,.0f} "
                  f"{ours / base:>8.1f}x")
        shutil.rmtree(Path(tmp) / "big", ignore_errors=True)


if __name__ == "__main__":
    main()
