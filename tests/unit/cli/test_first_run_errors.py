"""First run and bad input (issue 10): every entry point refuses a bad option with one line
naming the parameter and its value, before anything is staged, loaded or started; under
`mlflow run` the run MLflow created is marked FAILED with that line as the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import _invoke

BAD_OPTIONS = [
    ("train", ["--image-size", "7"], ("image-size", "'7'", ">= 16")),
    ("train", ["--lambda-eff", "-5"], ("lambda-eff", "'-5'", "> 0")),
    ("train", ["--epochs", "0"], ("epochs", "'0'", ">= 1")),
    ("train", ["--alpha", "0"], ("alpha", "'0'", "> 0")),
    ("train", ["--cell", "zzz"], ("cell", "'zzz'")),
    ("train", ["--backbone", "vgg16"], ("backbone", "'vgg16'")),
    ("train", ["--seed", "x"], ("seed", "'x'")),
    ("train", ["--profile", "huge"], ("profile", "'huge'")),
    ("train", ["--cell", "b_plus", "--onnx", "true"], ("onnx=true", "b_plus", "sequence cell")),
    ("train", ["--onnx", "maybe"], ("onnx", "'maybe'")),
    ("ablate", ["--seeds", "4x"], ("seeds", "'4x'")),
    ("ablate", ["--study", "nope"], ("study", "nope")),
    ("ablate", ["--backbones", "vgg16"], ("backbones", "vgg16")),
    ("aggregate", ["--resample", "patients"], ("resample", "'patients'")),
]


@pytest.mark.parametrize("name,args,needles", BAD_OPTIONS,
                         ids=[f"{n}{'_'.join(a)}" for n, a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_the_parameter(name, args, needles, capsys, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    code, err = _invoke(name, args, capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln
             and "color_warning" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    # refused before anything started: nothing staged, no store created
    assert not (tmp_path / "home").exists() and not (tmp_path / "m.db").exists()


def test_stage_to_an_unwritable_out_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    code, err = _invoke("stage", ["--source", "synthetic-tiny", "--out", "/proc/pipi-x"], capsys)
    assert code == 2
    assert "error: --out /proc/pipi-x: cannot write there" in err and "Traceback" not in err
    assert not list(Path("/proc").glob(".pipi-x*"))


