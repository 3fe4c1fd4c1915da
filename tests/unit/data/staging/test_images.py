"""`pipi stage images`: the Capsule Vision 2024 layout, a label table and a dataset with no
split, each written here in its published form (tiny 8x8 images), and the bad layouts."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from pipi.classes import CLASSES as KVASIR_CLASSES
from pipi.data.staging import load_staged
from pipi.data.staging.images import (
    CAPSULE_VISION_CLASSES,
    ImageStageRequest,
    stage_images,
)
from pipi.errors import DataError

KVASIR_RE = r"^(?P<group>[0-9a-f]{16})_"
KID_RE = r"-P(?P<group>\d+)-"
SOURCES = ("KID", "KVASIR", "SEE-AI", "AIIMS")


def _jpg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    px = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(px).save(path, quality=90)


def _names(cls: str, source: str, n: int, start: int) -> list[str]:
    """File names in each source's real form (reference/datasets.md)."""
    low = cls.lower().replace(" ", "")
    if source == "KVASIR":   # <video>_<frame>.jpg, two videos per class
        vids = [hashlib.sha256(f"{cls}{v}".encode()).hexdigest()[:16] for v in range(2)]
        return [f"{vids[i % 2]}_{start + i}.jpg" for i in range(n)]
    if source == "KID":      # angioectasia-P0-3.jpg: the patient as -P<n>-
        return [f"{low}-P{(start + i) % 3}-{i}.jpg" for i in range(n)]
    if source == "SEE-AI":
        return [f"image{start + i:05d}.jpg" for i in range(n)]
    return [f"{low}1_{1000 + start + i}.jpg" for i in range(n)]


@pytest.fixture(scope="module")
def capsule_vision(tmp_path_factory) -> Path:
    """Dataset/{training,validation}/<Class>/<Source>/<file>.jpg with the challenge's sheets
    (image_path with Windows separators, one one-hot column per class) inside the split
    folders."""
    top = tmp_path_factory.mktemp("cv2024")
    root = top / "Dataset"
    seed = 0
    for folder, per in (("training", 4), ("validation", 2)):
        rows = []
        for k, cls in enumerate(CAPSULE_VISION_CLASSES):
            for j, source in enumerate(SOURCES):
                if (k + j) % 4 == 3:         # not every class in every source
                    continue
                for name in _names(cls, source, per, start=100 * (folder == "validation")):
                    seed += 1
                    _jpg(root / folder / cls / source / name, seed)
                    rows.append({"image_path": f"{folder}\\{cls}\\{source}\\{name}",
                                 **{c: int(c == cls) for c in CAPSULE_VISION_CLASSES}})
        pd.DataFrame(rows).to_excel(root / folder / f"{folder}_data.xlsx", index=False)
    return top


def _req(root, out, **kw) -> ImageStageRequest:
    return ImageStageRequest(root=Path(root), out=Path(out), **kw)


def _digest(out: Path, frames: pd.DataFrame) -> str:
    """The data digest recomputed from the staged files (pipi.data.staging.common)."""
    split = json.dumps(dict(zip(frames["frame_id"], frames["split"])), sort_keys=True,
                       separators=(",", ":"))
    content = hashlib.sha256(split.encode()).hexdigest()
    h = hashlib.sha256(f"split:{content}\n".encode())
    rows = sorted((p, c, hashlib.sha256((out / p).read_bytes()).hexdigest())
                  for p, c in zip(frames["path"], frames["class"]))
    for p, c, s in rows:
        h.update(f"{p}\t{c}\t{s}\n".encode())
    return h.hexdigest()


