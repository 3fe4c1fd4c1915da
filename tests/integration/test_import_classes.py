"""`import` against a staged image dataset with its own classes (a Capsule Vision 2024
stand-in, 10 classes): the challenge's prediction sheet and a checkpoint in the published
code's layout import against that class set; files of Kvasir's 14 classes are refused in one
line naming the file and the mismatch, with nothing logged."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from capsule_vision import CLASSES as CV
from capsule_vision import challenge_report, write_cv_staged
from mlflow.tracking import MlflowClient
from sklearn.metrics import roc_auc_score
from torch import nn

from pipi.classes import CLASSES as KVASIR
from pipi.errors import DataError
from pipi.workflows.importer import import_file


@pytest.fixture(scope="module")
def cv_staged(tmp_path_factory) -> Path:
    return write_cv_staged(tmp_path_factory.mktemp("cv") / "staged")


def _runs(name: str) -> list:
    exp = mlflow.get_experiment_by_name(name)
    return [] if exp is None else MlflowClient().search_runs([exp.experiment_id])


def _predictions(run_id: str, tmp_path: Path) -> tuple[dict, pd.DataFrame]:
    folder = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                      dst_path=str(tmp_path / run_id)))
    return json.loads((folder / "schema.json").read_text()), pd.read_parquet(
        folder / "test.parquet")


def test_the_challenge_s_sheet_imports_against_the_staged_class_set(cv_staged, sqlite_tracking,
                                                                    tmp_path):
    frames = pd.read_parquet(cv_staged / "frames.parquet")
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    rng = np.random.default_rng(0)
    y = test["class_index"].to_numpy()
    logits = rng.normal(size=(len(test), len(CV))) + 1.5 * np.eye(len(CV))[y]
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    # as save_predictions_to_excel writes it: image_path, a column per class, predicted_class
    sheet = pd.DataFrame(probs, columns=list(CV))
    sheet.insert(0, "image_path", test["image_path"])
    sheet["predicted_class"] = [CV[k] for k in probs.argmax(1)]
    path = tmp_path / "predictions.xlsx"
    sheet.to_excel(path, index=False)
    res = import_file(kind="predictions", file=path, cell="pi", seed=7, data=str(cv_staged),
                      experiment="import-cv")
    run = MlflowClient().get_run(res.run_id)
    assert json.loads(run.data.params["classes"]) == list(CV)
    assert run.data.tags["pipi.import.matched_by"] == "image_path"
    schema, pred = _predictions(res.run_id, tmp_path)
    assert schema["classes"] == list(CV) and len(schema["prob_columns"]) == len(CV)
    got = pred.set_index("image_path")[schema["prob_columns"]].loc[test["image_path"]]
    np.testing.assert_allclose(got.to_numpy(), probs, atol=1e-6)
    want = np.mean([roc_auc_score(y == k, probs[:, k]) for k in range(len(CV))])
    assert res.test_macro_auc == pytest.approx(want, abs=1e-6)
    report = challenge_report(np.eye(len(CV))[y], probs, CV)  # the challenge's definitions
    assert run.data.metrics["test/cv2024_mean_auc"] == pytest.approx(report["mean_auc"], abs=1e-6)
    assert json.loads(run.data.tags["pipi.test_classes"]) == list(CV)


def test_a_kvasir_prediction_file_is_refused_against_the_staged_class_set(cv_staged,
                                                                         sqlite_tracking,
                                                                         tmp_path):
    test = pd.read_parquet(cv_staged / "frames.parquet").query("split == 'test'")
    path = tmp_path / "kvasir.csv"
    pd.DataFrame(np.full((len(test), 14), 1 / 14), columns=list(KVASIR)).assign(
        filename=test["filename"].to_numpy()).to_csv(path, index=False)
    with pytest.raises(DataError) as err:
        import_file(kind="predictions", file=path, cell="pi", seed=7, data=str(cv_staged),
                    experiment="import-cv-bad")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: unknown class columns")
    assert "the staged data's 10 classes ['Angioectasia'" in msg
    assert _runs("import-cv-bad") == []


class _Published(nn.Module):
    """The published ImageClassifierPI on ResNet-18 (5-channel conv1, fc removed, a
    Sequential(Dropout, Linear) head)."""

    def __init__(self, classes: int):
        super().__init__()
        torch.manual_seed(3)
        m = torchvision.models.resnet18(weights=None)
        old = m.conv1
        m.conv1 = nn.Conv2d(5, old.out_channels, old.kernel_size, old.stride, old.padding,
                            bias=False)
        m.fc = nn.Identity()
        self.backbone = m
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(512, classes))


def _save(path: Path, classes: int, names) -> Path:
    torch.save({"model_state": _Published(classes).state_dict(), "class_names": list(names),
                "args": {"model_name": "resnet18", "image_size": 32,
                         "use_physics_prior": True}}, path)
    return path


def test_a_published_checkpoint_of_the_staged_classes_imports(cv_staged, sqlite_tracking,
                                                             tmp_path):
    ckpt = _save(tmp_path / "best_model.pt", len(CV), sorted(CV))  # ImageFolder's order
    res = import_file(kind="checkpoint", file=ckpt, seed=1, data=str(cv_staged),
                      profile="smoke", experiment="import-cv-ckpt", register=False,
                      progress=False)
    run = MlflowClient().get_run(res.run_id)
    assert json.loads(run.data.params["classes"]) == list(CV)
    assert run.data.tags["pipi.import.class_order"] == "the file's class_names"
    schema, pred = _predictions(res.run_id, tmp_path)
    assert schema["classes"] == list(CV)
    probs = pred[schema["prob_columns"]].to_numpy(np.float64)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    # a Kvasir-Capsule checkpoint on these data: one line, nothing logged
    kv = _save(tmp_path / "kvasir.pt", 14, KVASIR)
    with pytest.raises(DataError) as err:
        import_file(kind="checkpoint", file=kv, seed=1, data=str(cv_staged), profile="smoke",
                    experiment="import-cv-ckpt-bad", register=False, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(kv))
    assert "class_names has classes the staged data does not have" in msg
    assert _runs("import-cv-ckpt-bad") == []
