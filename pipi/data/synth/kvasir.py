"""Kvasir-Capsule-format synthetic release (``synthesize_kvasir``; formats and design in
:mod:`pipi.data.synth`)."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from pipi.classes import ANATOMY, CLASSES, RELEASE_FOLDERS
from pipi.data.synth import render as R
from pipi.data.synth.common import (
    SEED_PLAN,
    SEED_VIDEO,
    SynthPreset,
    release_dir,
    resolve_preset,
    run_jobs,
    split_lengths,
    video_rng,
    worker_count,
)
from pipi.errors import ConfigError

log = logging.getLogger("pipi.data.synth")  # one logger for both writers

__all__ = ["KVASIR_HEADER", "KVASIR_PRESETS", "MIN_VIDEOS_PER_CLASS", "synthesize_kvasir"]


#: Kvasir-format presets: ``tiny`` for tests (seconds), ``demo`` the embedded default data
#: (43 videos like the real release, a few thousand frames, a minute or two on 2 cores).
KVASIR_PRESETS: dict[str, SynthPreset] = {
    "tiny": SynthPreset(videos=14, frames_per_video=24, size=64),
    "demo": SynthPreset(videos=43, frames_per_video=84, size=128),
}

#: Header of Kvasir-Capsule's metadata.csv (semicolon-delimited).
KVASIR_HEADER: tuple[str, ...] = (
    "filename", "video_id", "frame_number", "finding_category", "finding_class",
    "x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4",
)

#: Every evaluable class lives in at least this many videos (the staging split pins classes
#: seen in fewer than 3 videos to train).
MIN_VIDEOS_PER_CLASS = 5

# Kvasir plan: class -> (share of videos holding it, frames per segment at 84 frames/video).
# Ordered like the paper's count table (Ileocecal valve, Reduced Mucosal View and Pylorus
# most frequent after Normal; Erythema least frequent of the evaluable classes).
_KVASIR_FINDINGS: dict[str, tuple[float, float]] = {
    "Ileocecal valve": (0.75, 9.0),
    "Reduced Mucosal View": (0.75, 7.0),
    "Pylorus": (0.70, 5.0),
    "Angiectasia": (0.55, 4.0),
    "Ulcer": (0.55, 4.0),
    "Foreign Body": (0.50, 3.5),
    "Lymphangiectasia": (0.50, 3.5),
    "Erosion": (0.50, 3.0),
    "Blood - fresh": (0.50, 3.0),
    "Erythema": (0.40, 2.5),
}
# The three classes of a single video each, with their frames at 84 frames/video.
_KVASIR_SINGLE: dict[str, float] = {"Polyp": 8.0, "Blood - hematin": 4.0, "Ampulla of Vater": 3.0}
_LESIONS = frozenset(
    {"Angiectasia", "Blood - fresh", "Blood - hematin", "Erosion", "Erythema", "Foreign Body",
     "Lymphangiectasia", "Polyp", "Ulcer"}
)
_SECTION_OF = {"Pylorus": "stomach", "Ileocecal valve": "colon"}
_JPEG_QUALITY = 90


# --------------------------------------------------------------------------------------------
# Kvasir-Capsule format
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    cls: str  # primary class of every frame
    start: int  # first frame number
    length: int
    bbox: bool  # annotate the finding's bounding box in metadata
    extra: dict[int, str] = field(default_factory=dict)  # frame offset -> second class


@dataclass(frozen=True)
class _KvasirVideo:
    index: int
    video_id: str
    segments: tuple[_Segment, ...]


def _plan_kvasir(cfg: SynthPreset, seed: int) -> list[_KvasirVideo]:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), SEED_PLAN, 1]))
    n, fpv = cfg.videos, cfg.frames_per_video
    scale = fpv / 84.0
    members: dict[str, set[int]] = {}
    for cls, (share, _) in _KVASIR_FINDINGS.items():
        k = min(n, max(MIN_VIDEOS_PER_CLASS, round(share * n)))
        members[cls] = set(rng.choice(n, size=k, replace=False).tolist())
    singles = rng.choice(n, size=min(n, len(_KVASIR_SINGLE)), replace=False).tolist()
    for i, cls in enumerate(_KVASIR_SINGLE):
        members[cls] = {int(singles[i % len(singles)])}

    ids: set[str] = set()
    videos = []
    for v in range(n):
        while (vid := rng.bytes(8).hex()) in ids:
            pass
        ids.add(vid)
        total = max(8, round(fpv * rng.uniform(0.8, 1.2)))
        found = []
        for cls, (_, per) in _KVASIR_FINDINGS.items():
            if v in members[cls]:
                found.append((cls, max(2, round(per * scale * rng.uniform(0.6, 1.4)))))
        for cls, per in _KVASIR_SINGLE.items():
            if v in members[cls]:
                found.append((cls, max(2, round(per * scale * rng.uniform(0.8, 1.2)))))
        used = sum(length for _, length in found)
        normal = max(total - used, max(4, round(0.35 * total)))
        # Order along the bowel: pylorus and papilla first, ileocecal valve last.
        head = [f for f in found if f[0] in ("Pylorus", "Ampulla of Vater")]
        tail = [f for f in found if f[0] == "Ileocecal valve"]
        middle = [f for f in found if f not in head and f not in tail]
        rng.shuffle(middle)
        head.sort(key=lambda f: f[0] != "Pylorus")
        chunks = split_lengths(rng, normal, len(middle) + 1, 2)
        order: list[tuple[str, int]] = list(head)
        for i, f in enumerate(middle):
            if i < len(chunks):
                order.append(("Normal clean mucosa", chunks[i]))
            order.append(f)
        order.extend(("Normal clean mucosa", c) for c in chunks[len(middle):])
        order.extend(tail)
        frame = int(rng.integers(50, 4000))
        segs = []
        for cls, length in order:
            if segs:
                frame += 0 if rng.random() < 0.35 else int(rng.integers(5, 800))
            segs.append(_Segment(cls, frame, length, bool(cls in _LESIONS and rng.random() < 0.6)))
            frame += length
        videos.append(_KvasirVideo(v, vid, tuple(segs)))

    # A few frames carry an anatomical landmark and a finding (two metadata rows).
    n_multi = min(4, max(2, n // 12))
    candidates = [(vi, si) for vi, vid in enumerate(videos) for si, s in enumerate(vid.segments)
                  if s.cls in ("Pylorus", "Ileocecal valve")]
    picks = rng.permutation(len(candidates))[:n_multi]
    second_choices = ("Erosion", "Erosion", "Ulcer", "Erythema")
    for j, p in enumerate(sorted(picks.tolist())):
        vi, si = candidates[p]
        seg = videos[vi].segments[si]
        extra = {int(rng.integers(0, seg.length)): second_choices[j % len(second_choices)]}
        segs = list(videos[vi].segments)
        segs[si] = _Segment(seg.cls, seg.start, seg.length, seg.bbox, extra)
        videos[vi] = _KvasirVideo(vi, videos[vi].video_id, tuple(segs))
    return videos


def _category(cls: str) -> str:
    return "Anatomy" if cls in ANATOMY else "Luminal"


def _bbox_cells(bbox) -> list[str]:
    if bbox is None:
        return [""] * 8
    x0, y0, x1, y1 = bbox
    return [str(v) for v in (x0, y0, x1, y0, x1, y1, x0, y1)]


def _render_kvasir_video(job: tuple) -> list[list[str]]:
    """Render and write one video's frames; return its metadata rows."""
    root, video, size, seed = job
    root = Path(root)
    rng = video_rng(seed, SEED_VIDEO, video.index)
    look = R.random_look(rng)
    optics = R.OPTICS["kvasir"]
    rows: list[list[str]] = []
    for seg in video.segments:
        scene = R.new_scene(rng, side=size, section=_SECTION_OF.get(seg.cls, "small intestine"),
                            look=look, length=seg.length)
        for t in range(seg.length):
            second = seg.extra.get(t)
            findings = (seg.cls,) if second is None else (seg.cls, second)
            fr = R.render_frame(findings, look=look, optics=optics, scene=scene, t=t, rng=rng)
            frame_no = seg.start + t
            fname = f"{video.video_id}_{frame_no}.jpg"
            buf = io.BytesIO()
            Image.fromarray(fr.image).save(buf, format="JPEG", quality=_JPEG_QUALITY)
            data = buf.getvalue()
            for cls in findings:
                (root / RELEASE_FOLDERS[cls] / fname).write_bytes(data)
            box = fr.bbox if (seg.bbox and seg.cls in _LESIONS) else None
            rows.append([fname, video.video_id, str(frame_no), _category(seg.cls), seg.cls]
                        + _bbox_cells(box))
            if second is not None:
                box2 = fr.bbox if second in _LESIONS and rng.random() < 0.6 else None
                rows.append([fname, video.video_id, str(frame_no), _category(second), second]
                            + _bbox_cells(box2))
    return rows