def test_capsule_vision_layout_stages(capsule_vision, tmp_path):
    out = tmp_path / "cv"
    res = stage_images(_req(capsule_vision, out, group_patterns=(KVASIR_RE, KID_RE)),
                       progress=False)
    frames, man = load_staged(out)
    assert man["layout"] == "capsule-vision" and man["dataset"] == "images"
    assert man["classes"] == list(CAPSULE_VISION_CLASSES)
    assert man["sources"] == sorted(SOURCES)
    # the challenge's validation folder is pipi's test split; val is carved from training
    sheet_val = pd.read_excel(capsule_vision / "Dataset/validation/validation_data.xlsx")
    sheet_tr = pd.read_excel(capsule_vision / "Dataset/training/training_data.xlsx")
    test = frames[frames["split"] == "test"]
    assert sorted(test["image_path"]) == sorted(sheet_val["image_path"])
    assert sorted(frames.loc[frames["split"] != "test", "image_path"]) == \
        sorted(sheet_tr["image_path"])
    assert set(frames["split"]) == {"train", "val", "test"}
    # class_index follows the manifest's classes; the sheet's one-hot agrees
    onehot = sheet_val.set_index("image_path")[list(CAPSULE_VISION_CLASSES)].to_numpy().argmax(1)
    truth = dict(zip(sheet_val["image_path"], onehot))
    assert all(truth[p] == k for p, k in zip(test["image_path"], test["class_index"]))
    assert (frames["class"] == [man["classes"][k] for k in frames["class_index"]]).all()
    # the source column is the folder under the class; the path is under OUT
    assert set(frames["source"]) == set(SOURCES)
    for r in frames.itertuples():
        assert r.image_path.split("\\")[2] == r.source
        assert (out / r.path).is_file()
    # Kvasir videos and KID patients never straddle train and val
    tv = frames[frames["split"].isin(["train", "val"])]
    grouped = tv[tv["source"].isin(["KVASIR", "KID"])]
    assert (grouped.groupby("video_id")["split"].nunique() == 1).all()
    assert grouped["video_id"].str.startswith(("KVASIR/", "KID/")).all()
    assert man["grouping"]["by"] == "pattern"
    assert "validation is the reported test split" in man["split_rule"]
    # counts: class x split x source, equal to the frame index
    for (s, c, src), n in frames.groupby(["split", "class", "source"]).size().items():
        assert man["counts"][s][c][src] == n
    assert sum(sum(v.values()) for per in man["counts"].values() for v in per.values()) \
        == len(frames)
    assert man["n_frames"] == {s: int((frames["split"] == s).sum()) for s in man["n_frames"]}
    assert man["data_digest"] == _digest(out, frames) == res.data_digest
    # frame numbers are unique per video (Kvasir's <video>_<frame>: the frame itself)
    assert not frames.duplicated(["video_id", "frame_number"]).any()
    kv = frames[frames["source"] == "KVASIR"].iloc[0]
    assert kv["frame_number"] == int(re.search(r"_(\d+)\.jpg$", kv["image_path"])[1])


def test_staged_folder_reused_only_when_its_digest_matches(capsule_vision, tmp_path, capsys):
    out = tmp_path / "cv"
    first = stage_images(_req(capsule_vision, out), progress=False)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    again = stage_images(_req(capsule_vision, out), progress=False)
    assert again.data_digest == first.data_digest
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    assert "reused" in capsys.readouterr().out
    with pytest.raises(DataError, match=r"holds other data"):
        stage_images(_req(capsule_vision, out, seed=7), progress=False)


def test_staged_frames_feed_the_uint8_cache(capsule_vision, tmp_path):
    from pipi.data.cache import build_cache
    from pipi.runs.data import load_data

    out = tmp_path / "cv"
    res = stage_images(_req(capsule_vision, out), progress=False)
    staged = load_data(str(out))                     # what every workflow trains or scores on
    assert staged.digest == res.data_digest and len(staged.frames) == len(res.frames)
    assert {"source", "image_path", "class_index", "video_id"} <= set(staged.frames.columns)
    test = res.frames[res.frames["split"] == "test"]
    arr = build_cache(out, test, size=8, digest=res.data_digest, cache_dir=tmp_path / "cache",
                      progress=False)
    assert arr.shape == (len(test), 3, 8, 8)


