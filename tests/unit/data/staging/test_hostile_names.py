"""`pipi stage images` against hostile names (issue 41, H1 and M2-M4): a label table's class or
source cell, a class map's target, a file that is not an image, names that differ only in
case, OUT inside ROOT, two images that would land on one staged path. Each refusal is one line
and leaves every file of ROOT and a sentinel beside OUT exactly as they were, and nothing
half-written; the names that are fine (any Unicode a clinician writes) stage."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from pipi.data.staging.common import place
from pipi.data.staging.images import ImageStageRequest, stage_images
from pipi.errors import DataError
from pipi.paths import metric_key, path_part

pytestmark = pytest.mark.timeout(60)


def _jpg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    px = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(px).save(path, quality=90)


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` -> the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def world(tmp_path):
    """ROOT with 12 patients' images, a work folder for OUT holding a sentinel file, and the
    label table's rows (patient-grouped, two classes, two sources)."""
    root = tmp_path / "data"
    rows = []
    for i in range(24):
        rel = f"imgs/p{i % 12}/frame_{i}.jpg"
        _jpg(root / rel, i)
        rows.append({"image_path": rel, "class": ("Ulcer", "Normal")[i % 2],
                     "patient_id": f"p{i % 12}", "source": ("KID", "AIIMS")[i % 3 == 0]})
    work = tmp_path / "work"
    work.mkdir()
    (work / "sentinel.jpg").write_bytes((root / rows[0]["image_path"]).read_bytes())
    return root, work, rows


def _stage(root: Path, work: Path, rows: list[dict], **kw):
    table = work.parent / "labels.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    return stage_images(ImageStageRequest(root=root, out=work / "out", labels=table, **kw),
                        progress=False)


def _refused(world, rows, pattern: str, **kw) -> str:
    """Staging ``rows`` is refused in one line matching ``pattern``; nothing outside OUT was
    created or changed and OUT was never written."""
    root, work, _ = world
    before_root, before_top = _tree(root), _tree(work.parent)
    with pytest.raises(DataError) as err:
        _stage(root, work, rows, **kw)
    msg = str(err.value)
    assert "\n" not in msg and re.search(pattern, msg), msg
    assert _tree(root) == before_root
    after_top = {k: v for k, v in _tree(work.parent).items() if k != "labels.csv"}
    assert after_top == {k: v for k, v in before_top.items() if k != "labels.csv"}
    assert not (work / "out").exists() and not list(work.glob(".out*"))
    return msg


@pytest.mark.parametrize("column", ["class", "source"])
@pytest.mark.parametrize("name", ["../../../../escaped", "../work", "..", "a/b", "a\\b",
                                  "/abs/sentinel"])
def test_a_path_in_a_class_or_source_cell_is_refused(world, column, name):
    root, work, rows = world
    rows[3][column] = name
    _refused(world, rows, rf"labels\.csv, line 5: {column} .* is not a single folder or file name")


@pytest.mark.parametrize("name, why", [(".hidden", "starts with a dot"),
                                        ("bad\x07bell", "control character"),
                                        ("x" * 300, "300 characters long"),
                                        ("gpj.\u202eexe", "control character")])
def test_other_unsafe_class_names_are_refused(world, name, why):
    root, work, rows = world
    for r in rows[::2]:
        r["class"] = name
    _refused(world, rows, rf"labels\.csv, line 2: class .*{why}")


def test_a_class_map_target_that_leaves_out_is_refused(world, tmp_path):
    root, work, rows = world
    cmap = tmp_path / "map.csv"
    cmap.write_text("from,to\nUlcer,../../escaped\nNormal,Normal\n")
    _refused(world, rows, r"--class-map .*map\.csv: class '\.\./\.\./escaped' is not a single",
             class_map=cmap)


def test_a_row_naming_a_file_that_is_not_an_image_is_refused(world):
    root, work, rows = world
    (root / "imgs" / "evil.pth").write_bytes(b"PK\x03\x04 not a checkpoint")
    rows[6]["image_path"] = "imgs/evil.pth"
    _refused(world, rows, r"labels\.csv, line 8: 'imgs/evil\.pth' is not an image file")


@pytest.mark.parametrize("column", ["class", "source"])
def test_names_that_differ_only_in_case_are_refused(world, column):
    root, work, rows = world
    value = rows[5][column]
    rows[5][column] = value.swapcase()
    _refused(world, rows, rf"{column} '{re.escape(value.swapcase())}' and '{value}' differ only "
                          "in case|" + rf"{column} '{value}' and '{re.escape(value.swapcase())}' "
                          "differ only in case")


def test_out_inside_root_and_root_inside_out_are_refused(world, tmp_path):
    root, work, rows = world
    table = tmp_path / "labels.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    before = _tree(root)
    for out, what in ((root / "staged", r"--out .*: is inside --root"),
                      (root.parent, r"--root .*: is inside --out")):
        with pytest.raises(DataError, match=what) as err:
            stage_images(ImageStageRequest(root=root, out=out, labels=table), progress=False)
        assert "\n" not in str(err.value)
    assert _tree(root) == before and not (root / "staged").exists()


