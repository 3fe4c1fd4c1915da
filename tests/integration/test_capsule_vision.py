"""Every cell on any class set, the Capsule Vision 2024 challenge's metrics and its sheet
(issue 29, parts 2 and 4).

A Capsule-Vision-layout stand-in with 10 classes and 4 sources (tests/capsule_vision.py) is
staged by the test; cells ``a`` and ``pi`` train on it (smoke recipe: two optimizer steps,
32 px; the integration tier: more than one step). The challenge's formulas are re-implemented here from the definitions of its
``Eval_metrics_gen_excel.generate_metrics_report`` with scikit-learn, computed from the
exported sheet and the labels of the staged frames, and compared with the logged metrics.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from capsule_vision import (
    CLASSES,
    KID_RE,
    KVASIR_RE,
    SOURCES,
    challenge_report,
    organisers_report,
    write_cv_release,
    write_cv_staged,
)
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from PIL import Image
from sklearn.metrics import roc_auc_score
from stores import new_sqlite_store

from pipi.analysis import AggregateOptions
from pipi.analysis.tidy import tidy_metrics
from pipi.cli import main
from pipi.config import TrainConfig, make_config, run_params
from pipi.data.staging.images import ImageStageRequest, stage_images
from pipi.errors import ConfigError
from pipi.predictions import read_predictions
from pipi.report.build import build_report
from pipi.runs.evaluate import load_run_model
from pipi.runs.evidence import load_evidence
from pipi.serving.model_input import encode_png
from pipi.workflows.export import export_cv2024
from pipi.runs.training import train

#: one xdist worker runs the whole module: its module fixtures are built once, not on both
pytestmark = pytest.mark.xdist_group("test_capsule_vision")

TOL = 1e-9


@pytest.fixture()
def store_uri(tmp_path) -> str:
    """A fresh SQLite store of one test (the unit tier's fixture: these tests train, several
    optimizer steps each, so they are integration tests)."""
    return new_sqlite_store(tmp_path / "mlflow.db")


@pytest.fixture(scope="module")
def cv_staged(tmp_path_factory):
    """The stand-in in the challenge's release layout, staged by ``stage_images``."""
    top = write_cv_release(tmp_path_factory.mktemp("cv") / "capsule-vision-standin")
    out = tmp_path_factory.mktemp("cv-staged") / "staged"
    stage_images(ImageStageRequest(root=top, out=out, group_patterns=(KVASIR_RE, KID_RE)),
                 progress=False)
    man = json.loads((out / "manifest.json").read_text())
    assert man["layout"] == "capsule-vision" and man["classes"] == list(CLASSES)
    return out


def test_a_directly_written_staged_folder_trains_too(tmp_path, monkeypatch, store_uri):
    """The staged format as documented (no stager): a 10-class folder trains cell a (in a
    store of its own: the module's experiment holds the stager's runs only)."""
    uri = store_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    root = write_cv_staged(tmp_path / "direct")
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32)
    s = train(cfg, data=str(root), register=False, progress=False)
    run = MlflowClient().get_run(s.run_id)
    assert json.loads(run.data.params["classes"]) == list(CLASSES)
    assert "test/cv2024_combined" in run.data.metrics


