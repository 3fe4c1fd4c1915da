"""Scoring many frames with a registered per-frame model (``pipi predict``): a capsule exam is
50,000-100,000 frames, so they are streamed, never held.

* **Frames.** :func:`folder_frames` lists the JPEG/PNG files under a folder (one subfolder per
  video, or one video: the folder itself), in path order; :func:`staged_frames` takes one
  split (or all) of a staged folder, with its labels; :func:`table_frames` the images a label
  table lists (the form ``pipi stage images --labels`` reads), labelled in the model's classes.
* **Decoding** happens in DataLoader workers, exactly as the registered model decodes a
  request's image (``decode_file`` with the model's decode size, then the training cache's
  resize), so the probabilities equal the pyfunc's; the model (:class:`FrameModule`) runs on
  batches in the main process (pinned memory and the device's transfer on a GPU). On a CPU
  with few cores, ``replicas`` forked processes instead each decode and score their own
  batches on one thread (:mod:`pipi.serving.replicas`): the same answers, no core waiting
  for a decoding worker.
* **Output.** Rows are written in chunks of :data:`CHUNK` frames to ``<out>.parts/``, each
  part written whole (a temporary name, then renamed), so a broken run resumes from the parts
  it finished; the parts are then merged, row group by row group, into ``out`` (the run
  contract's predictions columns, plus ``predicted_class``), and ``<out>.parts/`` is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi.classes import slug
from pipi.data.staging.images_scan import scan_table
from pipi.errors import ConfigError, DataError
from pipi.predictions import predictions_frame, predictions_schema
from pipi.serving.model_input import InputError, Limits, decode_file
from pipi.serving.replicas import replica_map, resolve_replicas
from pipi.serving.sequence_clip import resize_frame, to_unit

__all__ = ["CHUNK", "IMAGE_SUFFIXES", "FrameList", "ScoreResult", "TableLabels", "folder_frames",
           "score_frames", "staged_frames", "table_frames"]

#: Frames per part file: what a broken run loses at most.
CHUNK = 2048
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class FrameList:
    """Frames to score: ``frames`` has ``path`` (relative to ``root``), ``video_id``,
    ``frame_number``, ``class_index`` and ``class`` (``-1`` / ``""`` without labels)."""

    root: Path
    frames: pd.DataFrame
    labelled: bool

    def __len__(self) -> int:
        return len(self.frames)


@dataclass(frozen=True)
class ScoreResult:
    out: Path
    n_frames: int
    resumed_frames: int      # frames taken from the parts of an earlier, broken run
    seconds: float           # scoring time of this call (decode + model + writes)

    @property
    def frames_per_s(self) -> float:
        scored = self.n_frames - self.resumed_frames
        return scored / self.seconds if self.seconds > 0 else float("nan")


def _natural(path: str) -> list:
    return [int(p) if p.isdigit() else p.lower() for p in _DIGITS.split(path)]


def folder_frames(root: Path) -> FrameList:
    """The JPEG/PNG files under ``root``; a frame's video is its folder (``root``'s own name
    for files directly in it), its frame number its position there in natural order."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise ConfigError(f"images={root}: not a folder")
    rel = sorted((str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES), key=_natural)
    if not rel:
        raise DataError(f"{root}: no JPEG or PNG file in it or below it")
    video = [str(Path(r).parent) if str(Path(r).parent) != "." else root.name for r in rel]
    df = pd.DataFrame({"path": rel, "video_id": video})
    df["frame_number"] = df.groupby("video_id", sort=False).cumcount().astype(np.int64)
    df["class_index"], df["class"] = -1, ""
    return FrameList(root, df, labelled=False)


def staged_frames(root: Path, frames: pd.DataFrame, split: str) -> FrameList:
    """The frames of ``split`` (``all``: every split) of a staged folder, with their labels."""
    have = sorted(set(frames["split"].astype(str)))
    if split != "all" and split not in have:
        raise ConfigError(f"split={split!r}: {root} has the splits {have} (or all)")
    sel = frames if split == "all" else frames[frames["split"] == split]
    cols = ["path", "video_id", "frame_number", "class_index", "class"]
    return FrameList(Path(root), sel[cols].reset_index(drop=True), labelled=True)


