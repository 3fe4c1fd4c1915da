"""The stagers' shared steps (pipi.data.staging.common) and pipi.paths.publish_dir."""

from __future__ import annotations

import csv
import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from pipi.data.staging import stage_kvasir
from pipi.data.staging.common import (
    check_image,
    check_out,
    hash_images,
    read_metadata_text,
    sniff_delimiter,
)
from pipi.errors import DataError
from pipi.paths import publish_dir, staging_dir


@pytest.mark.parametrize("delim", [";", ",", "\t"])
def test_the_delimiter_is_the_one_the_csv_module_reads_the_header_with(tmp_path, delim):
    """Written by csv.writer (the published files' form), with a UTF-8 BOM as Excel saves it."""
    path = tmp_path / "metadata.csv"
    with open(path, "w", newline="", encoding="utf-8-sig") as fh:
        csv.writer(fh, delimiter=delim).writerows(
            [["File Name", "Capsule System", "Gender", "Age"], ["1", "PillCam SB3", "male", "40"]])
    text, got = read_metadata_text(path, default="|", missing="no file")
    assert got == delim and text.startswith("File Name")  # the BOM is gone
    assert next(csv.reader(io.StringIO(text), delimiter=got))[1] == "Capsule System"


def test_an_unclear_header_takes_the_default_and_a_missing_file_is_one_line(tmp_path):
    assert sniff_delimiter("", ";") == ";" and sniff_delimiter("filename", ",") == ","
    with pytest.raises(DataError, match=rf"^{tmp_path / 'nope.csv'}: no metadata here$"):
        read_metadata_text(tmp_path / "nope.csv", default=";", missing="no metadata here")


def test_a_truncated_image_is_refused_naming_it_and_a_good_one_is_hashed(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), np.uint8)).save(
        buf, "JPEG")
    good, cut = tmp_path / "good.jpg", tmp_path / "cut.jpg"
    good.write_bytes(buf.getvalue())
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    assert check_image(good) == hashlib.sha256(good.read_bytes()).hexdigest()
    with pytest.raises(DataError, match=rf"^{cut}: unreadable or corrupt image"):
        check_image(cut)
    assert hash_images([good, good], workers=2, progress=False) == {good: check_image(good)}
    with pytest.raises(DataError, match=rf"^{cut}: unreadable .*\(listed in x.csv\)$"):
        hash_images([good, cut], workers=2, progress=False, where=lambda p: "listed in x.csv")


def test_publish_replaces_an_empty_folder_and_refuses_one_made_meanwhile(tmp_path):
    out = tmp_path / "out"
    tmp = staging_dir(out)
    (tmp / "a.txt").write_text("a")
    out.mkdir()
    publish_dir(tmp, out)
    assert (out / "a.txt").read_text() == "a" and not tmp.exists()
    tmp2 = staging_dir(out)
    with pytest.raises(DataError, match=rf"^{out} was created by someone else while staging; "):
        publish_dir(tmp2, out)
    assert (out / "a.txt").read_text() == "a" and tmp2.is_dir()


def test_a_file_at_out_is_refused_in_one_line(tmp_path):
    """Before, stage kvasir listed a file at --out as a folder (NotADirectoryError)."""
    out = tmp_path / "out"
    out.write_text("not a folder")
    with pytest.raises(DataError, match=r"output folder exists and is not empty"):
        check_out(out)
    with pytest.raises(DataError, match=r"output folder exists and is not empty"):
        stage_kvasir(tmp_path, tmp_path / "metadata.csv", out, progress=False)
