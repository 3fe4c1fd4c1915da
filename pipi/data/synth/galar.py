"""Galar-format synthetic release (``synthesize_galar``; formats in :mod:`pipi.data.synth`)."""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

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

__all__ = [
    "GALAR_CAPSULE_SYSTEMS",
    "GALAR_HEADER_27",
    "GALAR_HEADER_32",
    "GALAR_PRESETS",
    "GALAR_TO_KVASIR",
    "synthesize_galar",
]


#: Galar-format presets; ``demo`` holds ids >= 61 (the official Galar test videos).
GALAR_PRESETS: dict[str, SynthPreset] = {
    "tiny": SynthPreset(videos=8, frames_per_video=30, size=64),
    "demo": SynthPreset(videos=24, frames_per_video=90, size=128),
}

# --------------------------------------------------------------------------------------------
# Galar format
# --------------------------------------------------------------------------------------------

#: Galar's ``Capsule System`` values with their video counts in the real release.
GALAR_CAPSULE_SYSTEMS: dict[str, int] = {
    "PillCam SB3": 51, "Olympus": 22, "PillCam Colon2": 5, "PillCam SB2": 2,
}

_GALAR_LABELS: tuple[str, ...] = (
    "z-line", "pylorus", "ampulla of vater", "ileocecal valve", "section", "mouth", "esophagus",
    "stomach", "small intestine", "colon", "ulcer", "polyp", "active bleeding", "blood",
    "erythema", "erosion", "angiectasia", "IBD", "foreign body", "esophagitis", "varices",
    "hematin", "celiac", "cancer", "lymphangioectasis",
)
#: The 27-column header of ``Labels/<id>.csv`` (74 of the 80 real videos).
GALAR_HEADER_27: tuple[str, ...] = ("index",) + _GALAR_LABELS + ("frame",)
#: The 32-column header (6 real videos annotated for image quality too).
GALAR_HEADER_32: tuple[str, ...] = (
    "bubbles", "dirt", "no view", "reduced view", "good view",
) + GALAR_HEADER_27

#: The paper's Galar -> Kvasir mapping (datasets.md); the renderer draws these classes.
GALAR_TO_KVASIR: dict[str, str] = {
    "angiectasia": "Angiectasia",
    "active bleeding": "Blood - fresh",
    "hematin": "Blood - hematin",
    "erosion": "Erosion",
    "erythema": "Erythema",
    "foreign body": "Foreign Body",
    "ileocecal valve": "Ileocecal valve",
    "lymphangioectasis": "Lymphangiectasia",
    "polyp": "Polyp",
    "pylorus": "Pylorus",
    "ulcer": "Ulcer",
    "ampulla of vater": "Ampulla of Vater",
}
_GALAR_IMPLIES = {"active bleeding": ("blood",), "hematin": ("blood",)}
# Small-bowel findings: (label columns, share of videos, frames per segment at 90 frames).
_GALAR_SI: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("angiectasia",), 1.0, 3.0),
    (("active bleeding",), 1.0, 3.0),
    (("lymphangioectasis",), 1.0, 3.0),
    (("polyp",), 1.0, 2.5),
    (("ulcer",), 1.0, 3.0),
    (("erosion",), 0.7, 2.0),
    (("erythema",), 0.6, 2.0),
    (("foreign body",), 0.5, 2.0),
    (("hematin",), 0.4, 2.0),
    (("ulcer", "active bleeding"), 0.3, 1.0),  # multi-label
    (("erosion", "erythema"), 0.3, 1.0),  # multi-label
)
_TECHNICAL_IDS = (5, 8, 9, 13, 14, 22)  # ids annotated for image quality in the real release


@dataclass(frozen=True)
class _GalarFrame:
    section: str
    labels: tuple[str, ...]  # Galar label columns set to 1 (besides the section)
    view: str  # "good view" | "reduced view" | "no view"


@dataclass(frozen=True)
class _GalarVideo:
    index: int
    video_id: int
    system: str
    padded: bool
    technical: bool
    first_frame: int
    segments: tuple[tuple[int, tuple[_GalarFrame, ...]], ...]  # (scene length, frames)


def _galar_findings(labels: tuple[str, ...], view: str) -> tuple[str, ...]:
    """Renderer findings for a frame's Galar labels."""
    out = [GALAR_TO_KVASIR[lab] for lab in labels if lab in GALAR_TO_KVASIR]
    if "z-line" in labels:
        out.append("z-line")
    if view == "reduced view":
        out.append("Reduced Mucosal View")
    elif view == "no view":
        out.append("no view")
    return tuple(out) or ("Normal clean mucosa",)