def test_class_map_onto_kvasir(capsule_vision, tmp_path):
    cmap = tmp_path / "map.json"
    cmap.write_text(json.dumps({"classes": "kvasir", "map": {
        "Angioectasia": "Angiectasia", "Bleeding": "Blood - fresh", "Erosion": "Erosion",
        "Erythema": "Erythema", "Foreign Body": "Foreign Body",
        "Lymphangiectasia": "Lymphangiectasia", "Normal": "Normal clean mucosa",
        "Polyp": "Polyp", "Ulcer": "Ulcer", "Worms": None}}))
    res = stage_images(_req(capsule_vision, tmp_path / "k", class_map=cmap), progress=False)
    assert res.manifest["classes"] == list(KVASIR_CLASSES)
    assert res.manifest["layout"] == "folder"        # the challenge's metrics no longer apply
    assert "Worms" not in set(res.frames["class"])
    assert res.manifest["class_map"]["dropped_rows"]["Worms"] > 0
    assert (res.frames["class_index"] == [KVASIR_CLASSES.index(c)
                                          for c in res.frames["class"]]).all()


def test_classes_option_fixes_the_order(capsule_vision, tmp_path):
    order = tuple(reversed(CAPSULE_VISION_CLASSES))
    res = stage_images(_req(capsule_vision, tmp_path / "o", classes=order), progress=False)
    assert res.manifest["classes"] == list(order)
    assert res.manifest["layout"] == "folder"
    f = res.frames
    assert (f["class_index"] == [order.index(c) for c in f["class"]]).all()
    with pytest.raises(DataError, match="leaves out the data's class"):
        stage_images(_req(capsule_vision, tmp_path / "o2", classes=order[:-1]), progress=False)
    extra = stage_images(_req(capsule_vision, tmp_path / "o3",
                              classes=(*CAPSULE_VISION_CLASSES, "Tumour")), progress=False)
    assert extra.manifest["classes"][-1] == "Tumour"
    assert extra.manifest["counts_per_class"]["train"]["Tumour"] == 0


# --------------------------------------------------------------------------- table layout
def _table_dataset(root: Path, *, n_patients=12, per=3, classes=("Ulcer", "Normal", "Polyp")):
    rows, seed = [], 100
    for p in range(n_patients):
        for i in range(per):
            cls = classes[(p + i) % len(classes)]
            rel = f"imgs\\p{p}\\frame_{i}.jpg"
            seed += 1
            _jpg(root / "imgs" / f"p{p}" / f"frame_{i}.jpg", seed)
            rows.append({"image_path": rel, "label": cls, "patient_id": f"P{p}"})
    return pd.DataFrame(rows)


def test_table_layout_no_split_is_patient_disjoint(tmp_path):
    root = tmp_path / "data"
    table = _table_dataset(root)
    table.to_csv(tmp_path / "labels.csv", index=False, sep=";")
    res = stage_images(_req(root, tmp_path / "out", labels=tmp_path / "labels.csv"),
                       progress=False)
    f, man = res.frames, res.manifest
    assert man["layout"] == "table" and man["classes"] == ["Normal", "Polyp", "Ulcer"]
    assert set(f["split"]) == {"train", "val", "test"}
    assert (f.groupby("video_id")["split"].nunique() == 1).all()
    assert set(f["video_id"]) == set(table["patient_id"])
    assert man["grouping"]["by"] == "column patient_id"
    assert "group-disjoint" in man["split_rule"]
    assert sorted(f["image_path"]) == sorted(table["image_path"])     # as the table wrote it
    assert man["sources"] == [] and (f["source"] == "").all()


