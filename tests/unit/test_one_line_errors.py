"""The low items of issue 31: each bad input is one line naming the file or option."""

from __future__ import annotations

import math

import mlflow
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from fakes import make_prediction_dir, experiment

from pipi.classes import CLASSES
from pipi.errors import ConfigError, DataError, PipiError


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def pred_dir(tmp_path_factory):
    return make_prediction_dir(tmp_path_factory.mktemp("preds"))


def test_score_predictions_with_a_test_parquet_that_is_not_parquet(pred_dir, tmp_path):
    import shutil

    from pipi.cli.galkva import galkva

    d = tmp_path / "p"
    shutil.copytree(pred_dir, d)
    bad = d / "galar" / "method" / "2" / "predictions" / "test.parquet"
    bad.write_text("frame,prob\n1,0.5\n")
    r = CliRunner().invoke(galkva, ["score", "--predictions", str(d), "--n-resamples", "100"])
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert str(bad) in line and "not a Parquet file" in line, line


def test_score_refuses_a_negative_tolerance(pred_dir):
    from pipi.cli.galkva import galkva

    r = CliRunner().invoke(galkva, ["score", "--predictions", str(pred_dir), "--tolerance", "-1"])
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert "--tolerance -1" in line and ">= 0" in line, line


def test_validate_a_5001_digit_integer(tmp_path):
    from pipi.cli.galkva import galkva

    p = tmp_path / "sub.json"
    p.write_text('{"n_seeds": ' + "9" * 5001 + "}")
    r = CliRunner().invoke(galkva, ["validate", str(p)])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    first = _lines(r.output)[0]
    assert str(p) in first and "5001 digits" in first, first


def test_nan_predictions_name_the_file_and_the_seed(pred_dir, tmp_path):
    import shutil

    from pipi.galkva import load_prediction_dir

    d = tmp_path / "p"
    shutil.copytree(pred_dir, d)
    f = d / "kvasir" / "method" / "1" / "predictions" / "test.parquet"
    df = pd.read_parquet(f)
    df.loc[3, "prob_00"] = np.nan
    df.to_parquet(f, index=False)
    with pytest.raises(DataError) as exc:
        load_prediction_dir(d)
    msg = str(exc.value)
    assert "\n" not in msg and str(f) in msg and "NaN" in msg and df["path"][3] in msg, msg


def test_nan_in_a_runs_predictions_names_the_run(tmp_path):
    from pipi.predictions import check_finite

    df = pd.DataFrame({"path": ["a.jpg", "b.jpg"],
                       **{f"prob_{i:02d}": [1 / len(CLASSES), math.inf] for i in
                          range(len(CLASSES))}})
    with pytest.raises(DataError) as exc:
        check_finite(df, "run abc (cell a, seed 1) predictions/test.parquet")
    assert "run abc (cell a, seed 1)" in str(exc.value) and "b.jpg" in str(exc.value)


def _prediction_csv(path, value):
    probs = np.full((1, len(CLASSES)), 1 / len(CLASSES))
    df = pd.DataFrame(probs, columns=list(CLASSES)).astype(object)
    df.iloc[0, 2] = value
    df.insert(0, "filename", ["x.jpg"])
    df.to_csv(path, index=False)
    return path


def test_a_nan_probability_is_shown_without_a_numpy_repr(tmp_path):
    from pipi.data.prediction_file import read_prediction_file

    for value in (np.nan, "abc"):
        with pytest.raises(PipiError) as exc:
            read_prediction_file(_prediction_csv(tmp_path / "p.csv", value))
        msg = str(exc.value)
        assert "np.float64" not in msg and "\n" not in msg and "row 1" in msg, msg
    assert "'abc'" in msg


def test_import_file_that_is_a_folder(tmp_path):
    from pipi.data.prediction_file import read_prediction_file
    from pipi.workflows.importer import import_file

    for kind in ("checkpoint", "predictions"):
        with pytest.raises(ConfigError) as exc:
            import_file(kind=kind, file=tmp_path, cell="pi", backbone="efficientnet_b0",
                        seed=1)
        assert "is a folder" in str(exc.value) and str(tmp_path) in str(exc.value)
    with pytest.raises(PipiError, match="is a folder"):
        read_prediction_file(tmp_path)


def test_import_refuses_the_probe_cell_as_docs_import_md_lists(tmp_path):
    from pathlib import Path

    from pipi.workflows.importer import IMPORT_CELLS, import_file

    doc = (Path(__file__).resolve().parents[2] / "docs" / "import.md").read_text()
    line = next(ln for ln in doc.splitlines() if ln.startswith("Only per-frame cells"))
    assert sorted(IMPORT_CELLS) == sorted(c.strip("`.,") for c in line.split(":")[1].split())
    with pytest.raises(ConfigError) as exc:
        import_file(kind="predictions", file=tmp_path / "x.csv", cell="probe",
                    backbone="efficientnet_b0", seed=1)
    assert "cell='probe'" in str(exc.value) and "\n" not in str(exc.value)


def test_a_prediction_run_has_no_model_and_says_why(sqlite_tracking):
    from pipi import tracking

    exp = experiment("imported")
    with mlflow.start_run(experiment_id=exp, tags={tracking.tags.TAG_SOURCE_KIND: "predictions",
                                tracking.tags.TAG_SOURCE_FILE: "pi_s42.npz"}) as run:
        pass
    with pytest.raises(PipiError) as exc:
        tracking.registry.run_model_uri(run.info.run_id)
    msg = str(exc.value)
    assert "imported prediction file (pi_s42.npz)" in msg and "no model" in msg, msg
