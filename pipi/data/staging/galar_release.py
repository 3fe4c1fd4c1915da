"""The Galar release on disk: metadata.csv, the label-file index, video selection, vendor
folds and frame images (``Frames/<id or %03d>/frame_<frame:06d>.PNG``, PNG or JPEG).

Helpers of :func:`pipi.data.staging.galar.stage_galar`; every error names the file and line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.data.staging.common import read_metadata_text
from pipi.data.staging.galar_labelfile import LabelTable, line_of_row
from pipi.data.staging.galar_mapping import GalarMapping
from pipi.errors import DataError

__all__ = [
    "FOLDS",
    "IMAGE_EXTENSIONS",
    "SystemSubset",
    "label_files",
    "parse_video_spec",
    "read_galar_metadata",
    "resolve_frames",
    "resolve_subsets",
    "select_videos",
    "vendor_folds",
]

FOLDS = ("calibration", "evaluation")
#: Frame image extensions tried, in order (the release uses .PNG).
IMAGE_EXTENSIONS = (".PNG", ".png", ".jpg", ".JPG", ".jpeg", ".JPEG")
_SEED_FOLD = 0x464F4C44  # domain separation of the fold generator


# --------------------------------------------------------------------------- selection
def parse_video_spec(spec: str | Iterable[int] | None) -> tuple[int, ...] | None:
    """``"1-60,65"`` -> (1, ..., 60, 65); a list of ints passes through; None stays None."""
    if spec is None:
        return None
    if isinstance(spec, str):
        out: set[int] = set()
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            m = re.fullmatch(r"(\d+)\s*-\s*(\d+)|(\d+)", part)
            if not m:
                raise DataError(
                    f"video selection {spec!r}: cannot read {part!r}; use ids and ranges "
                    "like '1-60,65'"
                )
            lo, hi = (int(m[1]), int(m[2])) if m[1] else (int(m[3]), int(m[3]))
            if hi < lo:
                raise DataError(f"video selection {spec!r}: empty range {part!r}")
            out.update(range(lo, hi + 1))
        return tuple(sorted(out))
    try:
        return tuple(sorted({int(v) for v in spec}))
    except (TypeError, ValueError):
        raise DataError(f"videos must be integer ids, got {spec!r}") from None


def read_galar_metadata(path: Path, *, system_column: str = "Capsule System") -> pd.DataFrame:
    """Read Galar's metadata.csv into columns video_id (int), capsule_system, line.

    The delimiter is sniffed (comma or semicolon); other columns (Gender, Age, ...) are
    ignored.
    """
    path = Path(path)
    text, delim = read_metadata_text(
        path, default=",", missing="metadata file not found; a Galar release has ROOT/metadata.csv")
    reader = csv.reader(io.StringIO(text), delimiter=delim)
    header = [c.strip() for c in next(reader, [])]
    missing = [c for c in ("File Name", system_column) if c not in header]
    if missing:
        raise DataError(
            f"{path}, line 1: missing column(s) {missing}; found {header}. Galar's metadata.csv "
            "has 'File Name' (the video id) and 'Capsule System'"
        )
    i_id, i_sys = header.index("File Name"), header.index(system_column)
    records, seen = [], {}
    for row in reader:
        line = reader.line_num
        if not any(c.strip() for c in row):
            continue
        raw = row[i_id].strip() if len(row) > i_id else ""
        stem = Path(raw).stem if raw else raw
        try:
            vid = int(stem)
        except ValueError:
            raise DataError(
                f"{path}, line {line}: File Name {raw!r} is not an integer video id"
            ) from None
        system = row[i_sys].strip() if len(row) > i_sys else ""
        if not system:
            raise DataError(f"{path}, line {line}: empty {system_column!r} for video {vid}")
        if vid in seen:
            raise DataError(f"{path}, line {line}: video {vid} already listed on line {seen[vid]}")
        seen[vid] = line
        records.append((vid, system, line))
    if not records:
        raise DataError(f"{path}: no video rows")
    return pd.DataFrame(records, columns=["video_id", "capsule_system", "line"])


def label_files(root: Path, meta: pd.DataFrame) -> dict[int, Path]:
    labels = root / "Labels"
    if not labels.is_dir():
        raise DataError(f"{labels}: folder not found; a Galar release has ROOT/Labels/<video>.csv")
    known = set(meta["video_id"])
    out: dict[int, Path] = {}
    for p in sorted(labels.iterdir()):
        if p.suffix.lower() != ".csv":
            continue
        try:
            vid = int(p.stem)
        except ValueError:
            raise DataError(f"{p}: label file name is not a video id (<id>.csv expected)") from None
        if vid not in known:
            raise DataError(
                f"{p}: label file for video {vid}, which is not in metadata.csv; add the video "
                "to metadata.csv or remove the file"
            )
        if vid in out:
            raise DataError(f"{p}: second label file for video {vid} (also {out[vid].name})")
        out[vid] = p
    return out


@dataclass(frozen=True)
class SystemSubset:
    """One stratification subset of a mapping, resolved against Galar's metadata.csv."""

    key: str  # "pillcam_video_subset" | "olympus_video_subset"
    systems: tuple[str, ...]  # capsule-system names it lists, spelled as metadata.csv spells them
    listed_ids: tuple[int, ...]  # video ids it lists
    video_ids: tuple[int, ...]  # every video it stands for: the ids and the named systems' videos

    def as_dict(self) -> dict:
        return {"capsule_systems": list(self.systems), "listed_video_ids": list(self.listed_ids),
                "video_ids": [str(v) for v in self.video_ids]}