def test_table_layout_onehot_excel_with_split_and_multilabel(tmp_path):
    root = tmp_path / "data"
    rows = []
    for i in range(12):
        _jpg(root / f"x{i}.png", i)
        rows.append({"filename": f"x{i}.png", "split": ["train", "val", "test"][i % 3],
                     "source": "A" if i < 6 else "B",
                     "Bleeding": int(i % 2 == 0), "Ulcer": int(i % 2 == 1 or i == 4)})
    pd.DataFrame(rows).to_excel(tmp_path / "labels.xlsx", index=False)
    with pytest.raises(DataError, match=r"labels\.xlsx, row 6: one image with two classes"):
        stage_images(_req(root, tmp_path / "o", labels=tmp_path / "labels.xlsx"),
                     progress=False)
    res = stage_images(_req(root, tmp_path / "o", labels=tmp_path / "labels.xlsx",
                            multilabel=True), progress=False)
    f = res.frames
    both = f[f["image_path"] == "x4.png"]
    assert sorted(both["class"]) == ["Bleeding", "Ulcer"] and both["multilabel"].all()
    assert both["frame_id"].nunique() == 1
    assert res.manifest["multilabel_frames"] == 1
    assert res.manifest["n_frames"] == {"train": 4, "val": 4, "test": 4}
    assert res.manifest["sources"] == ["A", "B"]
    assert dict(zip(f["image_path"], f["split"]))["x1.png"] == "val"
    assert "kept" in res.manifest["split_rule"]


# --------------------------------------------------------------------------- no split level
def _kvasir_folder(root: Path, n_videos=10, per=4) -> None:
    seed = 500
    for v in range(n_videos):
        vid = hashlib.sha256(str(v).encode()).hexdigest()[:16]
        for i in range(per):
            cls = ("Erosion", "Normal clean mucosa")[(v + i) % 2]
            seed += 1
            _jpg(root / cls / f"{vid}_{i * 10}.jpg", seed)


def test_no_split_folder_with_group_pattern_is_video_disjoint(tmp_path):
    root = tmp_path / "kv"
    _kvasir_folder(root)
    res = stage_images(_req(root, tmp_path / "out", group_patterns=(KVASIR_RE,)),
                       progress=False)
    f = res.frames
    assert set(f["split"]) == {"train", "val", "test"}
    assert (f.groupby("video_id")["split"].nunique() == 1).all()
    assert f["video_id"].nunique() == 10 and res.manifest["grouping"]["n_groups"] == 10
    assert res.manifest["layout"] == "folder"
    assert sorted(f["frame_number"].unique()) == [0, 10, 20, 30]


def test_no_groups_is_stratified_and_says_so(tmp_path, caplog):
    root = tmp_path / "kv"
    _kvasir_folder(root)
    with caplog.at_level("INFO"):
        res = stage_images(_req(root, tmp_path / "out"), progress=False)
    assert res.manifest["grouping"]["by"] == "none"
    assert "class-stratified (no group ids)" in res.manifest["split_rule"]
    assert any("class-stratified" in r.getMessage() for r in caplog.records)
    assert res.frames["video_id"].nunique() == len(res.frames)     # each image its own group
    per_split = res.frames.groupby("split")["class"].nunique()
    assert (per_split == 2).all()                                   # stratified by class


