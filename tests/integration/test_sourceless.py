"""A dataset without sources is a first-class case (issue 41, H2 and M1): a plain
``ROOT/<Class>/<file>`` tree and a label table without a ``source`` column stage with no source,
every per-frame cell trains on them (no per-source metrics: MLflow refused
``val/source//n_frames``), predictions import, and a class a clinician named
``Ulcer (active)`` trains, logs its metrics under the key MLflow accepts (the mapping recorded
in the run) and registers with its own name in the served columns."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image
from sklearn.metrics import roc_auc_score

from pipi.cells import CELLS
from pipi.config import make_config
from pipi.data.staging.images import ImageStageRequest, stage_images
from pipi.paths import metric_key
from pipi.workflows.importer import import_file
from pipi.runs.training import train

pytestmark = [pytest.mark.xdist_group("test_sourceless"), pytest.mark.timeout(300)]

CLASSES = ("Normal", "Ulcer (active)")
PER_FRAME = tuple(name for name, cell in CELLS.items() if not cell.is_sequence)
GROUP = r"^vid(?P<group>\d+)_"


def _images(root: Path) -> list[tuple[str, str]]:
    """ROOT/<Class>/vid<v>_<f>.jpg, 6 videos a class, brighter frames for Normal (a model can
    tell the classes apart): (path under ROOT, class)."""
    rng = np.random.default_rng(0)
    out = []
    for cls in CLASSES:
        for v in range(6):
            for f in range(4):
                rel = f"{cls}/vid{v + 10 * (cls == 'Normal')}_{f}.jpg"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                mean = 190 if cls == "Normal" else 60
                px = np.clip(rng.normal(mean, 40, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(px).save(root / rel)
                out.append((rel, cls))
    return out


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> dict[str, Path]:
    """The same images staged from the folder form and from a table with no source column."""
    top = tmp_path_factory.mktemp("sourceless")
    listed = _images(top / "root")
    pd.DataFrame(listed, columns=["image_path", "label"]).to_csv(top / "labels.csv", index=False)
    out = {}
    for form, labels in (("folder", None), ("table", top / "labels.csv")):
        res = stage_images(ImageStageRequest(root=top / "root", out=top / f"staged-{form}",
                                             labels=labels, group_patterns=(GROUP,)),
                           progress=False)
        assert res.manifest["sources"] == [] and set(res.frames["source"]) == {""}
        assert res.manifest["classes"] == list(CLASSES)
        out[form] = res.out
    return out


@pytest.fixture(scope="module")
def store(sqlite_store, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", sqlite_store)
        mp.setenv("PIPI_HOME", str(tmp_path_factory.mktemp("home")))
        mlflow.set_tracking_uri(sqlite_store)
        yield sqlite_store


def _cfg(cell: str):
    return make_config(cell=cell, backbone="resnet18", profile="smoke", weights="none",
                       image_size=32)


def _check_run(run) -> None:
    keys = set(run.data.metrics)
    assert not any("/source/" in k for k in keys), sorted(keys)
    assert {"test/auc/Ulcer _active_", "test/auc/Normal", "test/macro_auc"} <= keys
    assert json.loads(run.data.params["class_metric_keys"]) == {"Ulcer _active_": "Ulcer (active)"}
    assert json.loads(run.data.params["classes"]) == list(CLASSES)


@pytest.mark.parametrize("form", ["folder", "table"])
@pytest.mark.parametrize("cell", PER_FRAME)
def test_every_per_frame_cell_trains_on_sourceless_data(staged, store, cell, form):
    s = train(_cfg(cell), data=str(staged[form]), register=False, progress=False)
    run = MlflowClient().get_run(s.run_id)
    assert run.info.status == "FINISHED"
    _check_run(run)


def test_a_sourceless_table_trains_registers_and_serves_its_class_names(staged, store):
    s = train(_cfg("a"), data=str(staged["table"]), register=True, progress=False)
    run = MlflowClient().get_run(s.run_id)
    _check_run(run)
    version = MlflowClient().search_model_versions(f"run_id='{s.run_id}'")[0]
    model = mlflow.pyfunc.load_model(f"models:/{version.name}/{version.version}")
    assert model.metadata.get_output_schema().input_names()[:2] == list(CLASSES)


def test_predictions_import_against_a_sourceless_table(staged, store, tmp_path):
    frames = pd.read_parquet(staged["table"] / "frames.parquet")
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    y = test["class_index"].to_numpy()
    p1 = np.clip(0.5 + 0.3 * (2 * y - 1) + np.random.default_rng(1).normal(0, .3, len(y)), 0, 1)
    sheet = pd.DataFrame({"image_path": test["image_path"], CLASSES[0]: 1 - p1, CLASSES[1]: p1})
    sheet.to_csv(tmp_path / "preds.csv", index=False)
    res = import_file(kind="predictions", file=tmp_path / "preds.csv", cell="pi",
                      data=str(staged["table"]), experiment="sourceless-import", progress=False)
    run = MlflowClient().get_run(res.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics[f"test/auc/{metric_key(CLASSES[1])}"] == pytest.approx(
        roc_auc_score(y == 1, p1), abs=1e-9)
    assert not any("/source/" in k for k in run.data.metrics)