@dataclass(frozen=True)
class TableLabels:
    """How a label table's classes met the model's: frames left out of the metrics because
    their class is not one of the model's (``unknown``: those class names) or because they
    carry more than one class (``multi``)."""

    n_unknown: int = 0
    unknown: tuple[str, ...] = ()
    n_multi: int = 0


def table_frames(table: Path, class_names: tuple[str, ...], *,
                 root: Path | None = None) -> tuple[FrameList, TableLabels]:
    """The images a label table lists, once each, in the table's order, labelled with the
    model's class of their table class (matched by :func:`pipi.classes.slug`). The table is
    read as ``pipi stage images --labels`` reads one (CSV, Parquet or Excel; an image path
    column relative to ``root``, the table's folder or the folder above it; a class column or
    one-hot columns; optional ``video_id|patient_id`` and ``frame_number``). Every frame is
    scored; one whose class the model does not have, or that has several, has no label
    (``class_index`` -1) and is counted in the :class:`TableLabels`."""
    table = Path(table).expanduser().resolve()
    base = Path(root).expanduser().resolve() if root else table.parent
    rows = scan_table(table, base, classes=None).rows
    index = {slug(c): i for i, c in enumerate(class_names)}
    first = rows.drop_duplicates("src", keep="first")
    classes_of = rows.groupby("src", sort=False)["class"].agg(lambda c: tuple(dict.fromkeys(c)))
    files = [Path(p) for p in first["src"]]
    top = Path(os.path.commonpath([str(f.parent) for f in files]))
    rel = [str(f.relative_to(top)) for f in files]
    given = first["group"].astype(str).to_numpy()
    video = [g if g else (str(Path(r).parent) if str(Path(r).parent) != "." else top.name)
             for g, r in zip(given, rel)]
    df = pd.DataFrame({"path": rel, "video_id": video})
    number = pd.to_numeric(first["frame_number"], errors="coerce").to_numpy()
    df["frame_number"] = (number.astype(np.int64) if not np.isnan(number).any() else
                          df.groupby("video_id", sort=False).cumcount().to_numpy(np.int64))
    labels, names, unknown, n_unknown, n_multi = [], [], {}, 0, 0
    for src in first["src"]:
        found = classes_of[src]
        if len(found) > 1:
            n_multi += 1
            labels.append(-1)
            names.append("")
        elif slug(found[0]) not in index:
            n_unknown += 1
            unknown.setdefault(found[0], None)
            labels.append(-1)
            names.append("")
        else:
            labels.append(index[slug(found[0])])
            names.append(class_names[index[slug(found[0])]])
    df["class_index"], df["class"] = np.asarray(labels, dtype=np.int64), names
    if not (df["class_index"] >= 0).any():
        raise DataError(f"{table}: none of its classes is one of the model's "
                        f"({', '.join(class_names)}); found {', '.join(unknown) or 'only frames with several classes'}")
    return (FrameList(top, df, labelled=True),
            TableLabels(n_unknown=n_unknown, unknown=tuple(unknown), n_multi=n_multi))


class _Frames(torch.utils.data.Dataset):
    """The frames' pixels at the model's size, ``uint8`` ``[S, S, 3]``: the registered model's
    resize, before its conversion to floats (:func:`to_unit`, in the scoring process: a
    quarter of the bytes cross from the workers, and a GPU gets them as they are)."""

    def __init__(self, root: Path, paths: list[str], size: int):
        self.root, self.paths, self.size = root, paths, size
        self.limits = Limits(decode_size=size)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        path = self.paths[i]
        try:
            data = (self.root / path).read_bytes()
            img = decode_file(data, where=path, limits=self.limits)
        except (OSError, InputError) as exc:
            raise DataError(f"{self.root / path}: {exc}") from None
        return torch.from_numpy(resize_frame(img, self.size))