# --------------------------------------------------------------------------- refusals
def _refused(req: ImageStageRequest, pattern: str) -> None:
    with pytest.raises(DataError) as err:
        stage_images(req, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and re.search(pattern, msg), msg
    assert not Path(req.out).exists()
    assert not list(Path(req.out).parent.glob(f".{Path(req.out).name}.*"))


def test_a_class_folder_with_no_images_is_refused(tmp_path):
    root = tmp_path / "d"
    _kvasir_folder(root)
    (root / "Polyp" / "KID").mkdir(parents=True)
    (root / "Polyp" / "notes.txt").write_text("x")
    _refused(_req(root, tmp_path / "o"), rf"{re.escape(str(root / 'Polyp'))}: class folder "
                                         "has no images")


def test_a_table_image_that_does_not_exist_is_refused(tmp_path):
    root = tmp_path / "data"
    table = _table_dataset(root)
    table.loc[5, "image_path"] = "imgs\\p1\\gone.jpg"
    table.to_csv(tmp_path / "labels.csv", index=False)
    _refused(_req(root, tmp_path / "o", labels=tmp_path / "labels.csv"),
             r"labels\.csv, line 7: image 'imgs\\\\p1\\\\gone\.jpg' not found")


def test_two_classes_for_one_image_is_refused_without_multilabel(tmp_path):
    root = tmp_path / "d"
    _kvasir_folder(root)
    src = next((root / "Erosion").glob("*.jpg"))
    (root / "Ulcer").mkdir()
    (root / "Ulcer" / src.name).write_bytes(src.read_bytes())
    _refused(_req(root, tmp_path / "o"), rf"{re.escape(src.name)}: one image with two classes "
                                         r"\(Erosion, Ulcer")
    res = stage_images(_req(root, tmp_path / "o", multilabel=True), progress=False)
    row = res.frames[res.frames["filename"] == src.name]
    assert sorted(row["class"]) == ["Erosion", "Ulcer"] and row["frame_id"].nunique() == 1


@pytest.mark.parametrize("damage", ["truncated", "not an image"])
def test_an_unreadable_image_is_refused_naming_it(tmp_path, damage):
    root = tmp_path / "d"
    _kvasir_folder(root)
    bad = sorted((root / "Normal clean mucosa").glob("*.jpg"))[1]
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"hello")
    _refused(_req(root, tmp_path / "o"), rf"{re.escape(str(bad))}: unreadable or corrupt image")


def test_an_unreadable_image_of_a_table_names_its_line(tmp_path):
    root = tmp_path / "data"
    table = _table_dataset(root)
    (root / "imgs" / "p2" / "frame_1.jpg").write_bytes(b"\xff\xd8\xff")
    table.to_csv(tmp_path / "labels.csv", index=False)
    _refused(_req(root, tmp_path / "o", labels=tmp_path / "labels.csv"),
             r"frame_1\.jpg: unreadable or corrupt image .*listed at .*labels\.csv, line 9\)")


def test_other_bad_layouts_are_refused_in_one_line(tmp_path):
    root = tmp_path / "d"
    _kvasir_folder(root)
    (root / "stray.jpg").write_bytes((next(root.rglob("*.jpg"))).read_bytes())
    # no split level: a file beside the class folders is an image outside a class folder
    _refused(_req(root, tmp_path / "o"), r"stray\.jpg: image outside a class folder")
    (root / "stray.jpg").unlink()
    _refused(_req(root, tmp_path / "o", group_patterns=("(\\d+)",)),
             r"needs a named group \(\?P<group>")
    split = tmp_path / "s"
    for name in ("train", "training"):
        _jpg(split / name / "A" / "a.jpg", 1)
    _refused(_req(split, tmp_path / "o"), r"'train' and 'training' are both the train split")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(DataError, match="holds no staged dataset"):
        stage_images(_req(root, tmp_path / "full"), progress=False)
    with pytest.raises(DataError, match="is a file"):
        stage_images(_req(root, tmp_path / "full" / "x"), progress=False)