def resolve_subsets(meta: pd.DataFrame, mapping: GalarMapping,
                    meta_path: Path) -> tuple[SystemSubset, SystemSubset]:
    """The mapping's PillCam and Olympus subsets as videos of ``meta``.

    A name is a value of the metadata column (matched ignoring case and surrounding spaces);
    an unknown name, an unknown id, or an entry whose capsule system is not of the subset's
    vendor (``pillcam`` / ``olympus`` in its name) raises :class:`DataError` naming the
    mapping file and the entry.
    """
    by_id = meta.set_index("video_id")
    spelled = {s.lower(): s for s in meta["capsule_system"]}
    out = []
    for key, ids, names, word in (
            ("pillcam_video_subset", mapping.pillcam_subset, mapping.pillcam_systems, "pillcam"),
            ("olympus_video_subset", mapping.olympus_subset, mapping.olympus_systems, "olympus")):
        unknown = sorted(set(ids) - set(by_id.index))
        if unknown:
            raise DataError(f"{mapping.source}: {key} names video(s) {unknown} not in {meta_path}")
        wrong = [v for v in ids if word not in by_id.loc[v, "capsule_system"].lower()]
        if wrong:
            raise DataError(
                f"{mapping.source}: {key} lists video(s) {wrong}, whose {mapping.metadata_column!r}"
                f" in {meta_path} is {sorted(set(by_id.loc[wrong, 'capsule_system']))}"
            )
        systems = []
        for n in names:
            if n.lower() not in spelled:
                raise DataError(
                    f"{mapping.source}: {key} names capsule system {n!r}, which is not a "
                    f"{mapping.metadata_column!r} value of {meta_path} "
                    f"(it has {sorted(set(meta['capsule_system']))})"
                )
            if word not in n.lower():
                raise DataError(f"{mapping.source}: {key} names capsule system {n!r}, which is "
                                f"not {'an Olympus' if word == 'olympus' else 'a PillCam'} system")
            systems.append(spelled[n.lower()])
        named = meta.loc[meta["capsule_system"].isin(systems), "video_id"]
        out.append(SystemSubset(key=key, systems=tuple(systems), listed_ids=tuple(ids),
                                video_ids=tuple(sorted(set(ids) | set(named.astype(int))))))
    return out[0], out[1]