def _plan_galar(cfg: SynthPreset, seed: int) -> list[_GalarVideo]:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), SEED_PLAN, 2]))
    n = cfg.videos
    if n > 80:
        raise ConfigError(f"Galar has video ids 1-80; videos must be <= 80, got {n}")
    n_test = max(1, round(n * 20 / 80))
    test_ids = sorted(rng.choice(np.arange(61, 81), size=n_test, replace=False).tolist())
    train_ids = sorted(rng.choice(np.arange(1, 61), size=n - n_test, replace=False).tolist())
    # Vendors in the real proportions, each present; SB3 and Olympus on both sides of id 61.
    counts = {s: max(1, round(n * c / 80)) for s, c in GALAR_CAPSULE_SYSTEMS.items()}
    counts["PillCam SB3"] = max(1, n - sum(v for s, v in counts.items() if s != "PillCam SB3"))
    pool = [s for s, c in counts.items() for _ in range(c)][:n]
    pool += ["PillCam SB3"] * (n - len(pool))
    first = [s for s in ("PillCam SB3", "Olympus") if s in pool][: max(1, min(2, n_test))]
    for s in first:
        pool.remove(s)
    pool = [pool[i] for i in rng.permutation(len(pool))]
    test_sys = first + pool[: n_test - len(first)]
    rest = pool[n_test - len(first):]
    for s in ("PillCam SB3", "Olympus"):  # keep both vendors among the training ids too
        if s not in rest and s in test_sys and len(rest) > 1 and test_sys.count(s) > 1:
            j = test_sys.index(s)
            test_sys[j], rest[0] = rest[0], test_sys[j]
    systems = dict(zip(test_ids, test_sys)) | dict(zip(train_ids, rest))
    ids = sorted(systems)
    # Technical (32-column) videos: the real technical ids when drawn, else other train ids.
    n_tech = max(1, round(n * 6 / 80))
    tech = [i for i in _TECHNICAL_IDS if i in train_ids][:n_tech]
    others = [i for i in train_ids if i not in tech]
    tech += [others[j] for j in rng.permutation(len(others))[: n_tech - len(tech)]]
    # Folder padding: both conventions present.
    padded = {i: bool(rng.random() < 0.5) for i in ids}
    if n >= 2:
        padded[ids[0]], padded[ids[-1]] = True, False

    scale = cfg.frames_per_video / 90.0
    videos = []
    for vi, vid in enumerate(ids):
        technical = vid in tech
        total = max(12, round(cfg.frames_per_video * rng.uniform(0.85, 1.15)))
        segs: list[list[_GalarFrame]] = []

        def add(section, labels=(), n_frames=1, view="good view", segs=segs):
            segs.append([_GalarFrame(section, tuple(labels), view)] * max(1, n_frames))

        n_mouth = max(1, round(0.03 * total))
        n_eso = max(1, round(0.04 * total))
        n_sto = max(2, round(0.13 * total))
        n_col = max(2, round(0.13 * total))
        add("mouth", n_frames=n_mouth, view="reduced view" if technical else "good view")
        add("esophagus", n_frames=n_eso)
        add("esophagus", ("z-line",), 1)
        add("stomach", n_frames=n_sto)
        add("stomach", ("pylorus",), max(1, round(2 * scale)))
        if rng.random() < 0.3:
            add("stomach", ("pylorus", "erosion"), 1)
        add("small intestine", ("ampulla of vater",), 1)
        findings = []
        for labels, share, per in _GALAR_SI:
            if rng.random() < share:
                findings.append((labels, max(1, round(per * scale * rng.uniform(0.6, 1.4)))))
        if technical:
            findings.append(((), -max(2, round(4 * scale))))  # reduced view
            findings.append(((), -1))  # no view
        rng.shuffle(findings)
        n_icv = max(1, round(2 * scale))
        used = sum(len(s) for s in segs) + sum(abs(k) for _, k in findings) + n_icv + n_col
        normal = max(len(findings) + 1, total - used)
        chunks = split_lengths(rng, normal, len(findings) + 1, 1)
        for i, (labels, k) in enumerate(findings):
            if i < len(chunks):
                add("small intestine", n_frames=chunks[i])
            if k < 0:
                add("small intestine", n_frames=-k, view="no view" if k == -1 else "reduced view")
            else:
                add("small intestine", labels, k)
        for c in chunks[len(findings):]:
            add("small intestine", n_frames=c)
        add("colon", ("ileocecal valve",), n_icv)
        add("colon", n_frames=n_col)
        videos.append(_GalarVideo(
            index=vi, video_id=int(vid), system=systems[vid], padded=padded[vid],
            technical=technical, first_frame=int(rng.integers(0, 1000)),
            segments=tuple((len(s), tuple(s)) for s in segs),
        ))
    return videos