@pytest.fixture(scope="module")
def runs(cv_staged, sqlite_store, tmp_path_factory):
    """Cells a and pi trained once on the stand-in: {cell: (summary, run)}."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", sqlite_store)
        mp.setenv("PIPI_HOME", str(home))
        mlflow.set_tracking_uri(sqlite_store)
        out = {}
        for cell in ("a", "pi"):
            cfg = make_config(cell=cell, backbone="resnet18", profile="smoke", weights="none",
                              image_size=32)
            s = train(cfg, data=str(cv_staged), register=False, progress=False)
            out[cell] = (s, MlflowClient().get_run(s.run_id))
        yield out


@pytest.fixture()
def store(sqlite_store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store)
    mlflow.set_tracking_uri(sqlite_store)


def _predictions(run_id, tmp_path, split="test"):
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(tmp_path))
    return read_predictions(folder, split), json.loads(
        open(os.path.join(folder, "schema.json")).read())


def _read_sheet(path):
    return pd.read_excel(path) if str(path).endswith(".xlsx") else pd.read_csv(path)


@pytest.mark.parametrize("cell", ["a", "pi"])
def test_cells_a_and_pi_train_on_ten_classes_with_their_names(runs, cell, store, tmp_path):
    s, run = runs[cell]
    names = list(CLASSES)
    assert json.loads(run.data.params["classes"]) == names
    assert json.loads(run.data.tags["pipi.test_classes"]) == names  # all have test positives
    model, cfg = load_run_model(s.run_id)
    assert cfg.class_set.names == CLASSES and model.head.out_features == 10
    preds, schema = _predictions(s.run_id, tmp_path)
    assert schema["classes"] == names and schema["prob_columns"][-1] == "prob_09"
    assert "prob_10" not in preds and {"source", "image_path"} <= set(preds.columns)
    # the headline: macro-AUC over the classes with test positives, against sklearn
    y = preds["label"].to_numpy()
    probs = preds[[f"prob_{k:02d}" for k in range(10)]].to_numpy(np.float64)
    ref = np.mean([roc_auc_score(y == k, probs[:, k]) for k in range(10)])
    assert abs(run.data.metrics["test/macro_auc"] - ref) < TOL
    assert abs(run.data.metrics["test/auc/Foreign Body"] - roc_auc_score(y == 4, probs[:, 4])) < TOL
    # per source: macro-AUC over the classes with positives and negatives among its frames
    for src in SOURCES:
        m = preds["source"].to_numpy() == src
        ks = [k for k in range(10) if 0 < (y[m] == k).sum() < m.sum()]
        want = np.mean([roc_auc_score(y[m] == k, probs[m, k]) for k in ks])
        assert abs(run.data.metrics[f"test/source/{src}/macro_auc"] - want) < TOL
        assert run.data.metrics[f"test/source/{src}/n_frames"] == m.sum()


def test_the_logged_model_serves_the_ten_class_names(runs, store, cv_staged):
    s, _ = runs["a"]
    model = mlflow.pyfunc.load_model(s.model_uri)
    img = np.asarray(Image.open(next(cv_staged.glob("test/Bleeding/*/*.jpg"))).convert("RGB"))
    out = model.predict(pd.DataFrame({"image": [encode_png(img)]}))
    assert list(out.columns[:10]) == list(CLASSES)
    assert out["predicted_class"].iloc[0] in CLASSES
    assert abs(out[list(CLASSES)].to_numpy().sum() - 1) < 1e-5


@pytest.mark.parametrize("split, name", [("test", "sheet.xlsx"), ("val", "sheet.csv")])
def test_the_exported_sheet_gives_the_logged_challenge_metrics(runs, store, cv_staged, tmp_path,
                                                               split, name):
    s, run = runs["pi"]
    out = tmp_path / name
    res = CliRunner().invoke(main, ["export", "cv2024", "--run", s.run_id, "--out", str(out),
                                    "--split", split]
                             + (["--format", "csv"] if name.endswith(".csv") else []))
    assert res.exit_code == 0, res.output
    sheet = _read_sheet(out)
    assert list(sheet.columns) == ["image_path", *CLASSES, "predicted_class"]
    frames = pd.read_parquet(cv_staged / "frames.parquet")
    frames = frames[frames["split"] == split]
    # image_path exactly as the dataset wrote it (the challenge's Windows separators)
    assert sorted(sheet["image_path"]) == sorted(frames["image_path"])
    assert all(re.fullmatch(r"(training|validation)\\[^\\]+\\[^\\]+\\[^\\]+\.jpg", p)
               for p in sheet["image_path"])
    truth = frames.set_index("image_path").loc[sheet["image_path"], "class"].to_numpy()
    y_true = (truth[:, None] == np.asarray(CLASSES)[None, :]).astype(int)
    y_pred = sheet[list(CLASSES)].to_numpy(np.float64)
    assert (sheet["predicted_class"].to_numpy() == np.asarray(CLASSES)[y_pred.argmax(1)]).all()
    want = challenge_report(y_true, y_pred, CLASSES)
    m = run.data.metrics
    for key in ("mean_auc", "balanced_accuracy", "combined"):
        assert abs(m[f"{split}/cv2024_{key}"] - want[key]) < TOL, key
    for metric in ("auc", "specificity", "sensitivity", "f1", "pr_auc"):
        for c in CLASSES:
            assert abs(m[f"{split}/cv2024/{metric}/{c}"] - want[metric][c]) < TOL, (metric, c)


def test_the_organisers_scoring_of_the_exported_sheet_gives_the_logged_metrics(
        runs, store, cv_staged, tmp_path):
    """The exported test sheet scored as the challenge's organisers scored a validation
    submission (tests/capsule_vision.py ``organisers_report``), against the release's own
    ``validation_data.xlsx``: it lists exactly the sheet's images, and the scores are the
    run's logged ``test/cv2024_*`` metrics."""
    s, run = runs["a"]
    out = export_cv2024(s.run_id, tmp_path / "submission.xlsx").out
    sheets = json.loads((cv_staged / "manifest.json").read_text())["tables"]
    truth = pd.read_excel(next(Path(t) for t in sheets if t.endswith("validation_data.xlsx")))
    got = organisers_report(truth.dropna(subset=["image_path"]), pd.read_excel(out), CLASSES)
    m = run.data.metrics
    for key in ("mean_auc", "balanced_accuracy", "combined"):
        assert abs(m[f"test/cv2024_{key}"] - got[key]) < TOL, key
    for metric in ("auc", "specificity", "sensitivity", "f1"):
        for c in CLASSES:
            assert abs(m[f"test/cv2024/{metric}/{c}"] - got[metric][c]) < TOL, (metric, c)