def select_videos(
    meta: pd.DataFrame, mapping: GalarMapping, videos, capsule_systems, meta_path: Path,
) -> pd.DataFrame:
    pill, oly = resolve_subsets(meta, mapping, meta_path)
    sel = meta
    ids = parse_video_spec(videos)
    if ids is None and mapping.has_subsets:
        ids = tuple(sorted(set(pill.video_ids) | set(oly.video_ids)))
    if ids is not None:
        unknown = sorted(set(ids) - set(meta["video_id"]))
        if unknown:
            raise DataError(
                f"video(s) {unknown} are not in {meta_path}; it lists {sorted(meta['video_id'])}"
            )
        sel = sel[sel["video_id"].isin(ids)]
    if capsule_systems is not None:
        if isinstance(capsule_systems, str):
            capsule_systems = [s for s in capsule_systems.split(",")]
        wanted = {s.strip().lower(): s.strip() for s in capsule_systems if s.strip()}
        have = {s.lower() for s in meta["capsule_system"]}
        unknown = sorted(v for k, v in wanted.items() if k not in have)
        if unknown:
            raise DataError(
                f"capsule system(s) {unknown} not in {meta_path}; available: "
                f"{sorted(set(meta['capsule_system']))}"
            )
        sel = sel[sel["capsule_system"].str.lower().isin(wanted)]
    if sel.empty:
        raise DataError("the video selection is empty; check --videos and --capsule-systems")
    return sel.sort_values("video_id").reset_index(drop=True)


def _stable_int(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def vendor_folds(
    systems: dict[int, str], *, seed: int, calibration_fraction: float = 0.5,
) -> dict[int, str]:
    """Video -> "calibration" | "evaluation", disjoint within each capsule system (seeded)."""
    out: dict[int, str] = {}
    by_system: dict[str, list[int]] = {}
    for v, s in systems.items():
        by_system.setdefault(s, []).append(v)
    for s, vids in sorted(by_system.items()):
        vids = sorted(vids)
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SEED_FOLD, _stable_int(s)]))
        order = [vids[i] for i in rng.permutation(len(vids))]
        n = len(order)
        n_cal = 0 if n < 2 or calibration_fraction <= 0 else min(
            n - 1, max(1, round(calibration_fraction * n)))
        out.update({v: "calibration" for v in order[:n_cal]})
        out.update({v: "evaluation" for v in order[n_cal:]})
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- frames on disk
def _frame_folder(frames_root: Path, vid: int, meta_path: Path, line: int) -> Path:
    cands = [frames_root / str(vid), frames_root / f"{vid:03d}"]
    found = list(dict.fromkeys(p for p in cands if p.is_dir()))
    if not found:
        raise DataError(
            f"{meta_path}, line {line}: no frame folder for video {vid} "
            f"(tried {[str(p) for p in cands]})"
        )
    if len(found) > 1:
        raise DataError(
            f"video {vid} has two frame folders, {found[0]} and {found[1]}; keep one"
        )
    return found[0]


def resolve_frames(
    kept: pd.DataFrame, tables: dict[int, LabelTable], frames_root: Path, meta: pd.DataFrame,
    meta_path: Path,
) -> list[Path]:
    """Image path of every kept (video, frame); probes only the frames kept."""
    line_of = dict(zip(meta["video_id"], meta["line"]))
    folders: dict[int, Path] = {}
    ext_of: dict[int, str] = {}
    paths = []
    for vid, frame, row in zip(kept["vid"], kept["frame_number"], kept["row"]):
        if vid not in folders:
            folders[vid] = _frame_folder(frames_root, vid, meta_path, line_of[vid])
        stem = folders[vid] / f"frame_{int(frame):06d}"
        exts = (ext_of.get(vid),) + IMAGE_EXTENSIONS if vid in ext_of else IMAGE_EXTENSIONS
        for ext in exts:
            p = stem.with_name(stem.name + ext)
            if p.is_file():
                ext_of[vid] = ext
                break
        else:
            table = tables[vid]
            raise DataError(
                f"{table.path}, line {line_of_row(table, row)}: frame {int(frame)} has no image "
                f"{stem}.PNG (also tried {list(IMAGE_EXTENSIONS[1:])})"
            )
        paths.append(p)
    return paths