def test_place_never_writes_through_an_existing_file(tmp_path):
    """The hard-link fallback used to copy *through* an existing link into the user's image."""
    user = tmp_path / "user.jpg"
    other = tmp_path / "other.jpg"
    _jpg(user, 1)
    _jpg(other, 2)
    before = user.read_bytes()
    linked = tmp_path / "staged" / "x.jpg"
    place(user, linked, "hardlink")
    for mode in ("hardlink", "copy", "symlink"):
        with pytest.raises(FileExistsError):
            place(other, linked, mode)
    assert user.read_bytes() == before and os.path.samefile(user, linked)


def test_two_images_with_one_name_stage_apart_and_leave_root_alone(world):
    """Same file name in one class (and names that differ only in case): distinct staged paths
    (a case-insensitive disk included), every original byte-identical."""
    root, work, rows = world
    _jpg(root / "imgs" / "p0" / "FRAME_1.jpg", 99)
    _jpg(root / "imgs" / "p1" / "frame_0.jpg", 98)
    rows += [{"image_path": "imgs/p0/FRAME_1.jpg", "class": "Normal", "patient_id": "p0",
              "source": "AIIMS"},
             {"image_path": "imgs/p1/frame_0.jpg", "class": "Normal", "patient_id": "p1",
              "source": "AIIMS"}]
    before = _tree(root)
    res = _stage(root, work, rows)
    paths = res.frames["path"].tolist()
    assert len({p.casefold() for p in paths}) == len(paths) == len(rows)
    assert _tree(root) == before
    for p, src in zip(res.frames["path"], res.frames["image_path"]):
        assert (work / "out" / p).read_bytes() == (root / src).read_bytes()


def test_clinical_names_stage_and_have_a_metric_key(world):
    root, work, rows = world
    for r in rows[::2]:
        r["class"] = "Ulcer (active)"
    for r in rows[1::2]:
        r["class"] = "Érosion, l'iléon & +"
    res = _stage(root, work, rows)
    assert res.manifest["classes"] == ["Ulcer (active)", "Érosion, l'iléon & +"]
    assert (work / "out" / "train" / "Ulcer (active)").is_dir()
    assert metric_key("Ulcer (active)") == "Ulcer _active_"
    assert metric_key("Érosion, l'iléon & +") == "Érosion_ l_iléon _ _"


def test_class_names_with_one_metric_key_are_refused(world):
    root, work, rows = world
    for r, name in zip(rows, ["Ulcer (a)", "Ulcer [a]"] * 12):
        r["class"] = name
    _refused(world, rows, r"the class names 'Ulcer \(a\)' and 'Ulcer \[a\]' give the same "
                          r"metric key 'Ulcer _a_'")


def test_mixed_sources_get_unknown_and_every_frame_is_counted(world):
    root, work, rows = world
    for r in rows[:14]:
        r["source"] = ""
    res = _stage(root, work, rows)
    assert set(res.frames["source"]) == {"KID", "AIIMS", "unknown"}
    assert (res.frames["source"] == "unknown").sum() == 14
    counts = res.manifest["counts"]
    total = sum(n for per in counts.values() for by in per.values() for n in by.values())
    assert total == len(res.frames)
    assert all(p.split("/")[2] in ("KID", "AIIMS", "unknown") for p in res.frames["path"])


def test_no_source_at_all_counts_every_frame(world):
    root, work, rows = world
    for r in rows:
        r.pop("source")
    res = _stage(root, work, rows)
    assert set(res.frames["source"]) == {""} and res.manifest["sources"] == []
    md = (work / "out" / "counts.md").read_text()
    n = {s: int((res.frames["split"] == s).sum()) for s in ("train", "val", "test")}
    assert sum(int(c.replace(",", "")) for line in md.splitlines()[2:4]
               for c in line.split("|")[2:5]) == sum(n.values())


def test_carving_that_would_leave_a_split_empty_is_refused(world):
    """Two patients, each holding one class: no whole group can be carved out (the stager
    used to say "test carved out" and leave test and val empty)."""
    root, work, rows = world
    for i, r in enumerate(rows):
        r["patient_id"] = f"p{i % 2}"
    _refused(world, rows, r"cannot carve test out with whole groups: 2 group\(s\).*classes "
                          r"\['Normal', 'Ulcer'\].*give split folders or a split column")


def test_path_part_is_the_one_gate():
    assert path_part("Ulcer (active)", "x") == "Ulcer (active)"
    for bad in ("", " ", ".", "..", "a/b", "..\\x", "\x00", "a\u202eb", ".x", "x" * 101):
        with pytest.raises(DataError, match=r"^where '"):
            path_part(bad, "where")


def test_the_command_refuses_in_one_line_with_exit_2(world, tmp_path):
    from pipi.cli import main

    root, work, rows = world
    rows[0]["class"] = "../escaped"
    table = tmp_path / "labels.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    res = CliRunner().invoke(main, ["stage", "images", "--root", str(root), "--labels",
                                    str(table), "--out", str(work / "out"), "--no-mlflow"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "is not a single folder or file name" in lines[0], res.output
    res = CliRunner().invoke(main, ["stage", "images", "--root", str(root), "--out",
                                    str(work / "o2"), "--seed", "-1", "--no-mlflow"])
    assert res.exit_code == 2 and "--seed" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "escaped").exists() and json.dumps(_tree(root))
