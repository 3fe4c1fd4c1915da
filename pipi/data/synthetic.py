"""Synthetic capsule-endoscopy releases in the exact on-disk formats of the real ones.

Nobody running pipi needs the real data to try it: ``synthesize_kvasir`` writes a
Kvasir-Capsule-format release and ``synthesize_galar`` a Galar-format one (formats in
``reference/datasets.md``), rendered by :mod:`pipi.data.synth_render`.

Kvasir-Capsule format::

    OUT/labelled_images/<class folder, cased as in the real zip>/<16-hex video id>_<frame>.jpg
    OUT/metadata.csv   semicolon-delimited, header
                       filename;video_id;frame_number;finding_category;finding_class;x1;...;y4

Galar format::

    OUT/metadata.csv          File Name, Capsule System, Gender, Age (one row per video)
    OUT/Labels/<id>.csv       one row per frame, 27 columns (or 32 with the technical ones)
    OUT/Frames/<id or %03d>/frame_<frame:06d>.PNG

Design of the data (what downstream code may rely on):

* **Videos are patients.** Each video has its own appearance (mucosa colour, brightness,
  villus scale, bile, debris, bubbles). Frames of a video come in *segments*: runs of
  consecutive frame numbers showing one finding on one drifting scene, separated by gaps (or
  not), so temporal windows carry information.
* **Class balance** follows the shape of the paper's count table (Normal dominant; Ampulla of
  Vater, Blood - hematin and Polyp each in a single video), compressed so that every one of
  the 11 evaluable classes lives in at least ``MIN_VIDEOS_PER_CLASS`` videos and a seeded
  patient-disjoint 70/15/15 split can put positives of each in validation and test.
* **Multilabel frames**: a few frames carry an anatomical landmark and a finding (e.g.
  Pylorus + Erosion), listed on two metadata rows and stored in both class folders, as in the
  real release.
* **Determinism**: the plan comes from one generator seeded by ``seed``; each video is
  rendered from its own generator seeded by ``(seed, video index)``, so the bytes do not
  depend on the number of worker processes.
* **Atomic output**: everything is written into a temporary directory beside ``out`` and
  renamed into place at the end; a non-empty ``out`` is never touched.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from pipi.classes import ANATOMY, CLASSES, RELEASE_FOLDERS
from pipi.data import synth_render as R
from pipi.errors import ConfigError, DataError

log = logging.getLogger(__name__)

__all__ = [
    "GALAR_CAPSULE_SYSTEMS",
    "GALAR_HEADER_27",
    "GALAR_HEADER_32",
    "GALAR_PRESETS",
    "GALAR_TO_KVASIR",
    "KVASIR_HEADER",
    "KVASIR_PRESETS",
    "MIN_VIDEOS_PER_CLASS",
    "SynthPreset",
    "synthesize_galar",
    "synthesize_kvasir",
]


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


#: Kvasir-format presets: ``tiny`` for tests (seconds), ``demo`` the embedded default data
#: (43 videos like the real release, a few thousand frames, a minute or two on 2 cores).
KVASIR_PRESETS: dict[str, SynthPreset] = {
    "tiny": SynthPreset(videos=14, frames_per_video=24, size=64),
    "demo": SynthPreset(videos=43, frames_per_video=84, size=128),
}

#: Galar-format presets; ``demo`` holds ids >= 61 (the official Galar test videos).
GALAR_PRESETS: dict[str, SynthPreset] = {
    "tiny": SynthPreset(videos=8, frames_per_video=30, size=64),
    "demo": SynthPreset(videos=24, frames_per_video=90, size=128),
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
_SEED_PLAN, _SEED_VIDEO = 0x504C414E, 0x56494445  # domain separation of the generators


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _resolve(
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


def _prepare_out(out: Path) -> Path:
    """Refuse a non-empty ``out``; return a fresh temporary directory beside it."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(
            f"{out} already exists and is not an empty directory; refusing to overwrite it. "
            "Choose another --out or remove it first."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))