def _key(flist: FrameList, model_key: str) -> str:
    h = hashlib.sha256(model_key.encode())
    for p in flist.frames["path"]:
        h.update(p.encode() + b"\0")
    return h.hexdigest()


def _parts(out: Path, key: str) -> Path:
    """``<out>.parts/`` for this request (created, or an earlier run's of the same request)."""
    parts = out.with_name(out.name + ".parts")
    marker = parts / "request.json"
    if parts.is_dir():
        try:
            same = json.loads(marker.read_text()).get("key") == key
        except (OSError, ValueError):
            same = False
        if not same:
            raise ConfigError(f"{parts} holds the parts of another request (other frames or "
                              "model); remove it or write elsewhere")
    else:
        parts.mkdir(parents=True)
        marker.write_text(json.dumps({"key": key}))
    return parts


def score_frames(module: torch.nn.Module, flist: FrameList, out: Path, *, model_key: str,
                 batch_size: int = 64, workers: int = 0, device: torch.device | None = None,
                 progress: Callable[[int], None] | None = None,
                 amp_dtype: torch.dtype | None = None,
                 channels_last: bool = False, compile: bool = False,
                 replicas: int = 1) -> ScoreResult:
    """Score every frame of ``flist`` with ``module`` (``forward(x01) -> probabilities``, a
    :class:`~pipi.serving.predictors.FrameModule`) into ``out`` (see the module docstring).
    ``model_key`` names the model (its URI and version, and how it computes: parts of another
    are refused). ``amp_dtype``: the forward pass under ``torch.autocast`` in that precision
    (bf16 on a GPU: faster, probabilities to about 1e-2 of fp32); ``channels_last``: inputs
    in NHWC memory format; ``compile``: the forward pass through ``torch.compile(module)``
    (the same weights; a GPU's kernels fused, the first batches pay the compilation).
    ``replicas`` > 1 (a CPU only): that many forked processes score the batches, each
    decoding its own on one thread (:mod:`pipi.serving.replicas`; ``workers`` is then unused).
    ``progress(n)`` is called with the frames done after each batch."""
    if batch_size < 1 or workers < 0:
        raise ConfigError(f"batch_size={batch_size}, workers={workers}: need >= 1 and >= 0")
    replicas = resolve_replicas(replicas, device or torch.device("cpu"))
    out = Path(out).expanduser().resolve()
    if out.suffix != ".parquet":
        raise ConfigError(f"out={out}: write a .parquet file")
    out.parent.mkdir(parents=True, exist_ok=True)
    device = device or torch.device("cpu")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    module = module.to(device, memory_format=fmt).eval()
    forward = torch.compile(module) if compile else module
    n, size = len(flist), int(module.image_size)
    parts = _parts(out, _key(flist, model_key))
    chunks = [(c, s, min(s + CHUNK, n)) for c, s in enumerate(range(0, n, CHUNK))]
    todo = [ch for ch in chunks if not (parts / f"part-{ch[0]:05d}.parquet").is_file()]
    resumed = n - sum(e - s for _, s, e in todo)
    if progress and resumed:
        progress(resumed)
    t0 = time.perf_counter()
    names = tuple(module.class_names)
    autocast = dict(device_type=device.type, dtype=amp_dtype or torch.float32,
                    enabled=amp_dtype is not None)
    if replicas > 1:
        _score_in_replicas(forward, flist, parts, todo, names, size=size, fmt=fmt,
                           batch_size=batch_size, replicas=replicas, autocast=autocast,
                           progress=progress)
    else:
        _score_here(forward, flist, parts, todo, names, size=size, fmt=fmt, device=device,
                    batch_size=batch_size, workers=workers, autocast=autocast,
                    progress=progress)
    _merge(parts, [c for c, _, _ in chunks], out, names)
    return ScoreResult(out, n, resumed, time.perf_counter() - t0)