def synthesize_kvasir(
    out: Path,
    *,
    preset: str = "tiny",
    videos: int | None = None,
    frames_per_video: int | None = None,
    size: int | None = None,
    seed: int = 0,
    progress: bool = True,
    workers: int | None = None,
) -> Path:
    """Write a synthetic release in the exact Kvasir-Capsule format.

    Parameters
    ----------
    out : Path
        Release directory to create (must not exist or be empty). Gets
        ``labelled_images/<class folder>/<video id>_<frame>.jpg`` and ``metadata.csv``.
    preset : {"tiny", "demo"}
        Size preset (:data:`KVASIR_PRESETS`).
    videos, frames_per_video, size : int, optional
        Override the preset's number of videos (>= 4), mean frames per video and frame side.
    seed : int
        Same seed, same bytes.
    progress : bool
        Show a progress bar.
    workers : int, optional
        Worker processes; default 1 for small releases, else up to 2. Does not change the output.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    DataError
        ``out`` exists and is not empty.
    ConfigError
        An unknown preset or an invalid size.
    """
    cfg = resolve_preset(KVASIR_PRESETS, preset, videos, frames_per_video, size, seed)
    if cfg.videos < 4:
        raise ConfigError(
            f"videos must be >= 4 for a Kvasir-format release (three classes live in single "
            f"videos and the split needs train/val/test), got {cfg.videos}"
        )
    out = Path(out)
    with release_dir(out) as tmp:
        plan = _plan_kvasir(cfg, seed)
        images = tmp / "labelled_images"
        for cls in CLASSES:
            (images / RELEASE_FOLDERS[cls]).mkdir(parents=True)
        n_frames = sum(s.length for v in plan for s in v.segments)
        log.info("synthesizing Kvasir-format release: %d videos, %d frames at %d px -> %s",
                 cfg.videos, n_frames, cfg.size, out)
        jobs = [(str(images), v, cfg.size, seed) for v in plan]
        per_video = run_jobs(_render_kvasir_video, jobs, workers=worker_count(workers, n_frames),
                             progress=progress, desc="kvasir videos")
        with open(tmp / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, delimiter=";", lineterminator="\n")
            w.writerow(KVASIR_HEADER)
            for rows in per_video:
                w.writerows(rows)
    return out
