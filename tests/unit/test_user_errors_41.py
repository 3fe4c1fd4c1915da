"""The low items of issue 41: each user error is one line naming the file, option or run and
what to do, with its exit status, and nothing half-written."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from pipi.errors import DataError

pytestmark = pytest.mark.timeout(120)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _tree(root: Path, n: int = 12) -> Path:
    for i in range(n):
        p = root / ("Ulcer", "Normal")[i % 2] / f"vid{i % 6}_{i}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), (i * 20) % 256, np.uint8)).save(p)
    return root


def test_serve_refuses_a_max_request_size_that_is_not_a_number():
    from pipi.cli.serve import serve

    for bad in ("nan", "inf", "-1"):
        r = CliRunner().invoke(serve, ["-m", "models:/x/1", "--max-request-mb", bad])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert "--max-request-mb" in r.output, r.output


def test_a_label_table_in_an_unsupported_form_names_the_forms(tmp_path):
    from pipi.data.staging.images import ImageStageRequest, stage_images

    root = _tree(tmp_path / "d")
    labels = tmp_path / "labels.json"
    labels.write_text('{"images": [' + ", ".join(f'"{i}.jpg"' for i in range(200)) + "]}")
    with pytest.raises(DataError) as err:
        stage_images(ImageStageRequest(root=root, out=tmp_path / "o", labels=labels),
                     progress=False)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 300, msg
    assert str(labels) in msg and ".csv" in msg and ".parquet" in msg and ".xlsx" in msg


def test_a_bad_group_pattern_is_refused_before_any_image_is_read(tmp_path, monkeypatch):
    from pipi.data.staging import common
    from pipi.data.staging.images import ImageStageRequest, stage_images

    root = _tree(tmp_path / "d")
    read = []
    monkeypatch.setattr(common, "check_image", lambda p: read.append(p) or "x")
    with pytest.raises(DataError, match=r"--group-pattern '\(\[' : not a regular|not a regular"):
        stage_images(ImageStageRequest(root=root, out=tmp_path / "o", group_patterns=("([",)),
                     progress=False)
    assert read == []


def test_a_file_that_is_not_an_image_says_so_without_a_buffer_repr(tmp_path):
    from pipi.data.staging.common import check_image

    p = tmp_path / "x.jpg"
    p.write_bytes(b"hello, not a picture")
    with pytest.raises(DataError) as err:
        check_image(p)
    assert "BytesIO" not in str(err.value) and "0x" not in str(err.value)
    assert str(err.value) == f"{p}: unreadable or corrupt image (not an image PIL can read)"


def test_a_full_disk_while_staging_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    from pipi.data.staging import images
    from pipi.data.staging.images import ImageStageRequest, stage_images

    root = _tree(tmp_path / "d")
    calls = []

    def full(src, dst, link):
        calls.append(dst)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(Path(src).read_bytes())

    monkeypatch.setattr(images, "place", full)
    with pytest.raises(DataError) as err:
        stage_images(ImageStageRequest(root=root, out=tmp_path / "o",
                                       group_patterns=(r"^vid(?P<group>\d+)_",)), progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "disk is full" in msg and "nothing was written" in msg, msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_export_refuses_a_format_its_file_name_contradicts_and_an_unwritable_folder(tmp_path):
    from pipi.cli.export import export

    r = CliRunner().invoke(export, ["cv2024", "--run", "abc", "--out", str(tmp_path / "x.xlsx"),
                                    "--format", "csv"])
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert "--format csv" in line and "x.xlsx" in line, line
    (tmp_path / "notes.txt").write_text("x")
    r = CliRunner().invoke(export, ["cv2024", "--run", "abc", "--out",
                                    str(tmp_path / "notes.txt" / "sheet.xlsx")])
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert "notes.txt is a file, not a folder" in line, line
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):   # root writes anywhere: the case needs another user
            return
        r = CliRunner().invoke(export, ["cv2024", "--run", "abc", "--out",
                                        str(locked / "sheet.xlsx")])
        assert r.exit_code == 2, r.output
        (line,) = _lines(r.output)
        assert "permission denied" in line and str(locked) in line, line
    finally:
        locked.chmod(0o700)


def test_a_sheet_is_written_readable_by_the_lab(tmp_path):
    from pipi.report.cv2024_sheet import write_sheet

    old = os.umask(0o022)
    try:
        out = write_sheet(pd.DataFrame({"image_path": ["a"], "A": [1.0]}), tmp_path / "s.csv",
                          "csv")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]


def test_export_reads_a_registered_version_as_its_run(sqlite_tracking, tmp_path):
    """``--run models:/NAME/1`` used to say "Run with id=models: not found"."""
    from pipi.cli.export import export

    r = CliRunner().invoke(export, ["cv2024", "--run", "models:/nobody/1", "--out",
                                    str(tmp_path / "s.xlsx")])
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert line.count("models:/nobody/1") >= 1 and "no such registered model version" in line, \
        line
    assert "Run with id=models" not in line


def test_a_checkpoint_with_a_nan_head_is_refused_before_a_run(tmp_path, sqlite_tracking):
    import mlflow
    import torchvision

    from pipi.workflows.importer import import_file

    staged = tmp_path / "staged"
    from pipi.data.staging.images import ImageStageRequest, stage_images
    stage_images(ImageStageRequest(root=_tree(tmp_path / "d", 24), out=staged,
                                   group_patterns=(r"^vid(?P<group>\d+)_",)), progress=False)
    state = torchvision.models.resnet18(num_classes=2).state_dict()
    state["fc.weight"][0, 0] = float("nan")
    path = tmp_path / "nan.pt"
    torch.save(state, path)
    with pytest.raises(DataError) as err:
        import_file(kind="checkpoint", file=path, cell="a", backbone="resnet18",
                    data=str(staged), image_size=32, experiment="nan-head", progress=False)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "NaN or inf" in msg and "fc.weight" in msg
    assert mlflow.get_experiment_by_name("nan-head") is None or not mlflow.search_runs(
        experiment_names=["nan-head"]).shape[0]


def test_progress_bars_only_where_a_person_watches(monkeypatch, capsys):
    """Issue 38: bars written into a non-TTY log are carriage-return noise."""
    import io

    from pipi.data import progress

    class Term(io.StringIO):
        def isatty(self):
            return True

    for env, tty, drawn in (("", False, False), ("", True, True), ("1", False, True),
                            ("0", True, False)):
        monkeypatch.setenv("PIPI_PROGRESS", env)
        err = Term() if tty else io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        for _ in progress.tqdm(range(3), desc="work", file=err):
            pass
        assert ("\r" in err.getvalue()) is drawn, (env, tty, err.getvalue())
        assert progress.tqdm(range(1), disable=True, file=err).disable


class _Evil:   # an object a weights-only load must refuse
    pass


def test_a_pickle_is_refused_in_one_line_without_torchs_warning_before_it(tmp_path):
    """torch printed "Detected pickle protocol 4 in the checkpoint ..." before import's own
    line for a plain pickle file."""
    import pickle
    import warnings

    from pipi.models.external import read_checkpoint

    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"weights": _Evil()}, protocol=4))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(DataError) as err:
        warnings.simplefilter("always")
        read_checkpoint(path)
    assert not [str(w.message) for w in caught]
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "cannot read it as a torch state dict" in msg