def _score_here(forward, flist: FrameList, parts: Path, todo: list, names: tuple[str, ...], *,
                size: int, fmt, device: torch.device, batch_size: int, workers: int,
                autocast: dict, progress) -> None:
    """The chunks ``todo`` scored in this process, decoded by ``workers`` DataLoader workers,
    each part written as soon as its rows are scored."""
    rows = np.concatenate([np.arange(s, e) for _, s, e in todo]) if todo else np.array([], int)
    paths = flist.frames["path"].to_numpy()[rows].tolist()
    loader = torch.utils.data.DataLoader(
        _Frames(flist.root, paths, size), batch_size=batch_size, num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=False)
    pending: list[np.ndarray] = []
    queue = list(todo)
    with torch.inference_mode(), torch.autocast(**autocast):
        for x in loader:
            x = to_unit(x.to(device, non_blocking=True)).contiguous(memory_format=fmt)
            pending.append(forward(x).float().cpu().numpy())
            if progress:
                progress(len(x))
            while queue and sum(len(p) for p in pending) >= queue[0][2] - queue[0][1]:
                c, s, e = queue.pop(0)
                probs = np.concatenate(pending)
                _write_part(parts, c, flist.frames.iloc[s:e], probs[:e - s], names)
                pending = [probs[e - s:]] if len(probs) > e - s else []


def _score_in_replicas(forward, flist: FrameList, parts: Path, todo: list,
                       names: tuple[str, ...], *, size: int, fmt, batch_size: int,
                       replicas: int, autocast: dict, progress) -> None:
    """The chunks ``todo`` scored batch by batch by ``replicas`` forked processes (CPU); a
    chunk's part is written once all its batches are back (in any order)."""
    frames = _Frames(flist.root, flist.frames["path"].tolist(), size)

    def score(task: tuple[int, int, int]) -> np.ndarray:
        _, a, b = task
        x = torch.stack([frames[i] for i in range(a, b)])
        with torch.inference_mode(), torch.autocast(**autocast):
            return forward(to_unit(x).contiguous(memory_format=fmt)).float().numpy()

    tasks = [(c, a, min(a + batch_size, e)) for c, s, e in todo for a in range(s, e, batch_size)]
    bounds = {c: (s, e) for c, s, e in todo}
    done: dict[int, list[tuple[int, np.ndarray]]] = {c: [] for c in bounds}
    for (c, a, b), probs in replica_map(score, tasks, replicas):
        if progress:
            progress(b - a)
        done[c].append((a, probs))
        s, e = bounds[c]
        if sum(len(p) for _, p in done[c]) == e - s:
            ordered = np.concatenate([p for _, p in sorted(done.pop(c), key=lambda t: t[0])])
            _write_part(parts, c, flist.frames.iloc[s:e], ordered, names)


def _write_part(parts: Path, c: int, frames: pd.DataFrame, probs: np.ndarray,
                names: tuple[str, ...]) -> None:
    df = predictions_frame(frames, probs)
    df["predicted_class"] = np.asarray(names, dtype=object)[probs.argmax(1)]
    tmp = parts / f".part-{c:05d}.parquet.tmp"
    df.to_parquet(tmp, index=False)
    os.replace(tmp, parts / f"part-{c:05d}.parquet")


def _merge(parts: Path, chunks: list[int], out: Path, names: tuple[str, ...]) -> None:
    """The parts, in order, into ``out`` one row group each (never all in memory), and the
    schema beside it (``<out stem>.schema.json``); then the parts are removed."""
    import pyarrow.parquet as pq

    tmp = out.with_name(f".{out.name}.tmp")
    writer = None
    try:
        for c in chunks:
            table = pq.read_table(parts / f"part-{c:05d}.parquet")
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, out)
    schema = predictions_schema(classes=names)
    schema["columns"].append("predicted_class")
    out.with_name(out.stem + ".schema.json").write_text(json.dumps(schema, indent=2))
    shutil.rmtree(parts, ignore_errors=True)