# --------------------------------------------------------------------------- command line
def test_pipi_stage_images_command(capsule_vision, tmp_path):
    from pipi.cli import main

    out = tmp_path / "cli"
    r = CliRunner().invoke(main, ["stage", "images", "--root", str(capsule_vision), "--out",
                                  str(out), "--group-pattern", KVASIR_RE, "--group-pattern",
                                  KID_RE, "--no-mlflow"])
    assert r.exit_code == 0, r.output
    assert "| Angioectasia |" in r.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["grouping"]["patterns"] == [KVASIR_RE, KID_RE]
    empty = tmp_path / "bad" / "train" / "Ulcer"
    _jpg(tmp_path / "bad" / "train" / "Normal" / "a.jpg", 1)
    empty.mkdir(parents=True)
    r = CliRunner().invoke(main, ["stage", "images", "--root", str(tmp_path / "bad"), "--out",
                                  str(tmp_path / "bad-out"), "--no-mlflow"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1, r.output
    assert f"{empty}: class folder has no images" in lines[0]


def test_frame_numbers_rule():
    from pipi.data.staging.images_split import frame_numbers

    f = pd.DataFrame({
        "video_id": ["v", "v", "v", "p", "p", "p", "t", "t", "s"],
        "filename": ["v_30.jpg", "v_10.jpg", "v_20.jpg",          # distinct: the numbers
                     "ulcer-P0-3.jpg", "bleed-P0-3.jpg", "x-P0-1.jpg",   # clash: ranks
                     "a.jpg", "b.jpg", "image00276.jpg"],
        "frame_number": [None] * 6 + ["7", "5", None]})           # the table's own
    assert frame_numbers(f).tolist() == [30, 10, 20, 2, 1, 0, 7, 5, 276]


def test_carve_is_stratified_group_disjoint_and_seeded():
    from pipi.data.staging.images_split import carve

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(200), rng.integers(1, 6, 200)).astype(str)
    labels = np.array([int(g) % 4 for g in groups])          # one class per group
    labels[groups == "7"] = 9                                  # a class in a single group
    held = carve(labels, groups, 0.15, seed=1, what="val")
    df = pd.DataFrame({"g": groups, "y": labels, "h": held})
    assert (df.groupby("g")["h"].nunique() == 1).all()         # group-disjoint
    for y, sub in df[df["y"] != 9].groupby("y"):
        biggest = sub.groupby("g").size().max()
        assert 0.15 * len(sub) <= sub["h"].sum() < 0.15 * len(sub) + biggest, y
    assert not df.loc[df["y"] == 9, "h"].any()                 # its only group stays
    assert (carve(labels, groups, 0.15, seed=1, what="val") == held).all()
    assert (carve(labels, groups, 0.15, seed=2, what="val") != held).any()


def test_mlproject_stage_source_images_logs_a_run(capsule_vision, tmp_path, monkeypatch,
                                                   sqlite_tracking):
    """`mlflow run . -e stage -P source=images -P root=DIR`: the entry point's own options,
    the default staged folder under PIPI_HOME, and a stage run with the manifest."""
    import mlflow

    from pipi.cli import ENTRY_POINTS

    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    args = ["--source", "images", "--metadata", "", "--out", "", "--split-manifest", "",
            "--split", "auto", "--seed", "42", "--link", "hardlink",
            "--root", str(capsule_vision), "--labels", "", "--classes", "", "--class-map", "",
            "--multilabel", "false", "--group-pattern", KVASIR_RE]
    r = CliRunner().invoke(ENTRY_POINTS["stage"], args)
    assert r.exit_code == 0, r.output
    out = tmp_path / "home" / "data" / f"images-{capsule_vision.name}"
    man = json.loads((out / "manifest.json").read_text())
    assert man["layout"] == "capsule-vision" and man["grouping"]["patterns"] == [KVASIR_RE]
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    assert run.data.params["stage.layout"] == "capsule-vision"
    assert run.data.tags["pipi.data_digest"] == man["data_digest"]
    r = CliRunner().invoke(ENTRY_POINTS["stage"], ["--source", "synthetic", "--root", "x"])
    assert r.exit_code != 0 and "are for source=images" in r.output


def test_capsule_vision_sheet_rows_are_checked_against_the_folders(capsule_vision, tmp_path):
    import shutil

    root = tmp_path / "cv"
    shutil.copytree(capsule_vision, root)
    sheet = root / "Dataset/validation/validation_data.xlsx"
    df = pd.read_excel(sheet)
    good = df.copy()
    df.loc[3, "Angioectasia"], df.loc[3, "Bleeding"] = 0, 1     # row 3 is an Angioectasia
    df.to_excel(sheet, index=False)
    _refused(_req(root, tmp_path / "o"), r"validation_data\.xlsx, row 5: .* is labelled "
                                         r"'Bleeding' but sits in the class folder 'Angioectasia'")
    good.loc[len(good)] = {**good.iloc[0].to_dict(), "image_path": "validation\\Polyp\\KID\\x.jpg"}
    good.to_excel(sheet, index=False)
    _refused(_req(root, tmp_path / "o"), r"row \d+: image 'validation\\\\Polyp\\\\KID\\\\x\.jpg' "
                                         "is not in the folders")


def test_table_layout_parquet_and_csv_class_map(tmp_path):
    root = tmp_path / "data"
    table = _table_dataset(root, n_patients=10).rename(columns={"patient_id": "video_id",
                                                                "label": "class"})
    table["split"] = ["test" if v in ("P0", "P1") else "training" for v in table["video_id"]]
    table.to_parquet(tmp_path / "labels.parquet")
    cmap = tmp_path / "map.csv"
    cmap.write_text("from,to\nUlcer,Lesion\nPolyp,Lesion\nNormal,Normal\n")
    res = stage_images(_req(root, tmp_path / "o", labels=tmp_path / "labels.parquet",
                            class_map=cmap), progress=False)
    f = res.frames
    assert res.manifest["classes"] == ["Lesion", "Normal"]
    assert set(f.loc[f["split"] == "test", "video_id"]) == {"P0", "P1"}   # given: kept
    assert set(f["split"]) == {"train", "val", "test"}                    # val carved
    assert (f.groupby("video_id")["split"].nunique() == 1).all()
    assert "val carved out of training" in res.manifest["split_rule"]
    assert res.manifest["class_map"]["map"] == {"Normal": "Normal", "Polyp": "Lesion",
                                                "Ulcer": "Lesion"}


# --------------------------------------------------------------------------- the published sheets
def _xlsx(path: Path, header: list[str], rows: list[list]) -> None:
    """A sheet written cell by cell with openpyxl (not pandas, not pipi): one sheet, named as
    Excel and pandas name a new one, the header in row 1."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws.append(header)
    for r in rows:
        ws.append(r)
    path.parent.mkdir(parents=True, exist_ok=True)
    wb.save(path)


def _release(top: Path, forms: dict[str, str]) -> tuple[Path, dict[str, list[tuple]]]:
    """A small Capsule Vision release whose two sheets take the published forms of the
    challenge's repository: ``image_path`` (from ``Dataset/``, Windows separators), a
    ``Dataset`` column naming the source (read and dropped by its SVM sample, skipped by its
    ResNet50 sample's ``columns[2:]``, so second), the ten one-hot class columns in the
    challenge's order, and rows with no ``image_path`` (its loaders drop them). ``forms``:
    per split folder, how ``image_path`` is written: ``"\\"`` (the sheets' own form),
    ``"/"`` (the form its Windows branch and its benchmarking loader convert to) or
    ``"abs"`` (a full Windows path, as its SVM sample opens the cell directly)."""
    root = top / "Dataset"
    listed: dict[str, list[tuple]] = {}
    seed = 500
    for folder, form in forms.items():
        rows = []
        for k, cls in enumerate(CAPSULE_VISION_CLASSES):
            for j, source in enumerate(SOURCES):
                if (k + j) % 4 == 3:
                    continue
                for name in _names(cls, source, 2, start=100 * (folder == "validation")):
                    seed += 1
                    _jpg(root / folder / cls / source / name, seed)
                    rel = f"{folder}\\{cls}\\{source}\\{name}"
                    cell = {"\\": rel, "/": rel.replace("\\", "/"),
                            "abs": f"E:\\ML codes\\Dataset\\{rel}"}[form]
                    rows.append([cell, source, *[int(c == cls) for c in CAPSULE_VISION_CLASSES]])
                    listed.setdefault(folder, []).append((cell, cls, source))
        rows.insert(len(rows) // 2, [None, None, *[None] * len(CAPSULE_VISION_CLASSES)])
        _xlsx(root / folder / f"{folder}_data.xlsx",
              ["image_path", "Dataset", *CAPSULE_VISION_CLASSES], rows)
    return top, listed


@pytest.mark.parametrize("forms", [{"training": "\\", "validation": "\\"},
                                   {"training": "/", "validation": "abs"}])
def test_the_challenges_sheets_in_their_published_form_are_read(tmp_path, forms):
    top, listed = _release(tmp_path / "cv", forms)
    out = tmp_path / "staged"
    stage_images(_req(top, out, group_patterns=(KVASIR_RE, KID_RE)), progress=False)
    frames, man = load_staged(out)
    assert man["layout"] == "capsule-vision" and man["classes"] == list(CAPSULE_VISION_CLASSES)
    got = {r.image_path: (r.cls, r.source)
           for r in frames.rename(columns={"class": "cls"}).itertuples()}
    want = {cell: (cls, src) for rows in listed.values() for cell, cls, src in rows}
    assert got == want  # every sheet string kept exactly, with its class and its source
    test = frames[frames["split"] == "test"]
    assert sorted(test["image_path"]) == sorted(c for c, _, _ in listed["validation"])


def test_a_published_sheet_read_as_a_label_table(tmp_path):
    """``--labels training_data.xlsx``: the challenge's own sheet (image_path from
    ``Dataset/``, a ``Dataset`` source column, one-hot classes), with ``--root`` the
    ``Dataset`` folder or the folder above it; and a ``test_data.xlsx`` of the challenge's
    benchmarking readme (``image_path`` and the class name in ``class_label``)."""
    top, listed = _release(tmp_path / "cv", {"training": "\\"})
    sheet = top / "Dataset/training/training_data.xlsx"
    for root in (top / "Dataset", top):
        out = tmp_path / f"t-{root.name}"
        stage_images(_req(root, out, labels=sheet), progress=False)
        frames, man = load_staged(out)
        assert man["classes"] == sorted({c for _, c, _ in listed["training"]})
        assert sorted(zip(frames["image_path"], frames["class"], frames["source"])) == \
            sorted(listed["training"])
    far, far_listed = _release(tmp_path / "far", {"training": "abs"})  # E:\...\Dataset\...
    stage_images(_req(far, tmp_path / "t-far", labels=far / "Dataset/training/training_data.xlsx"),
                 progress=False)
    frames, _ = load_staged(tmp_path / "t-far")
    assert sorted(zip(frames["image_path"], frames["class"], frames["source"])) == \
        sorted(far_listed["training"])
    rows = [[cell, cls] for cell, cls, _ in listed["training"]]
    test_sheet = tmp_path / "test_data.xlsx"
    _xlsx(test_sheet, ["image_path", "class_label"], rows)
    stage_images(_req(top / "Dataset", tmp_path / "t3", labels=test_sheet), progress=False)
    frames, _ = load_staged(tmp_path / "t3")
    assert sorted(zip(frames["image_path"], frames["class"])) == sorted(map(tuple, rows))


def test_an_index_column_of_a_resaved_sheet_is_not_a_class(tmp_path):
    """A sheet saved back by pandas with its index (``Unnamed: 0``: 0, 1, 0, 1 after a concat of
    two-row frames): not a one-hot class column even where its values look binary."""
    root = tmp_path / "d"
    names = [f"{c}{i}.jpg" for i in range(3) for c in "ab"]
    for i, n in enumerate(names):
        _jpg(root / n, i)
    _xlsx(tmp_path / "labels.xlsx", ["Unnamed: 0", "image_path", "split", "Ulcer", "Normal"],
          [[i % 2, n, ("train", "val", "test")[i // 2], int(n[0] == "a"), int(n[0] == "b")]
           for i, n in enumerate(names)])
    stage_images(_req(root, tmp_path / "o", labels=tmp_path / "labels.xlsx"), progress=False)
    frames, man = load_staged(tmp_path / "o")
    assert man["classes"] == ["Normal", "Ulcer"]
    assert dict(zip(frames["image_path"], frames["class"])) == {
        n: "Ulcer" if n[0] == "a" else "Normal" for n in names}
