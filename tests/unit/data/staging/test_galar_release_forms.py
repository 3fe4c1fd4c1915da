"""Galar staging with files written as the GalKva-2026 release writes them (issue 19): the
release's class_mapping.json (Normal clean mucosa by section *name*, informational keys) and
label CSVs whose `section` column names the anatomical section. Every expected set of frames
is computed independently with pandas from the label files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipi.data import synth
from pipi.data.staging import stage_galar
from pipi.data.staging.galar_labelfile import SECTION_COLUMNS, read_label_file
from pipi.data.staging.galar_mapping import SECTION_BY_COLUMN, SECTION_BY_NAME, load_mapping
from pipi.errors import DataError

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_galar_release_forms")

PATHOLOGY = ["ulcer", "polyp", "active bleeding", "blood", "erythema", "erosion", "angiectasia",
             "IBD", "foreign body", "esophagitis", "varices", "hematin", "celiac", "cancer",
             "lymphangioectasis"]
MAPPED = {"angiectasia": "Angiectasia", "active bleeding": "Blood - fresh",
          "hematin": "Blood - hematin", "erosion": "Erosion", "erythema": "Erythema",
          "foreign body": "Foreign Body", "ileocecal valve": "Ileocecal valve",
          "lymphangioectasis": "Lymphangiectasia", "polyp": "Polyp", "pylorus": "Pylorus",
          "ulcer": "Ulcer", "ampulla of vater": "Ampulla of Vater"}

# The release's own form, written by hand (not by pipi): informational keys everywhere,
# the Normal clean mucosa rule by section name, a derived Normal row in the table.
RELEASE_MAPPING = {
    "_comment": "GalKva-2026 v1.0 Galar -> Kvasir-Capsule class mapping",
    "_review_status": "reviewed (two gastroenterologists), 2026-05-18",
    "_anatomical_section_filter": {"column": "section", "keep": ["small intestine"],
                                   "why": "Kvasir-Capsule is small-bowel only"},
    "_galar_to_kvasir_mapping_table": [
        {"galar_column": g, "kvasir_class": k, "positives": 100 + i, "n_videos": 3,
         "expected_positives": 100 + i}
        for i, (g, k) in enumerate(MAPPED.items())
    ] + [{"galar_column": "(derived)", "kvasir_class": "Normal clean mucosa",
          "positives": None, "n_videos": 80}],
    "_normal_clean_mucosa_derivation": {
        "section_column": "section",
        "section_required_value": "small intestine",
        "pathology_columns_must_all_be_zero": PATHOLOGY,
        "view_quality_column_optional": "good view",
        "_note": "frames of the small intestine with no finding",
    },
    "positives": {"Angiectasia": 4075, "Polyp": 1590},
    "n_videos": 80,
    "expected_positives": {"Ulcer": 2208},
    "comment": "positives and n_videos are informational",
}


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("galar-forms") / "release"
    return synth.synthesize_galar(out, preset="tiny", seed=5, progress=False)


def _section_of(df: pd.DataFrame) -> pd.Series:
    onehot = df[list(SECTION_COLUMNS)].to_numpy() == 1
    return pd.Series(np.where(onehot.sum(axis=1) == 1,
                              np.asarray(SECTION_COLUMNS, dtype=object)[onehot.argmax(axis=1)],
                              ""), index=df.index)


def _named_copy(release: Path, dst: Path, *, disagree: int = 0) -> Path:
    """The release with every label file's `section` column holding the section by name
    (as the benchmark's files do); ``disagree``: in the first video, that many
    small-intestine rows are named 'stomach' while their one-hot column still says small
    intestine (the name must win)."""
    shutil.copytree(release / "Frames", dst / "Frames", copy_function=os.link)
    shutil.copy(release / "metadata.csv", dst / "metadata.csv")
    (dst / "Labels").mkdir()
    for i, p in enumerate(sorted((release / "Labels").glob("*.csv"), key=lambda p: int(p.stem))):
        df = pd.read_csv(p)
        names = _section_of(df)
        if i == 0 and disagree:
            si = names.index[names == "small intestine"][:disagree]
            names.loc[si] = "stomach"
        df["section"] = names.str.title() if i % 2 else names  # "Small Intestine" too
        df.to_csv(dst / "Labels" / p.name, index=False)
    return dst


def _expected_normal(root: Path) -> set[tuple[str, int]]:
    """(video, frame) of every Normal clean mucosa frame, by the release's rule, in pandas."""
    out = set()
    for p in (root / "Labels").glob("*.csv"):
        df = pd.read_csv(p, keep_default_na=False)
        sec = df["section"].astype(str).str.strip().str.lower()
        sec = sec.where(sec != "", _section_of(df))
        ok = (sec == "small intestine") & (df[PATHOLOGY].sum(axis=1) == 0)
        ok &= df[list(MAPPED)].sum(axis=1) == 0
        if "good view" in df:
            ok &= df["good view"] == 1
        out |= {(p.stem, int(f)) for f in df.loc[ok, "frame"]}
    return out


def _normal(frames: pd.DataFrame) -> set[tuple[str, int]]:
    n = frames[frames["class"] == "Normal clean mucosa"]
    return set(zip(n["video_id"], n["frame_number"].astype(int)))


def _write(tmp_path: Path, doc: dict, name: str = "class_mapping.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, indent=2))
    return p


# --------------------------------------------------------------------------- the mapping
def test_release_mapping_form_is_read(tmp_path):
    m = load_mapping(_write(tmp_path, RELEASE_MAPPING))
    assert m.normal.form == SECTION_BY_NAME and m.normal.section_value == "small intestine"
    assert dict(m.table) == MAPPED
    assert {"_comment", "_review_status", "_anatomical_section_filter", "positives",
            "n_videos", "expected_positives", "comment"} <= set(m.ignored)
    assert any("Normal clean mucosa" in k for k in m.ignored)
    assert "section" not in m.used_columns and set(SECTION_COLUMNS) <= set(m.used_columns)
    own = load_mapping()
    assert own.normal.form == SECTION_BY_COLUMN and own.normal.section_value == 1


@pytest.mark.parametrize("value, match", [
    ("duodenum", r"line \d+: section_required_value 'duodenum' is not an anatomical section"),
    ([1], "section_required_value must be a section name"),
])
def test_bad_section_value_names_the_file(tmp_path, value, match):
    doc = json.loads(json.dumps(RELEASE_MAPPING))
    doc["_normal_clean_mucosa_derivation"]["section_required_value"] = value
    p = _write(tmp_path, doc)
    with pytest.raises(DataError, match=match) as exc:
        load_mapping(p)
    assert str(p) in str(exc.value)


def test_section_name_spellings(tmp_path):
    doc = json.loads(json.dumps(RELEASE_MAPPING))
    doc["_normal_clean_mucosa_derivation"]["section_required_value"] = "Small_Intestine"
    assert load_mapping(_write(tmp_path, doc)).normal.section_value == "small intestine"


# --------------------------------------------------------------------------- label files
def test_section_column_by_name_is_read(release, tmp_path):
    root = _named_copy(release, tmp_path / "r")
    p = min((root / "Labels").glob("*.csv"), key=lambda p: int(p.stem))
    t = read_label_file(p)
    assert t.section_form == "names"
    df = pd.read_csv(p)
    assert t.sections().tolist() == df["section"].str.lower().tolist()
    assert t.column("small intestine").tolist() == df["small intestine"].tolist()


def test_default_mapping_stages_a_release_with_named_sections(release, tmp_path):
    """The refusal of issue 19 (`column 'section' holds 'stomach', not a number`) is gone, and
    the staged frames are those of the numeric-section release."""
    root = _named_copy(release, tmp_path / "r")
    r = stage_galar(root, tmp_path / "o", progress=False)
    ref = stage_galar(release, tmp_path / "ref", progress=False)
    key = ["video_id", "frame_number", "class"]
    pd.testing.assert_frame_equal(r.frames[key].reset_index(drop=True),
                                  ref.frames[key].reset_index(drop=True))
    files = r.manifest["label_files"]["section_column"]
    assert files["read_as"] == "names" and set(files["videos"]) == {"names"}
    assert ref.manifest["label_files"]["section_column"]["read_as"] == "0/1"
    rule = r.manifest["normal_clean_mucosa_rule"]
    assert rule["form"] == SECTION_BY_COLUMN
    assert rule["written_as"] == {"section_column": "small intestine", "section_required_value": 1}
    sec = r.frames.set_index(["video_id", "frame_number"])["anatomical_section"]
    assert (sec[r.frames.set_index(["video_id", "frame_number"])["class"]
                == "Normal clean mucosa"] == "small intestine").all()


def test_release_mapping_on_named_sections(release, tmp_path):
    root = _named_copy(release, tmp_path / "r", disagree=3)
    p = _write(tmp_path, RELEASE_MAPPING)
    r = stage_galar(root, tmp_path / "o", mapping=p, progress=False)
    assert _normal(r.frames) == _expected_normal(root)
    rule = r.manifest["normal_clean_mucosa_rule"]
    assert rule["form"] == SECTION_BY_NAME and rule["mapping_file"] == str(p)
    assert rule["written_as"] == {"section_column": "section",
                                  "section_required_value": "small intestine"}
    assert "'small intestine'" in rule["applied"]
    assert "positives" in r.manifest["mapping"]["ignored_keys"]
    assert r.manifest["columns"]["section"]["role"] == "derivation"


def test_release_mapping_on_numeric_sections_uses_the_one_hot_columns(release, tmp_path):
    """The release's rule on files whose `section` column holds 0/1: the section comes from
    the one-hot columns, so the same frames as pipi's own rule."""
    p = _write(tmp_path, RELEASE_MAPPING)
    r = stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    ref = stage_galar(release, tmp_path / "ref", progress=False)
    assert _normal(r.frames) == _normal(ref.frames) and _normal(r.frames)
    assert r.manifest["label_files"]["section_column"]["read_as"] == "0/1"


def test_unused_columns_are_never_a_refusal(release, tmp_path):
    root = _named_copy(release, tmp_path / "r")
    p = min((root / "Labels").glob("*.csv"), key=lambda p: int(p.stem))
    df = pd.read_csv(p, dtype=str)
    df.loc[df.index[1], "z-line"] = "n/a"     # not used by the mapping
    df.loc[df.index[2], "z-line"] = ""
    df.loc[df.index[3], "index"] = "x"
    df.to_csv(p, index=False)
    r = stage_galar(root, tmp_path / "o", progress=False)
    assert r.manifest["label_files"]["unchecked_values_not_0_1"]["z-line"] == 2
    # a column the mapping uses is still checked, naming the file and the line
    df.loc[df.index[4], "ulcer"] = "maybe"
    df.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"line 6: column 'ulcer' holds 'maybe', not a number"):
        stage_galar(root, tmp_path / "o2", progress=False)
    assert not (tmp_path / "o2").exists()


def test_empty_section_column_falls_back_to_the_one_hot_columns(release, tmp_path):
    p = min((release / "Labels").glob("*.csv"), key=lambda p: int(p.stem))
    df = pd.read_csv(p)
    df["section"] = ""
    q = tmp_path / p.name
    df.to_csv(q, index=False)
    t = read_label_file(q)
    assert t.section_form == "empty"
    assert t.sections().tolist() == _section_of(df).tolist()


# --------------------------------------------------------------------------- capsule systems
# The release's `_capsule_system_stratification` block, every key as published (issue 28):
# the subsets list capsule-system NAMES, the values of metadata.csv's `Capsule System`.
PUBLISHED_STRATIFICATION = {
    "_purpose": "Stratify eval results by acquisition device: the PillCam subset of Galar is "
                "within-vendor, the Olympus subset cross-vendor.",
    "available_systems": {"PillCam SB3": 51, "Olympus": 22, "PillCam Colon2": 5,
                          "PillCam SB2": 2},
    "metadata_column": "Capsule System",
    "metadata_csv_path": "metadata.csv",
    "pillcam_video_subset": ["PillCam SB3", "PillCam Colon2", "PillCam SB2"],
    "olympus_video_subset": ["Olympus"],
}


def _with_strat(**strat) -> dict:
    return {**RELEASE_MAPPING, "_capsule_system_stratification": strat}


def test_published_stratification_block_stages_and_is_recorded(release, tmp_path):
    p = _write(tmp_path, _with_strat(**PUBLISHED_STRATIFICATION))
    m = load_mapping(p)
    assert m.pillcam_systems == ("PillCam SB3", "PillCam Colon2", "PillCam SB2")
    assert m.olympus_systems == ("Olympus",) and m.pillcam_subset == m.olympus_subset == ()
    assert dict(m.available_systems) == PUBLISHED_STRATIFICATION["available_systems"]
    assert m.metadata_column == "Capsule System" and m.metadata_csv_path == "metadata.csv"
    r = stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    # expected videos, read independently from the metadata with pandas
    meta = pd.read_csv(release / "metadata.csv")
    ids = {k: [str(v) for v in sorted(meta.loc[meta["Capsule System"].isin(names), "File Name"])]
           for k, names in (("pillcam_video_subset", PUBLISHED_STRATIFICATION[
               "pillcam_video_subset"]), ("olympus_video_subset", ["Olympus"]))}
    rec = r.manifest["capsule_system_subsets"]
    for key in ("pillcam_video_subset", "olympus_video_subset"):
        assert rec[key]["capsule_systems"] == PUBLISHED_STRATIFICATION[key]
        assert rec[key]["video_ids"] == ids[key] and ids[key]
    assert rec["metadata_column"] == "Capsule System"
    assert rec["available_systems_stated"] == PUBLISHED_STRATIFICATION["available_systems"]
    assert rec["videos_per_system"] == meta["Capsule System"].value_counts().to_dict()
    assert set(rec["available_systems_differ"]) == set(PUBLISHED_STRATIFICATION["available_systems"])
    assert r.manifest["mapping"]["pillcam_capsule_systems"] == PUBLISHED_STRATIFICATION[
        "pillcam_video_subset"]
    # the two subsets cover every system, so every video is staged
    assert sorted(r.manifest["video_to_split"]) == sorted(str(v) for v in meta["File Name"])


def test_subset_names_select_and_ids_still_read(release, tmp_path):
    meta = pd.read_csv(release / "metadata.csv")
    oly = meta.loc[meta["Capsule System"] == "Olympus", "File Name"].tolist()
    r = stage_galar(release, tmp_path / "o", progress=False,
                    mapping=_write(tmp_path, _with_strat(olympus_video_subset=[" olympus "])))
    assert sorted(set(r.frames["video_id"].astype(int))) == sorted(oly)
    assert r.manifest["capsule_system_subsets"]["olympus_video_subset"]["capsule_systems"] == [
        "Olympus"]
    # integer ids, or digit strings, where a file gives ids
    r2 = stage_galar(release, tmp_path / "o2", progress=False, mapping=_write(
        tmp_path, _with_strat(olympus_video_subset=[oly[0], str(oly[-1])]), "ids.json"))
    assert sorted(set(r2.frames["video_id"].astype(int))) == sorted({oly[0], oly[-1]})


@pytest.mark.parametrize("strat, match", [
    ({**PUBLISHED_STRATIFICATION, "pillcam_video_subset": ["PillCam SB3", "PillCam SB4"]},
     (r"pillcam_video_subset names capsule system 'PillCam SB4', which is not a "
      r"'Capsule System' value of .*metadata\.csv")),
    ({"olympus_video_subset": ["PillCam SB3"]},
     "olympus_video_subset names capsule system 'PillCam SB3', which is not an Olympus system"),
    ({"pillcam_video_subset": ["Olympus"], "olympus_video_subset": ["olympus"]},
     r"capsule system\(s\) \['olympus'\] are in both"),
    ({"olympus_video_subset": [["Olympus"]]}, r"line \d+: olympus_video_subset lists \['Olympus'\]"),
    ({"available_systems": ["Olympus"]}, "available_systems must map capsule-system names"),
    ({"metadata_csv_path": "../metadata.csv"}, "metadata_csv_path must be a path inside"),
])
def test_bad_stratification_names_the_file(release, tmp_path, strat, match):
    p = _write(tmp_path, _with_strat(**strat))
    with pytest.raises(DataError, match=match) as exc:
        stage_galar(release, tmp_path / "o", mapping=p, progress=False)
    assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)
    assert not (tmp_path / "o").exists()
