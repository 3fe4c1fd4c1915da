"""Galar staging on the tiny synthetic release (the real on-disk format) and broken copies of it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipi.classes import CLASSES
from pipi.data import synth
from pipi.data.staging import (
    FRAME_COLUMNS,
    GALAR_FRAME_COLUMNS,
    compute_data_digest,
    load_staged,
    split_sha256,
    stage_galar,
)
from pipi.data.staging.galar_labelfile import (
    HEADER_27,
    HEADER_32,
    LabelTable,
    read_label_file,
    read_label_files,
)
from pipi.data.staging.galar_mapping import assign_classes, column_roles, load_mapping
from pipi.data.staging.galar_release import parse_video_spec, vendor_folds
from pipi.errors import DataError

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_galar_stage")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("galar") / "release"
    return synth.synthesize_galar(out, preset="tiny", seed=3, progress=False)


@pytest.fixture(scope="module")
def staged(release, tmp_path_factory):
    return stage_galar(release, tmp_path_factory.mktemp("st") / "out", progress=False)


def _copy(release: Path, dst: Path) -> Path:
    """A private copy: frames hardlinked (replace, never edit them in place), text copied."""
    shutil.copytree(release / "Frames", dst / "Frames", copy_function=os.link)
    shutil.copytree(release / "Labels", dst / "Labels")
    shutil.copy(release / "metadata.csv", dst / "metadata.csv")
    return dst


def _nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


def _a_video(root: Path) -> int:
    return int(min((root / "Labels").glob("*.csv"), key=lambda p: int(p.stem)).stem)


# --------------------------------------------------------------------------- the happy path
def test_layout_matches_kvasir_staging(staged):
    out = staged.out
    frames, manifest = load_staged(out)
    assert tuple(frames.columns) == GALAR_FRAME_COLUMNS
    assert tuple(frames.columns[: len(FRAME_COLUMNS)]) == FRAME_COLUMNS
    assert (frames["split"] == "test").all()
    assert all((out / p).is_file() for p in frames["path"])
    assert manifest["dataset"] == "galar"
    assert set(manifest["video_to_split"].values()) == {"test"}
    assert manifest["content_sha256"] == split_sha256(manifest["video_to_split"])
    assert manifest["n_frames"]["test"] == len(frames)
    assert (out / "counts.md").read_text().startswith("| Class | Train | Val | Test |")
    assert pd.read_csv(out / "counts.csv", index_col=0).loc["Total", "test"] == len(frames)
    assert "Reduced Mucosal View" in manifest["not_evaluable"]
    assert manifest["counts"]["test"]["Reduced Mucosal View"] == 0
    # both header variants and both folder conventions were read
    assert manifest["header_variants"]["27"] and manifest["header_variants"]["32"]


def test_data_digest_is_recomputable(staged):
    frames, m = load_staged(staged.out)
    import hashlib

    rows = [(p, c, hashlib.sha256((staged.out / p).read_bytes()).hexdigest())
            for p, c in zip(frames["path"], frames["class"])]
    prefix = split_sha256({v: f"test:{f}" for v, f in m["video_to_fold"].items()})
    assert m["fold_sha256"] == prefix
    assert compute_data_digest(prefix, rows) == m["data_digest"]


def test_every_galar_column_has_a_role(staged):
    roles = staged.manifest["columns"]
    assert set(roles) == set(HEADER_32)
    assert {r["role"] for r in roles.values()} <= {"mapped", "derivation", "dropped"}
    assert all(r["detail"] for r in roles.values())
    assert roles["active bleeding"]["detail"].startswith("Blood - fresh")
    assert "not evaluable" in roles["reduced view"]["detail"]


def test_vendor_folds_are_disjoint_per_system(staged):
    frames, m = load_staged(staged.out)
    for system, folds in m["vendor_folds"].items():
        assert not set(folds["calibration"]) & set(folds["evaluation"])
        assert folds["evaluation"], system
    per_video = frames.groupby("video_id")["vendor_fold"].nunique()
    assert (per_video == 1).all()
    assert set(frames["capsule_system"]) <= set(synth.GALAR_CAPSULE_SYSTEMS)
    assert frames.groupby("video_id")["capsule_system"].nunique().max() == 1


def test_vendor_fold_rule():
    systems = {i: "A" for i in range(1, 11)} | {11: "B"} | {12: "C", 13: "C"}
    f = vendor_folds(systems, seed=0)
    assert sum(v == "calibration" for k, v in f.items() if systems[k] == "A") == 5
    assert f[11] == "evaluation"
    assert sorted(f[12] + f[13]) == sorted("calibration" + "evaluation")
    assert f == vendor_folds(systems, seed=0)
    assert f != vendor_folds(systems, seed=1) or f != vendor_folds(systems, seed=2)


def test_source_labels_are_kept(staged, release):
    frames = staged.frames
    row = frames[frames["class"] == "Ulcer"].iloc[0]
    labels = pd.read_csv(release / "Labels" / f"{row['video_id']}.csv")
    src = labels[labels["frame"] == row["frame_number"]].iloc[0]
    assert row["galar_ulcer"] == 1 and row["galar_active_bleeding"] == src["active bleeding"]
    # 27-column videos have no image-quality columns: -1
    v27 = staged.manifest["header_variants"]["27"]
    assert (frames.loc[frames["video_id"].isin(v27), "galar_good_view"] == -1).all()


def test_normal_clean_mucosa_rule(staged):
    frames = staged.frames
    normal = frames[frames["class"] == "Normal clean mucosa"]
    assert len(normal)
    assert (normal["galar_small_intestine"] == 1).all()
    patho = ["galar_ulcer", "galar_polyp", "galar_active_bleeding", "galar_blood",
             "galar_angiectasia", "galar_hematin", "galar_lymphangioectasis"]
    assert (normal[patho] == 0).all().all()
    assert (normal["galar_good_view"] != 0).all()  # 1, or -1 where not annotated


def test_frames_per_class_draw_is_seeded(release, tmp_path):
    a = stage_galar(release, tmp_path / "a", frames_per_class=3, seed=1, progress=False)
    b = stage_galar(release, tmp_path / "b", frames_per_class=3, seed=1, progress=False)
    c = stage_galar(release, tmp_path / "c", frames_per_class=3, seed=2, progress=False)
    assert a.data_digest == b.data_digest and a.data_digest != c.data_digest
    assert a.frames.groupby("class").size().max() <= 3
    assert a.manifest["unstaged_rows"]["not_drawn"] > 0


@pytest.mark.parametrize("rule", ["priority", "duplicate", "exclude"])
def test_multilabel_rules(release, tmp_path, rule):
    r = stage_galar(release, tmp_path / "o", multilabel=rule, progress=False)
    ml = r.manifest["multilabel"]
    assert ml["rule"] == rule and ml["frames_in_selection"] > 0 and ml["combinations"]
    per_frame = r.frames.groupby(["video_id", "frame_number"]).size()
    if rule == "duplicate":
        assert per_frame.max() >= 2
    else:
        assert per_frame.max() == 1
    if rule == "exclude":
        assert not r.frames["multilabel"].any()
        assert ml["frames_excluded"] == ml["frames_in_selection"]
    if rule == "priority":
        assert ml["frames_staged"] == ml["frames_in_selection"]
        both = r.frames[(r.frames["galar_ulcer"] == 1) & (r.frames["galar_active_bleeding"] == 1)]
        assert (both["class"] == "Blood - fresh").all()


def test_selection_by_system_and_video(release, tmp_path):
    r = stage_galar(release, tmp_path / "o", capsule_systems="PillCam SB3", progress=False)
    assert set(r.frames["capsule_system"]) == {"PillCam SB3"}
    vid = _a_video(release)
    r2 = stage_galar(release, tmp_path / "p", videos=str(vid), progress=False)
    assert set(r2.frames["video_id"]) == {str(vid)}
    with pytest.raises(DataError, match="Olympics"):
        stage_galar(release, tmp_path / "q", capsule_systems=["Olympics"], progress=False)
    with pytest.raises(DataError, match=r"\[99\]"):
        stage_galar(release, tmp_path / "q", videos=[99], progress=False)


def test_parse_video_spec():
    assert parse_video_spec("1-3, 7") == (1, 2, 3, 7)
    assert parse_video_spec([3, 1]) == (1, 3)
    assert parse_video_spec(None) is None
    with pytest.raises(DataError, match="1-60,65"):
        parse_video_spec("one")


def test_jpeg_frames_and_spaced_header(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    folder = next(p for p in (root / "Frames").iterdir() if int(p.name) == vid)
    for png in folder.glob("*.PNG"):
        Image.open(png).convert("RGB").save(png.with_suffix(".jpg"), "JPEG")
        png.unlink()
    lab = root / "Labels" / f"{vid}.csv"
    text = lab.read_text().splitlines()
    lab.write_text(", ".join(text[0].split(",")) + "\n" + "\n".join(text[1:]) + "\n")
    r = stage_galar(root, tmp_path / "o", progress=False)
    assert r.frames.loc[r.frames["video_id"] == str(vid), "filename"].str.endswith(".jpg").all()


# --------------------------------------------------------------------------- labels and mapping
def _table(columns: dict[str, list[int]]) -> LabelTable:
    cols = tuple(c for c in HEADER_27 if c not in ("index", "frame"))
    n = len(next(iter(columns.values())))
    vals = np.zeros((n, len(cols)), np.int8)
    for c, v in columns.items():
        vals[:, cols.index(c)] = v
    return LabelTable(path=Path("x.csv"), columns=cols, frame=np.arange(n), values=vals)


def test_assign_classes_rules():
    t = _table({
        "small intestine": [1, 1, 1, 1, 0, 1],
        "ulcer": [0, 1, 1, 0, 0, 0],
        "active bleeding": [0, 0, 1, 0, 0, 0],
        "blood": [0, 0, 1, 0, 0, 1],
        "IBD": [0, 0, 0, 1, 0, 0],
        "stomach": [0, 0, 0, 0, 1, 0],
    })
    m = load_mapping()
    rows, cls, n_mapped = assign_classes(t, m)
    assert dict(zip(rows.tolist(), cls.tolist())) == {
        0: "Normal clean mucosa", 1: "Ulcer", 2: "Blood - fresh",
    }
    assert n_mapped.tolist() == [0, 1, 2, 0, 0, 0]
    rows, cls, _ = assign_classes(t, m, multilabel="duplicate")
    assert sorted(cls[rows == 2].tolist()) == ["Blood - fresh", "Ulcer"]
    rows, _, _ = assign_classes(t, m, multilabel="exclude")
    assert 2 not in rows.tolist()


def test_default_mapping_is_the_papers():
    m = load_mapping()
    assert dict(m.table) == synth.GALAR_TO_KVASIR
    assert "Reduced Mucosal View" not in m.classes
    assert "Normal clean mucosa" in m.classes
    assert m.priority[0] == "Blood - fresh" and len(m.priority) == 12
    assert set(column_roles(m)) == set(HEADER_32)
    assert HEADER_27 == synth.GALAR_HEADER_27 and HEADER_32 == synth.GALAR_HEADER_32


def _mapping_file(tmp_path: Path, rows: list[dict], **extra) -> Path:
    doc = {"_galar_to_kvasir_mapping_table": rows, "_unused_note": "ignored", **extra}
    p = tmp_path / "class_mapping.json"
    p.write_text(json.dumps(doc, indent=2))
    return p


def test_custom_mapping_file(release, tmp_path):
    p = _mapping_file(tmp_path, [
        {"galar_column": "ulcer", "kvasir_class": "Ulcer", "positives": 10, "n_videos": 2},
        {"galar_column": "active bleeding", "kvasir_class": "blood - FRESH"},
    ])
    m = load_mapping(p)
    assert m.normal is None and m.classes == ("Blood - fresh", "Ulcer")
    r = stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    assert set(r.frames["class"]) == {"Blood - fresh", "Ulcer"}
    assert r.manifest["mapping"]["source"] == str(p)


@pytest.mark.parametrize("row, match", [
    ({"galar_column": "ulcer", "kvasir_class": "Ulcers"}, r"line 5: unknown Kvasir-Capsule class 'Ulcers'"),
    ({"galar_column": "ulcre", "kvasir_class": "Ulcer"}, r"line 4: mapped column 'ulcre' is not a Galar"),
    ({"galar_column": "reduced view", "kvasir_class": "Reduced Mucosal View"}, "not evaluable on Galar"),
])
def test_bad_mapping_names_file_and_line(release, tmp_path, row, match):
    p = _mapping_file(tmp_path, [row])
    with pytest.raises(DataError, match=match) as exc:
        stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    assert str(p) in str(exc.value)
    _nothing_written(tmp_path / "o")


def test_stratification_subsets_select_videos(release, tmp_path):
    meta = pd.read_csv(release / "metadata.csv")
    oly = meta.loc[meta["Capsule System"] == "Olympus", "File Name"].tolist()
    rows = [{"galar_column": "ulcer", "kvasir_class": "Ulcer"}]
    p = _mapping_file(tmp_path, rows, _capsule_system_stratification={
        "metadata_column": "Capsule System", "olympus_video_subset": oly})
    r = stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    assert set(r.frames["capsule_system"]) == {"Olympus"}
    sb3 = meta.loc[meta["Capsule System"] == "PillCam SB3", "File Name"].tolist()[:1]
    p2 = _mapping_file(tmp_path, rows, _capsule_system_stratification={"olympus_video_subset": sb3})
    with pytest.raises(DataError, match="olympus_video_subset lists video"):
        stage_galar(release, tmp_path / "q", mapping=p2, progress=False)


def test_read_label_file_accepts_floats_and_crlf(tmp_path):
    p = tmp_path / "1.csv"
    row = ["0"] + ["1.0" if c == "small intestine" else "0.0" for c in HEADER_27[1:-1]] + ["17"]
    p.write_text(",".join(HEADER_27) + "\r\n" + ",".join(row) + "\r\n\r\n", newline="")
    t = read_label_file(p)
    assert t.frame.tolist() == [17] and t.column("small intestine").tolist() == [1]
    assert t.header_variant == 27


def test_batched_reader_matches_pandas(release):
    files = sorted((release / "Labels").glob("*.csv"))
    for p, t in zip(files, read_label_files(files)):
        ref = pd.read_csv(p)
        assert t.path == p and t.frame.tolist() == ref["frame"].tolist()
        assert list(t.columns) == [c for c in ref.columns if c not in ("index", "frame")]
        assert (t.values == ref[list(t.columns)].to_numpy()).all()


# --------------------------------------------------------------------------- bad input
def _edit_labels(root: Path, vid: int, edit) -> Path:
    p = root / "Labels" / f"{vid}.csv"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(edit(lines)) + "\n")
    return p


def _set_cell(lines: list[str], line_no: int, column: str, value: str) -> list[str]:
    header = lines[0].split(",")
    cells = lines[line_no - 1].split(",")
    cells[header.index(column)] = value
    lines[line_no - 1] = ",".join(cells)
    return lines


@pytest.mark.parametrize("case, match", [
    ("unknown_column", r"line 1: unknown column\(s\) \['ulcers'\]"),
    ("missing_column", r"line 1: missing column\(s\) \['polyp'\]"),
    ("bad_value", r"line 4: column 'ulcer' holds '2'; labels are 0 or 1"),
    ("text_value", r"line 3: column 'polyp' holds 'yes', not a number"),
    ("empty_value", r"line 5: column 'erosion' is empty"),
    ("short_row", r"line 6: 26 fields, the header has 27"),
    ("duplicate_frame", r"line 3: frame \d+ is listed twice"),
])
def test_bad_label_file(release, tmp_path, case, match):
    root = _copy(release, tmp_path / "r")
    vid = next(int(v) for v in pd.read_csv(root / "metadata.csv")["File Name"]
               if len((root / "Labels" / f"{v}.csv").read_text().splitlines()[0].split(",")) == 27)
    edits = {
        "unknown_column": lambda ls: [ls[0].replace("ulcer", "ulcers")] + ls[1:],
        "missing_column": lambda ls: [",".join(c for c in ls[0].split(",") if c != "polyp")]
        + [",".join(x for i, x in enumerate(r.split(",")) if i != 12) for r in ls[1:]],
        "bad_value": lambda ls: _set_cell(ls, 4, "ulcer", "2"),
        "text_value": lambda ls: _set_cell(ls, 3, "polyp", "yes"),
        "empty_value": lambda ls: _set_cell(ls, 5, "erosion", ""),
        "short_row": lambda ls: ls[:5] + [",".join(ls[5].split(",")[:-1])] + ls[6:],
        "duplicate_frame": lambda ls: ls[:2] + [_set_cell(ls[:3], 3, "frame",
                                                          ls[1].split(",")[-1])[2]] + ls[3:],
    }
    p = _edit_labels(root, vid, edits[case])
    with pytest.raises(DataError, match=match) as exc:
        stage_galar(root, tmp_path / "o", progress=False)
    assert str(p) in str(exc.value)
    _nothing_written(tmp_path / "o")


def test_label_file_for_unknown_video(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    shutil.copy(root / "Labels" / f"{vid}.csv", root / "Labels" / "79.csv")
    with pytest.raises(DataError, match=r"79\.csv: label file for video 79, which is not in"):
        stage_galar(root, tmp_path / "o", progress=False)
    _nothing_written(tmp_path / "o")


def test_video_without_label_file(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    (root / "Labels" / f"{vid}.csv").unlink()
    with pytest.raises(DataError, match=rf"metadata.csv, line \d+: video {vid} has no label file"):
        stage_galar(root, tmp_path / "o", progress=False)
    _nothing_written(tmp_path / "o")


def _frame_file(root: Path, vid: int, frame: int) -> Path:
    folder = next(p for p in (root / "Frames").iterdir() if int(p.name) == vid)
    return folder / f"frame_{frame:06d}.PNG"


def _staged_normal_frame(root: Path, vid: int) -> tuple[int, int]:
    """(frame number, line) of a small-intestine frame that stages as Normal clean mucosa."""
    df = pd.read_csv(root / "Labels" / f"{vid}.csv")
    patho = ["ulcer", "polyp", "active bleeding", "blood", "erythema", "erosion",
             "angiectasia", "foreign body", "hematin", "lymphangioectasis", "ampulla of vater"]
    ok = (df["small intestine"] == 1) & (df[patho].sum(axis=1) == 0)
    if "good view" in df:
        ok &= df["good view"] == 1
    i = int(np.nonzero(ok.to_numpy())[0][0])
    return int(df["frame"].iloc[i]), i + 2


def test_missing_frame_names_label_line(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    frame, line = _staged_normal_frame(root, vid)
    _frame_file(root, vid, frame).unlink()
    with pytest.raises(DataError, match=rf"{vid}\.csv, line {line}: frame {frame} has no image"):
        stage_galar(root, tmp_path / "o", progress=False)
    _nothing_written(tmp_path / "o")


def test_corrupt_frame_names_file_and_line(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    frame, line = _staged_normal_frame(root, vid)
    f = _frame_file(root, vid, frame)
    data = f.read_bytes()
    f.unlink()  # a hardlink: never write through it
    f.write_bytes(data[: len(data) // 3])
    with pytest.raises(DataError, match=rf"corrupt image.*{vid}\.csv, line {line}\)"):
        stage_galar(root, tmp_path / "o", progress=False)
    _nothing_written(tmp_path / "o")


def test_frames_not_drawn_are_not_read(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    df = pd.read_csv(root / "Labels" / f"{vid}.csv")
    mouth = int(df.loc[df["mouth"] == 1, "frame"].iloc[0])  # never staged: no class
    _frame_file(root, vid, mouth).unlink()
    stage_galar(root, tmp_path / "o", progress=False)


def test_metadata_problems(release, tmp_path):
    root = _copy(release, tmp_path / "r")
    meta = root / "metadata.csv"
    text = meta.read_text()
    meta.write_text(text.replace("Capsule System", "Capsule"))
    with pytest.raises(DataError, match=r"line 1: missing column\(s\) \['Capsule System'\]"):
        stage_galar(root, tmp_path / "o", progress=False)
    lines = text.splitlines()
    meta.write_text("\n".join(lines[:2] + ["abc,Olympus,male,40"] + lines[2:]) + "\n")
    with pytest.raises(DataError, match=r"line 3: File Name 'abc' is not an integer"):
        stage_galar(root, tmp_path / "o", progress=False)
    _nothing_written(tmp_path / "o")


def test_refuses_non_empty_out(release, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    with pytest.raises(DataError, match="not empty"):
        stage_galar(release, tmp_path / "o", progress=False)


def test_count_table_classes(staged):
    assert list(staged.counts.index) == list(CLASSES) + ["Total"]




# --------------------------------------------------------------------------- issue 28: presets
def test_first_sample_keeps_the_first_frames_of_each_class(release, tmp_path):
    """sample=first (the published staging script's cap): per class, the first N frames in
    video/frame order of what the uncapped staging keeps."""
    full = stage_galar(release, tmp_path / "full", progress=False).frames
    got = stage_galar(release, tmp_path / "first", frames_per_class=3, sample="first",
                      progress=False)
    assert got.manifest["selection"]["sample"] == "first"
    for cls, grp in full.groupby("class"):
        order = grp.assign(v=grp["video_id"].astype(int)).sort_values(["v", "frame_number"])
        want = list(zip(order["video_id"], order["frame_number"]))[:3]
        mine = got.frames[got.frames["class"] == cls]
        assert sorted(zip(mine["video_id"], mine["frame_number"])) == sorted(want), cls


def test_paper_subset_preset_needs_its_ten_videos_in_one_line(release, tmp_path):
    vids = ",".join(str(v) for v in sorted(int(p.stem) for p in (release / "Labels").glob("*")))
    with pytest.raises(DataError, match=r"video ids are not published.*\(10 ids, got 8\)"):
        stage_galar(release, tmp_path / "o", preset="paper-subset", videos=vids,
                    progress=False)
    with pytest.raises(DataError, match="sets frames_per_class=10000"):
        stage_galar(release, tmp_path / "o", preset="paper-subset", videos=vids,
                    frames_per_class=5, progress=False)
    with pytest.raises(DataError, match="preset='paper'"):
        stage_galar(release, tmp_path / "o", preset="paper", progress=False)
    _nothing_written(tmp_path / "o")


def test_paper_subset_rules_first_frames_and_first_mapped_class(release, tmp_path,
                                                                monkeypatch):
    """The preset's rules on the 8-video tiny release (its video count and cap scaled down):
    a frame positive for Ulcer and Angiectasia goes to Angiectasia, the first of the two in
    the mapping table (the published script's first claim), not to Ulcer (pipi's priority)."""
    from dataclasses import replace

    from pipi.data.staging import galar

    monkeypatch.setitem(galar.GALAR_PRESETS, "paper-subset", replace(
        galar.GALAR_PRESETS["paper-subset"], n_videos=8, frames_per_class=4))
    root = _copy(release, tmp_path / "r")
    vid = _a_video(root)
    _edit_labels(root, vid, lambda ls: _set_cell(_set_cell(ls, 2, "ulcer", "1"), 2,
                                                 "angiectasia", "1"))
    frame = int(pd.read_csv(root / "Labels" / f"{vid}.csv")["frame"].iloc[0])
    vids = ",".join(str(v) for v in sorted(int(p.stem) for p in (root / "Labels").glob("*")))
    plain = stage_galar(root, tmp_path / "plain", videos=vids, progress=False).frames
    pre = stage_galar(root, tmp_path / "pre", preset="paper-subset", videos=vids,
                      progress=False)
    row = plain[(plain["video_id"] == str(vid)) & (plain["frame_number"] == frame)]
    assert list(row["class"]) == ["Ulcer"]
    assert pre.frames.groupby("class").size().max() <= 4
    mine = pre.frames[(pre.frames["video_id"] == str(vid)) & (pre.frames["frame_number"] == frame)]
    assert list(mine["class"]) == ["Angiectasia"]   # the first video's first frame: kept
    sel = pre.manifest["selection"]
    assert sel["preset"]["name"] == "paper-subset" and sel["preset"]["paper_n_frames"] == 15_298
    assert sel["preset"]["staged_n_frames"] == len(pre.frames) and sel["sample"] == "first"