def test_a_sequence_cell_logs_the_challenge_and_per_source_metrics(runs, store, cv_staged,
                                                                   tmp_path):
    """Cell b (C2 over the embeddings of cell a's run, found and reused) on the stand-in: its
    run logs ``test/cv2024_*`` and ``val/cv2024_*`` and the per-source metrics as the
    per-frame cells do, equal to the organisers' scoring of its exported sheet."""
    cfg = make_config(cell="b", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32)
    s = train(cfg, data=str(cv_staged), register=False, progress=False)
    run = MlflowClient().get_run(s.run_id)
    out = export_cv2024(s.run_id, tmp_path / "b.xlsx").out
    MlflowClient().delete_run(s.run_id)  # the module's aggregate tests pair cells a and pi only
    assert run.data.tags["pipi.base_run_id"] == runs["a"][0].run_id
    m = run.data.metrics
    assert {f"{p}/cv2024_combined" for p in ("val", "test")} <= set(m)
    for src in SOURCES:
        assert f"test/source/{src}/macro_auc" in m and f"val/source/{src}/n_frames" in m
    sheets = json.loads((cv_staged / "manifest.json").read_text())["tables"]
    truth = pd.read_excel(next(Path(t) for t in sheets if t.endswith("validation_data.xlsx")))
    got = organisers_report(truth.dropna(subset=["image_path"]), pd.read_excel(out), CLASSES)
    for key in ("mean_auc", "balanced_accuracy", "combined"):
        assert abs(m[f"test/cv2024_{key}"] - got[key]) < TOL, key


def test_export_refuses_a_run_without_predictions_in_one_line(store, tmp_path):
    with mlflow.start_run() as r:
        mlflow.log_param("x", 1)
    res = CliRunner().invoke(main, ["export", "cv2024", "--run", r.info.run_id,
                                    "--out", str(tmp_path / "s.xlsx")])
    assert res.exit_code != 0
    assert r.info.run_id in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "s.xlsx").exists()


def test_export_writes_xlsx_when_the_name_has_no_known_suffix(runs, store,
                                                                            tmp_path):
    s, _ = runs["a"]
    res = export_cv2024(s.run_id, tmp_path / "preds")
    assert res.out.read_bytes()[:2] == b"PK" and res.n_frames == 40  # an xlsx is a zip


def test_kvasir_configs_log_what_they_did_before_and_a_class_set_round_trips():
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke")
    for key in ("classes", "train_sources", "test_sources"):
        assert key not in cfg.to_dict() and key not in run_params(cfg)
    assert cfg.class_set.is_kvasir and len(cfg.class_set) == 14
    ten = cfg.with_classes(type(cfg.class_set)(CLASSES))
    assert ten.to_dict()["classes"] == list(CLASSES)
    assert TrainConfig.from_dict(json.loads(json.dumps(ten.to_dict()))) == ten
    assert cfg.with_classes(cfg.class_set) == cfg  # Kvasir's 14 stay the default


