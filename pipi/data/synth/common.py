"""Shared pieces of the synthetic-release writers (:mod:`pipi.data.synth`,
:mod:`pipi.data.synth.galar`): release sizes, seeding, the atomic output directory
(:func:`release_dir`) and the per-video job runner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path

import numpy as np

from pipi.data.progress import tqdm
from pipi.errors import ConfigError, DataError
from pipi.paths import publish_dir, staging_dir

__all__ = [
    "SEED_PLAN",
    "SEED_VIDEO",
    "SynthPreset",
    "release_dir",
    "resolve_preset",
    "run_jobs",
    "split_lengths",
    "video_rng",
    "worker_count",
]

#: Domain separation of the plan and per-video generators.
SEED_PLAN, SEED_VIDEO = 0x504C414E, 0x56494445


@dataclass(frozen=True)
class SynthPreset:
    """Size of a synthetic release; explicit arguments of the synthesizers override it."""

    videos: int  # number of videos (= patients)
    frames_per_video: int  # mean labelled frames per video (each video varies by +-20 %)
    size: int  # frame side in pixels (a vendor's optics may scale it, Galar only)

    def __post_init__(self) -> None:
        _check_sizes(self.videos, self.frames_per_video, self.size)


def _check_sizes(videos: int, frames_per_video: int, size: int) -> None:
    for name, val, lo in (("videos", videos, 2), ("frames_per_video", frames_per_video, 8),
                          ("size", size, 32)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {val!r}")
    if size > 1024:
        raise ConfigError(f"size must be <= 1024 pixels, got {size}")


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def resolve_preset(
    presets: dict[str, SynthPreset], preset: str, videos, frames_per_video, size, seed,
) -> SynthPreset:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if preset not in presets:
        raise ConfigError(f"Unknown preset {preset!r}. Available: {sorted(presets)}")
    p = presets[preset]
    v = p.videos if videos is None else videos
    f = p.frames_per_video if frames_per_video is None else frames_per_video
    s = p.size if size is None else size
    _check_sizes(v, f, s)
    return SynthPreset(videos=int(v), frames_per_video=int(f), size=int(s))


@contextlib.contextmanager
def release_dir(out: Path) -> Iterator[Path]:
    """A fresh temporary folder beside ``out``, renamed to ``out`` when the block succeeds
    and removed when it fails; a non-empty ``out`` is refused up front."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(
            f"{out} already exists and is not an empty directory; refusing to overwrite it. "
            "Choose another --out or remove it first."
        )
    tmp = staging_dir(out, ".partial")
    try:
        yield tmp
        publish_dir(tmp, out, doing="synthesizing")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def worker_count(workers: int | None, n_frames: int) -> int:
    if workers is None:
        return 1 if n_frames < 1500 else max(1, min(2, os.cpu_count() or 1))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


def run_jobs(fn, jobs: list, *, workers: int, progress: bool, desc: str) -> list:
    """``[fn(j) for j in jobs]``, in a process pool when ``workers > 1``; results in job order."""
    results: list = [None] * len(jobs)
    bar = tqdm(total=len(jobs), desc=desc, unit="video", disable=not progress)
    try:
        if workers == 1 or len(jobs) == 1:
            for i, job in enumerate(jobs):
                results[i] = fn(job)
                bar.update(1)
        else:
            # fork where available (as torch's DataLoader does): children only run numpy/PIL
            # and need no importable __main__; spawn elsewhere.
            method = "fork" if "fork" in get_all_start_methods() else "spawn"
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context(method)) as ex:
                futs = {ex.submit(fn, job): i for i, job in enumerate(jobs)}
                for fut in as_completed(futs):
                    results[futs[fut]] = fut.result()
                    bar.update(1)
    finally:
        bar.close()
    return results


def video_rng(seed: int, kind: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), kind, index]))


def split_lengths(rng: np.random.Generator, total: int, parts: int, minimum: int) -> list[int]:
    """``parts`` positive lengths summing to ``total``, each >= ``minimum`` when possible."""
    parts = max(1, min(parts, total // max(1, minimum)))
    base = [minimum] * parts
    rest = total - minimum * parts
    if rest > 0:
        base = [b + int(x) for b, x in zip(base, rng.multinomial(rest, np.ones(parts) / parts))]
    return base
