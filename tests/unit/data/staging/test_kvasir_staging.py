"""Kvasir-Capsule staging on a small hand-built release in the real format."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipi.classes import CLASSES, RELEASE_FOLDERS
from pipi.data.staging import compute_data_digest, split_sha256, stage_kvasir
from pipi.data.staging.kvasir import load_split_manifest
from pipi.errors import DataError

HEADER = "filename;video_id;frame_number;finding_category;finding_class;x1;y1;x2;y2;x3;y3;x4;y4"
RARE = ("Ampulla of Vater", "Blood - hematin", "Polyp")


def _jpeg(rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def make_release(root: Path, *, n_videos: int = 12, seed: int = 0) -> tuple[Path, Path]:
    """12 videos; evaluable classes spread over many videos, rare classes in one each."""
    rng = np.random.default_rng(seed)
    vids = [f"{i:02x}" + "a" * 14 for i in range(n_videos)]
    rows = []
    common = [c for c in CLASSES if c not in RARE]
    for vi, vid in enumerate(vids):
        classes = list(common)
        if vi < len(RARE):
            classes.append(RARE[vi])
        frame = 100
        for cls in classes:
            for _ in range(2):
                rows.append((f"{vid}_{frame}.jpg", vid, frame, cls))
                frame += 1
    # one multilabel frame: listed on two rows, present in both class folders
    f0 = rows[0]
    rows.append((f0[0], f0[1], f0[2], "Pylorus"))
    img_root = root / "labelled_images"
    for fname, _vid, _frame, cls in rows:
        d = img_root / RELEASE_FOLDERS[cls]
        d.mkdir(parents=True, exist_ok=True)
        (d / fname).write_bytes(_jpeg(rng))
    lines = [HEADER]
    for fname, vid, frame, cls in rows:
        cat = "Anatomy" if cls in ("Pylorus", "Ileocecal valve", "Ampulla of Vater") else "Luminal"
        lines.append(f"{fname};{vid};{frame};{cat};{cls};;;;;;;;")
    meta = root / "metadata.csv"
    meta.write_text("\n".join(lines) + "\n")
    return img_root, meta


@pytest.fixture()
def release(tmp_path):
    return make_release(tmp_path / "release")


def test_layout_index_manifest(release, tmp_path):
    images, meta = release
    out = tmp_path / "staged"
    res = stage_kvasir(images, meta, out, seed=1, progress=False)
    frames = pd.read_parquet(out / "frames.parquet")
    man = json.loads((out / "manifest.json").read_text())
    # every row points at an existing file in split/CanonicalClass/filename
    for r in frames.itertuples():
        p = out / r.path
        assert p.is_file(), p
        assert p.parent.name == r._3  # class column
        assert p.parent.parent.name == r.split
        assert CLASSES[r.class_index] == r._3
    # patient-disjoint: each video in exactly one split, matching the manifest
    assert frames.groupby("video_id")["split"].nunique().max() == 1
    assert dict(frames.groupby("video_id")["split"].first()) == man["video_to_split"]
    assert sorted(man["video_to_split"]) == sorted(frames["video_id"].unique())
    # 12 videos -> floor(8.4)=8 train, round(1.8)=2 val, 2 test
    splits = pd.Series(man["video_to_split"]).value_counts()
    assert (splits["train"], splits["val"], splits["test"]) == (8, 2, 2)
    # rare (single-video) classes stay in train; evaluable ones reach val and test
    for c in RARE:
        assert set(frames.loc[frames["class"] == c, "split"]) == {"train"}
    for c in set(CLASSES) - set(RARE):
        assert {"val", "test"} <= set(frames.loc[frames["class"] == c, "split"])
    # the multilabel frame is in both class folders and flagged
    ml = frames[frames["multilabel"]]
    assert len(ml) == 2 and ml["filename"].nunique() == 1
    assert set(man["multilabel_frames"]) == set(ml["filename"])
    # counts in the manifest equal the index; hash recomputable from its documented definition
    for s in ("train", "val", "test"):
        for c in CLASSES:
            n = int(((frames["split"] == s) & (frames["class"] == c)).sum())
            assert man["counts_per_class"][s][c] == n
            # the paper's convention: the Angiectasia + Pylorus frame counts toward Angiectasia
            assert man["counts"][s][c] == n - (c == "Pylorus" and s == ml["split"].iloc[0])
        assert man["n_frames"][s] == frames.loc[frames["split"] == s, "filename"].nunique()
    blob = json.dumps(man["video_to_split"], sort_keys=True, separators=(",", ":")).encode()
    assert man["content_sha256"] == hashlib.sha256(blob).hexdigest()
    rows = [(r.path, r._3, hashlib.sha256((out / r.path).read_bytes()).hexdigest())
            for r in frames.itertuples()]
    assert man["data_digest"] == compute_data_digest(man["content_sha256"], rows)
    assert res.data_digest == man["data_digest"]
    assert (out / "counts.md").read_text().startswith("| Class | Train | Val | Test |")
    # hardlinks by default: no extra bytes
    src = images / RELEASE_FOLDERS[frames["class"][0]] / frames["filename"][0]
    assert (out / frames["path"][0]).stat().st_ino == src.stat().st_ino


def test_n_frames_counts_frames_not_frame_class_rows(release, tmp_path):
    images, meta = release
    out = tmp_path / "staged"
    stage_kvasir(images, meta, out, seed=1, progress=False)
    frames = pd.read_parquet(out / "frames.parquet")
    man = json.loads((out / "manifest.json").read_text())
    ml_split = frames.loc[frames["multilabel"], "split"].iloc[0]
    for s in ("train", "val", "test"):
        rows = frames[frames["split"] == s]
        assert man["n_frames"][s] == rows["filename"].nunique()
        # the multilabel frame is two rows of its split but one frame
        assert man["n_frames"][s] == len(rows) - (s == ml_split)


def test_seeded_and_manifest_roundtrip(release, tmp_path):
    images, meta = release
    a = stage_kvasir(images, meta, tmp_path / "a", seed=3, progress=False)
    b = stage_kvasir(images, meta, tmp_path / "b", seed=3, progress=False)
    assert a.manifest["video_to_split"] == b.manifest["video_to_split"]
    c = stage_kvasir(images, meta, tmp_path / "c", seed=4, progress=False)
    assert c.manifest["video_to_split"] != a.manifest["video_to_split"]
    # re-running with the manifest it wrote reproduces the same split and hash
    d = stage_kvasir(images, meta, tmp_path / "d", split_manifest=tmp_path / "c" / "manifest.json",
                     seed=99, progress=False)
    assert d.manifest["video_to_split"] == c.manifest["video_to_split"]
    assert d.manifest["content_sha256"] == c.manifest["content_sha256"]
    assert d.data_digest == c.data_digest
    # the paper's format (only video_to_split, prefix hash) is accepted
    paper = {"video_to_split": c.manifest["video_to_split"], "schema_version": 1,
             "content_sha256": c.manifest["content_sha256"][:8]}
    pm = tmp_path / "paper.json"
    pm.write_text(json.dumps(paper))
    assert load_split_manifest(pm) == c.manifest["video_to_split"]


def test_zip_with_per_class_targz(release, tmp_path):
    images, meta = release
    zpath = tmp_path / "labelled_images.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for folder in sorted(p for p in images.iterdir() if p.is_dir()):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tf:
                tf.add(folder, arcname=folder.name)
            zf.writestr(f"labelled_images/{folder.name}.tar.gz", buf.getvalue())
    a = stage_kvasir(zpath, meta, tmp_path / "from_zip", seed=1, progress=False)
    b = stage_kvasir(images, meta, tmp_path / "from_dir", seed=1, progress=False)
    assert a.data_digest == b.data_digest
    assert not list(tmp_path.glob(".from_zip.*.staging"))  # the temporary folder is gone


def test_comma_delimited_and_duplicate_rows(release, tmp_path):
    images, meta = release
    text = meta.read_text().splitlines()
    dup = text[1]
    comma = tmp_path / "meta_comma.csv"
    comma.write_text("\n".join([t.replace(";", ",") for t in text] + [dup.replace(";", ",")]) + "\n")
    a = stage_kvasir(images, comma, tmp_path / "comma", seed=1, progress=False)
    b = stage_kvasir(images, meta, tmp_path / "semi", seed=1, progress=False)
    assert a.data_digest == b.data_digest  # duplicate row ignored, delimiter sniffed


def _expect_error(images, meta, out, match, **kw):
    with pytest.raises(DataError, match=match):
        stage_kvasir(images, meta, out, progress=False, **kw)
    assert not out.exists(), "nothing half-written"
    assert not list(out.parent.glob(f".{out.name}.*.staging"))


def test_bad_inputs_are_refused_cleanly(release, tmp_path):
    images, meta = release
    out = tmp_path / "out"
    lines = meta.read_text().splitlines()
    # missing column
    bad = tmp_path / "m1.csv"
    bad.write_text("\n".join([lines[0].replace("finding_class", "klass")] + lines[1:]))
    _expect_error(images, bad, out, r"m1\.csv: missing column\(s\) \['finding_class'\]")
    # unknown class string, with its line
    bad = tmp_path / "m2.csv"
    bad.write_text("\n".join(lines[:3] + [lines[3].replace(lines[3].split(";")[4], "Tumour")] + lines[4:]))
    _expect_error(images, bad, out, r"m2\.csv, line 4: unknown class 'Tumour'")
    # listed image missing
    fname, _, _, _, cls = lines[5].split(";")[:5]
    victim = images / RELEASE_FOLDERS[cls] / fname
    data = victim.read_bytes()
    victim.unlink()
    _expect_error(images, meta, out, rf"line 6: listed image '{fname}'.*missing")
    # corrupt JPEG
    victim.write_bytes(data[: len(data) // 3])
    _expect_error(images, meta, out, rf"{fname}: unreadable or corrupt image")
    victim.write_bytes(data)
    # a manifest naming an unknown video / leaving one out / with a wrong hash
    good = stage_kvasir(images, meta, tmp_path / "good", seed=1, progress=False).manifest
    v2s = dict(good["video_to_split"])
    m = tmp_path / "man.json"
    m.write_text(json.dumps({"video_to_split": {**v2s, "ffffffffffffffff": "train"}}))
    _expect_error(images, meta, out, r"names video\(s\) not in the metadata: \['ffffffffffffffff'\]",
                  split_manifest=m)
    first = sorted(v2s)[0]
    m.write_text(json.dumps({"video_to_split": {k: v for k, v in v2s.items() if k != first}}))
    _expect_error(images, meta, out, rf"leaves out video\(s\).*{first}", split_manifest=m)
    m.write_text(json.dumps({"video_to_split": v2s, "content_sha256": "5c0c3fa5"}))
    _expect_error(images, meta, out, r"stated content_sha256 5c0c3fa5 does not match", split_manifest=m)
    assert split_sha256(v2s) == good["content_sha256"]
    # a non-empty output folder is never overwritten
    with pytest.raises(DataError, match="not empty"):
        stage_kvasir(images, meta, tmp_path / "good", progress=False)