def test_aggregate_pairs_runs_of_any_class_set_by_their_names(runs, store, tmp_path):
    ev, _ = load_evidence("Default", "", tmp_path)
    assert ev.names == CLASSES and ev.class_names == list(CLASSES)
    assert sorted(ev.cells("resnet18")) == ["a", "pi"]
    tidy = tidy_metrics(ev)
    for cell in ("a", "pi"):
        s, run = runs[cell]
        got = tidy[(tidy.run_id == s.run_id) & (tidy.metric == "auc/Foreign Body")]
        assert abs(got["value"].item() - run.data.metrics["test/auc/Foreign Body"]) < 1e-6
        assert abs(ev.arm("resnet18", cell).macro[0] - s.test_macro_auc) < 1e-6


def test_aggregate_has_a_per_source_table_computed_within_each_source(runs, store, tmp_path):
    ev, _ = load_evidence("Default", "", tmp_path)
    # the per-source table's AUCs and lifts only: no figures, and its intervals (not read
    # here) from 50 resamples instead of the default 1,000
    table = build_report(ev, AggregateOptions(n_resamples=50, figures=False)).table(
        "per_source")
    assert sorted(table.data["source"]) == sorted(SOURCES)
    a, pi = ev.arm("resnet18", "a"), ev.arm("resnet18", "pi")
    for row in table.data.itertuples():
        m = ev.sources == row.source
        y = ev.labels[m]
        ks = [k for k in range(10) if 0 < (y == k).sum() < m.sum()]
        ref = np.mean([roc_auc_score(y == k, a.probs[0][m][:, k]) for k in ks])
        new = np.mean([roc_auc_score(y == k, pi.probs[0][m][:, k]) for k in ks])
        assert abs(row.ref_macro_auc - ref) < 1e-9 and abs(row.lift - (new - ref)) < 1e-9


def test_leave_one_source_out_trains_on_the_named_sources_and_scores_the_held_out_one(
        cv_staged, tmp_path, monkeypatch, store_uri):
    uri = store_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32, train_sources="KVASIR,KID,AIIMS", test_sources="SEE-AI")
    s = train(cfg, data=str(cv_staged), register=False, progress=False)
    run = MlflowClient().get_run(s.run_id)
    test, _ = _predictions(s.run_id, tmp_path / "p")
    val, _ = _predictions(s.run_id, tmp_path / "v", "val")
    assert set(test["source"]) == {"SEE-AI"}
    assert set(val["source"]) <= {"KVASIR", "KID", "AIIMS"} and len(val)
    frames = pd.read_parquet(cv_staged / "frames.parquet")
    assert len(test) == ((frames["split"] == "test") & (frames["source"] == "SEE-AI")).sum()
    m = run.data.metrics
    assert "test/source/SEE-AI/macro_auc" in m
    assert not [k for k in m if k.startswith("test/source/") and "SEE-AI" not in k]
    assert run.data.params["train_sources"] == "KVASIR,KID,AIIMS"
    assert "-P test_sources=SEE-AI" in run.data.tags["pipi.recipe"]
    # the headline's classes: those with SEE-AI test positives
    y = test["label"].to_numpy()
    assert json.loads(run.data.tags["pipi.test_classes"]) == [CLASSES[k] for k in sorted(set(y))]