def _galar_row(
    frame: _GalarFrame, index: int, frame_no: int, technical: bool, rendered: R.Rendered,
    prev_section: str | None,
) -> list[int]:
    on = set(frame.labels)
    for lab in frame.labels:
        on.update(_GALAR_IMPLIES.get(lab, ()))
    on.add(frame.section)
    if prev_section is not None and prev_section != frame.section:
        on.add("section")  # first frame of a new section
    row = [index] + [int(c in on) for c in _GALAR_LABELS] + [frame_no]
    if technical:
        view = frame.view
        row = [
            int(rendered.bubbles > 0.02), int(rendered.debris > 0.02),
            int(view == "no view"), int(view == "reduced view"), int(view == "good view"),
        ] + row
    return row


def _render_galar_video(job: tuple) -> None:
    """Render and write one Galar video: its frames and its Labels/<id>.csv."""
    root, video, size, seed = job
    root = Path(root)
    rng = video_rng(seed, SEED_VIDEO + 1, video.index)
    look = R.random_look(rng)
    optics = R.OPTICS[video.system]
    side = max(16, round(size * optics.scale))
    folder = f"{video.video_id:03d}" if video.padded else str(video.video_id)
    fdir = root / "Frames" / folder
    fdir.mkdir(parents=True)
    header = GALAR_HEADER_32 if video.technical else GALAR_HEADER_27
    rows = []
    index, frame_no, prev = 0, video.first_frame, None
    for length, frames in video.segments:
        scene = R.new_scene(rng, side=side, section=frames[0].section, look=look, length=length)
        for t, fr in enumerate(frames):
            findings = _galar_findings(fr.labels, fr.view)
            img = R.render_frame(findings, look=look, optics=optics, scene=scene, t=t, rng=rng)
            Image.fromarray(img.image).save(fdir / f"frame_{frame_no:06d}.PNG", format="PNG",
                                            compress_level=4)
            rows.append(_galar_row(fr, index, frame_no, video.technical, img, prev))
            prev = fr.section
            index += 1
            frame_no += 1
    with open(root / "Labels" / f"{video.video_id}.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def synthesize_galar(
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
    """Write a synthetic release in the Galar format.

    Parameters
    ----------
    out : Path
        Release directory to create (must not exist or be empty). Gets ``metadata.csv``
        (``File Name``, ``Capsule System``, ``Gender``, ``Age``), ``Labels/<id>.csv`` and
        ``Frames/<id>/frame_<frame:06d>.PNG`` (the folder zero-padded to three digits for
        some videos, not for others).
    preset : {"tiny", "demo"}
        Size preset (:data:`GALAR_PRESETS`).
    videos, frames_per_video, size : int, optional
        Override the preset (``videos`` <= 80: Galar's ids are 1-80; about a quarter of the
        videos get ids >= 61, the official test set). ``size`` is the PillCam SB3 frame side;
        other capsule systems scale it (:data:`pipi.data.synth.render.OPTICS`).
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

    Notes
    -----
    Label columns follow the frames: the small-bowel findings are drawn by the Kvasir
    renderer through :data:`GALAR_TO_KVASIR` ("blood" is set with "active bleeding" and with
    "hematin"); exactly one of the five section columns is 1 per frame; the ``section`` column
    marks the first frame of each new section. A few frames carry two or three labels (ulcer
    with active bleeding, erosion with erythema, pylorus with erosion). IBD, esophagitis,
    varices, celiac and cancer are never drawn (all zero). Only the 32-column ("technical")
    videos contain reduced-view and no-view frames, labelled so; their ``bubbles`` and
    ``dirt`` columns say whether the frame shows bubbles or debris.

    Capsule systems differ in optics (white balance, colour response, vignetting, frame
    size, blur and, for PillCam SB2, JPEG artefacts baked in before the PNG is written).
    """
    cfg = resolve_preset(GALAR_PRESETS, preset, videos, frames_per_video, size, seed)
    if cfg.videos > 80:
        raise ConfigError(f"Galar has video ids 1-80; videos must be <= 80, got {cfg.videos}")
    out = Path(out)
    with release_dir(out) as tmp:
        plan = _plan_galar(cfg, seed)
        (tmp / "Labels").mkdir()
        (tmp / "Frames").mkdir()
        n_frames = sum(len(f) for v in plan for _, f in v.segments)
        log.info("synthesizing Galar-format release: %d videos, %d frames -> %s",
                 len(plan), n_frames, out)
        jobs = [(str(tmp), v, cfg.size, seed) for v in plan]
        run_jobs(_render_galar_video, jobs, workers=worker_count(workers, n_frames),
                 progress=progress, desc="galar videos")
        meta_rng = np.random.default_rng(np.random.SeedSequence([int(seed), SEED_PLAN, 3]))
        with open(tmp / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["File Name", "Capsule System", "Gender", "Age"])
            for v in plan:
                gender = "male" if meta_rng.random() < 0.55 else "female"
                w.writerow([v.video_id, v.system, gender, int(meta_rng.integers(19, 90))])
    return out
