"""`galar` and GalKva are defined on Kvasir-Capsule's 14 classes (Galar is mapped onto them): a
run or predictions folder of another class set is refused in one line naming it, its class set
and what is expected; a dataset staged with a class map onto Kvasir's 14 is accepted."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest
from fakes import experiment

from pipi import tracking
from pipi.analysis import ArmEvidence, Evidence
from pipi.analysis.retention import galkva_runs
from pipi.classes import CLASSES, class_set_of, class_set_of_param
from pipi.config import make_config, run_params
from pipi.errors import ConfigError, DataError
from pipi.galkva import load_prediction_dir
from pipi.predictions import predictions_frame, write_predictions
from pipi.workflows.galar import resolve_source_runs

NAMES = ("Angioectasia", "Bleeding", "Worms")


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    return msg


def _model_run(params: dict) -> str:
    exp = experiment("kvasir-only")
    with mlflow.start_run(experiment_id=exp, tags={tracking.tags.TAG_CELL: "pi",
    tracking.tags.TAG_BACKBONE: "efficientnet_b0",
                                tracking.tags.TAG_ENTRY_POINT: "train"}) as run:
        mlflow.log_params(params)
    return run.info.run_id


def test_galar_refuses_a_run_of_another_class_set(sqlite_tracking):
    rid = _model_run({"cell": "pi", "classes": json.dumps(list(NAMES))})
    with pytest.raises(ConfigError) as exc:
        resolve_source_runs(rid, experiment="kvasir-only")
    msg = _one_line(exc)
    assert f"run {rid} predicts 3 classes (Angioectasia, Bleeding, Worms), not " \
           "Kvasir-Capsule's 14" in msg
    assert "galar scores models of Kvasir-Capsule's 14 classes" in msg
    assert "--class-map" in msg


def test_galar_takes_kvasir_runs_and_runs_of_data_mapped_onto_kvasir(sqlite_tracking):
    # staged with --class-map onto kvasir: the manifest's classes are Kvasir's 14, so the
    # run's config has no classes of its own and logs no `classes` param
    cfg = make_config(cell="pi", profile="smoke", weights="none")
    mapped = cfg.with_classes(class_set_of({"classes": list(CLASSES)}))
    assert "classes" not in run_params(mapped)
    assert class_set_of_param(run_params(mapped).get("classes")).is_kvasir
    plain = _model_run({"cell": "pi"})
    listed = _model_run({"cell": "pi", "classes": json.dumps(list(CLASSES))})
    assert resolve_source_runs(f"{plain},{listed}", experiment="kvasir-only") == [plain, listed]


def _predictions(folder, names, seed=0):
    rng = np.random.default_rng(seed)
    lab = np.arange(40) % len(names)
    frames = pd.DataFrame({"path": [f"test/{names[k]}/{i}.jpg" for i, k in enumerate(lab)],
                           "video_id": [f"v{i % 4}" for i in range(40)],
                           "frame_number": np.arange(40), "class_index": lab,
                           "class": [names[k] for k in lab]})
    probs = rng.dirichlet(np.ones(len(names)), size=40)
    write_predictions({"test": predictions_frame(frames, probs)}, folder, classes=names)


def test_galkva_refuses_a_predictions_folder_of_another_class_set(tmp_path):
    for arm in ("baseline", "method"):
        _predictions(tmp_path / "kvasir" / arm / "41", NAMES)
        _predictions(tmp_path / "galar" / arm / "41", CLASSES)
    (tmp_path / "kvasir" / "baseline" / "41" / "run.json").write_text('{"run_id": "r41"}')
    with pytest.raises(DataError) as exc:
        load_prediction_dir(tmp_path)
    msg = _one_line(exc)
    assert f"{tmp_path / 'kvasir' / 'baseline' / '41'} (run r41) predicts 3 classes " \
           "(Angioectasia, Bleeding, Worms), not Kvasir-Capsule's 14" in msg
    assert "GalKva scores Kvasir-Capsule's 14 classes" in msg


def test_galkva_takes_kvasir_predictions_folders(tmp_path):
    for ds in ("kvasir", "galar"):
        for arm in ("baseline", "method"):
            _predictions(tmp_path / ds / arm / "41", CLASSES)
    runs = load_prediction_dir(tmp_path)
    assert set(runs) == {"kvasir", "galar"}


def _evidence(names) -> Evidence:
    n = 30
    labels = np.arange(n) % len(names)
    arms = {("efficientnet_b0", c): ArmEvidence(
        "efficientnet_b0", c, (41,), (f"{c}-run41",),
        np.full((1, n, len(names)), 1 / len(names), np.float32), np.zeros((1, len(names))))
        for c in ("a", "pi")}
    return Evidence(labels=labels, videos=np.array([f"v{i % 3}" for i in range(n)]),
                    paths=np.array([f"{i}.jpg" for i in range(n)]),
                    classes=tuple(range(len(names))), arms=arms, runs=pd.DataFrame(),
                    excluded=pd.DataFrame(), names=tuple(names))


def test_galkva_from_an_experiment_refuses_runs_of_another_class_set():
    with pytest.raises(DataError) as exc:
        galkva_runs(_evidence(NAMES), None, backbone="efficientnet_b0", baseline="a",
                    method="pi")
    msg = _one_line(exc)
    assert "runs a-run41, pi-run41 predict 3 classes (Angioectasia, Bleeding, Worms), not " \
           "Kvasir-Capsule's 14" in msg
    # Kvasir's 14: on to the next check (no galar runs here)
    with pytest.raises(DataError, match="no runs of galar a"):
        galkva_runs(_evidence(CLASSES), None, backbone="efficientnet_b0", baseline="a",
                    method="pi")