def test_an_unknown_source_is_refused_in_one_line(cv_staged, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    cfg = make_config(cell="a", backbone="resnet18", profile="smoke", weights="none",
                      train_sources="KVASIR,OLYMPUS")
    with pytest.raises(ConfigError, match=r"train_sources=KVASIR,OLYMPUS: .* \['OLYMPUS'\]"):
        train(cfg, data=str(cv_staged), register=False, progress=False)


def test_pipi_train_prints_the_headline_classes_by_name(cv_staged, tmp_path, monkeypatch,
                                                       store_uri):
    uri = store_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    res = CliRunner().invoke(main, ["train", "--cell", "a", "--backbone", "resnet18",
                                    "--profile", "smoke", "--weights", "none", "--data",
                                    str(cv_staged), "--image-size", "32",
                                    "--model-prefix", "cvtest"])
    assert res.exit_code == 0, res.output
    assert f"over 10 classes with test positives: {', '.join(CLASSES)}" in res.output
    # issue 38: train says which version holds which alias afterwards
    assert "aliases of cvtest-resnet18-a: @candidate -> version 1" in res.output


HELD_OUT = {"train_sources": "KVASIR,KID,AIIMS", "test_sources": "SEE-AI"}


def test_ablate_holds_a_source_out_and_aggregate_builds_the_leave_one_source_out_table(
        runs, store, cv_staged, tmp_path, monkeypatch):
    """`ablate` with train_sources/test_sources end to end: its children train on three
    sources and score SEE-AI only, a second sweep finds them again, and `aggregate` keeps
    them out of the arms of the runs on every source (the module's a and pi, same seed)
    and sets them against those on SEE-AI's frames (sklearn recomputes both sides)."""
    from pipi.analysis import AggregateOptions, Analysis
    from pipi.report.loso import loso_table
    from pipi.workflows.ablate import run_ablation

    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    seed = int(runs["a"][1].data.params["seed"])
    sweep = {"study": "per_frame", "cells": "a,pi", "seeds": str(seed),
             "backbones": "resnet18", "profile": "smoke", "data": str(cv_staged),
             "weights": "none", "overrides": {"image_size": 32, **HELD_OUT}, "progress": False}
    first = run_ablation(**sweep)
    assert [c.status for c in first.children] == ["trained", "trained"]
    ids = {c.cell: c.run_id for c in first.children}
    for cell, rid in ids.items():
        test, _ = _predictions(rid, tmp_path / cell)
        assert set(test["source"]) == {"SEE-AI"}
        assert MlflowClient().get_run(rid).data.params["test_sources"] == "SEE-AI"
    again = run_ablation(**sweep)  # the same children on a 10-class dataset: found again
    assert [(c.status, c.run_id) for c in again.children] == [("reused", ids["a"]),
                                                              ("reused", ids["pi"])]

    ev, _ = load_evidence("Default", "", tmp_path / "cache")
    assert {ev.arm("resnet18", c).runs()[seed] for c in ("a", "pi")} == {
        runs["a"][0].run_id, runs["pi"][0].run_id}
    (cond,) = ev.held_out.conditions
    assert cond.train_sources == ("AIIMS", "KID", "KVASIR") and cond.held_out() == ["SEE-AI"]
    table = loso_table(Analysis(ev, AggregateOptions(n_resamples=50, figures=False)))
    (row,) = table.data.itertuples()
    assert (row.held_out_source, row.reference, row.new, row.note) == ("SEE-AI", "a", "pi", "")
    m = ev.sources == "SEE-AI"
    y = ev.labels[m]
    ks = [k for k in range(10) if 0 < (y == k).sum() < y.size]

    def macro(probs):
        return np.mean([roc_auc_score(y == k, probs[:, k]) for k in ks])

    ins = {c: macro(ev.arm("resnet18", c).probs[0][m].astype(float)) for c in ("a", "pi")}
    held = {}
    for cell, rid in ids.items():
        test, _ = _predictions(rid, tmp_path / f"h{cell}")
        test = test.set_index("path").loc[ev.paths[m]]  # the same frames, in evidence order
        assert (test["label"].to_numpy() == y).all()
        held[cell] = macro(test[[f"prob_{k:02d}" for k in range(10)]].to_numpy(float))
    assert abs(row.in_source_ref_macro_auc - ins["a"]) < 1e-6
    assert abs(row.held_out_new_macro_auc - held["pi"]) < 1e-6
    d_in, d_out = ins["pi"] - ins["a"], held["pi"] - held["a"]
    assert abs(row.in_source_delta - d_in) < 1e-6 and abs(row.held_out_delta - d_out) < 1e-6
    assert abs(row.retention - d_out / d_in) < 1e-6 * max(1, abs(d_out / d_in))


def test_ablate_refuses_an_unknown_source_before_any_child(cv_staged, store, tmp_path,
                                                          monkeypatch):
    from pipi.workflows.ablate import run_ablation

    monkeypatch.setenv("PIPI_HOME", str(tmp_path / "home"))
    before = len(mlflow.search_runs(search_all_experiments=True))
    with pytest.raises(ConfigError, match=r"^test_sources=OLYMPUS: .* \['OLYMPUS'\]"):
        run_ablation(study="per_frame", cells="a", seeds="1", backbones="resnet18",
                     profile="smoke", data=str(cv_staged), weights="none",
                     overrides={"test_sources": "OLYMPUS"}, progress=False)
    assert len(mlflow.search_runs(search_all_experiments=True)) == before