def _publish(tmp: Path, out: Path) -> None:
    """Rename the finished temporary directory to ``out`` (replacing an empty directory)."""
    out = Path(out)
    if out.exists():
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        else:
            raise DataError(
                f"{out} was created by someone else while synthesizing; not replacing it"
            )
    os.replace(tmp, out)


def _workers(workers: int | None, n_frames: int) -> int:
    if workers is None:
        return 1 if n_frames < 1500 else max(1, min(2, os.cpu_count() or 1))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


def _run_jobs(fn, jobs: list, *, workers: int, progress: bool, desc: str) -> list:
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


def _video_rng(seed: int, kind: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), kind, index]))


def _split_lengths(rng: np.random.Generator, total: int, parts: int, minimum: int) -> list[int]:
    """``parts`` positive lengths summing to ``total``, each >= ``minimum`` when possible."""
    parts = max(1, min(parts, total // max(1, minimum)))
    base = [minimum] * parts
    rest = total - minimum * parts
    if rest > 0:
        base = [b + int(x) for b, x in zip(base, rng.multinomial(rest, np.ones(parts) / parts))]
    return base


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
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SEED_PLAN, 1]))
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
        chunks = _split_lengths(rng, normal, len(middle) + 1, 2)
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
    rng = _video_rng(seed, _SEED_VIDEO, video.index)
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
    cfg = _resolve(KVASIR_PRESETS, preset, videos, frames_per_video, size, seed)
    if cfg.videos < 4:
        raise ConfigError(
            f"videos must be >= 4 for a Kvasir-format release (three classes live in single "
            f"videos and the split needs train/val/test), got {cfg.videos}"
        )
    out = Path(out)
    tmp = _prepare_out(out)
    try:
        plan = _plan_kvasir(cfg, seed)
        images = tmp / "labelled_images"
        for cls in CLASSES:
            (images / RELEASE_FOLDERS[cls]).mkdir(parents=True)
        n_frames = sum(s.length for v in plan for s in v.segments)
        log.info("synthesizing Kvasir-format release: %d videos, %d frames at %d px -> %s",
                 cfg.videos, n_frames, cfg.size, out)
        jobs = [(str(images), v, cfg.size, seed) for v in plan]
        per_video = _run_jobs(_render_kvasir_video, jobs, workers=_workers(workers, n_frames),
                              progress=progress, desc="kvasir videos")
        with open(tmp / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, delimiter=";", lineterminator="\n")
            w.writerow(KVASIR_HEADER)
            for rows in per_video:
                w.writerows(rows)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


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
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SEED_PLAN, 2]))
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
        chunks = _split_lengths(rng, normal, len(findings) + 1, 1)
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
    rng = _video_rng(seed, _SEED_VIDEO + 1, video.index)
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
        other capsule systems scale it (:data:`pipi.data.synth_render.OPTICS`).
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
    cfg = _resolve(GALAR_PRESETS, preset, videos, frames_per_video, size, seed)
    if cfg.videos > 80:
        raise ConfigError(f"Galar has video ids 1-80; videos must be <= 80, got {cfg.videos}")
    out = Path(out)
    tmp = _prepare_out(out)
    try:
        plan = _plan_galar(cfg, seed)
        (tmp / "Labels").mkdir()
        (tmp / "Frames").mkdir()
        n_frames = sum(len(f) for v in plan for _, f in v.segments)
        log.info("synthesizing Galar-format release: %d videos, %d frames -> %s",
                 len(plan), n_frames, out)
        jobs = [(str(tmp), v, cfg.size, seed) for v in plan]
        _run_jobs(_render_galar_video, jobs, workers=_workers(workers, n_frames),
                  progress=progress, desc="galar videos")
        meta_rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SEED_PLAN, 3]))
        with open(tmp / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["File Name", "Capsule System", "Gender", "Age"])
            for v in plan:
                gender = "male" if meta_rng.random() < 0.55 else "female"
                w.writerow([v.video_id, v.system, gender, int(meta_rng.integers(19, 90))])
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
