"""The Capsule Vision 2024 prediction sheet (``pipi export cv2024``) as the challenge's own
tools read it: the column set and order of its ``save_predictions_to_excel``, and the scores
its organisers' scripts compute from it (re-implemented from their definitions in
tests/capsule_vision.py) equal to the metrics a run logs, to 1e-9. The truth sheets are
written here with openpyxl in the challenge's published forms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from capsule_vision import CLASSES, SOURCES, organisers_report
from openpyxl import Workbook, load_workbook

from pipi.errors import DataError
from pipi.predictions import predictions_frame
from pipi.report.cv2024_sheet import challenge_sheet, write_sheet
from pipi.stats.cv2024 import cv2024_metrics

TOL = 1e-9


def _preds(n: int, *, seed: int, absent: tuple[int, ...] = ()) -> pd.DataFrame:
    """A run's test predictions (float32 probabilities, as stored) of ``n`` frames."""
    rng = np.random.default_rng(seed)
    k = len(CLASSES)
    labels = np.array([c for c in np.resize(np.arange(k), n * 2) if c not in absent][:n])
    logits = rng.normal(0, 1, (n, k)) + 2.0 * np.eye(k)[labels] * rng.random((n, 1))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    src = [SOURCES[i % 4] for i in range(n)]
    frames = pd.DataFrame({
        "path": [f"test/{CLASSES[c]}/{s}/f{i}.jpg" for i, (c, s) in enumerate(zip(labels, src))],
        "video_id": [f"v{i % 7}" for i in range(n)], "frame_number": np.arange(n),
        "class_index": labels, "class": [CLASSES[c] for c in labels], "source": src,
        "image_path": [f"validation\\{CLASSES[c]}\\{s}\\f{i}.jpg"
                       for i, (c, s) in enumerate(zip(labels, src))]})
    return predictions_frame(frames, probs.astype(np.float32))


def _xlsx(path, header, rows):
    wb = Workbook()
    ws = wb.active
    ws.append(header)
    for r in rows:
        ws.append(r)
    wb.save(path)
    return path


def _logged(preds: pd.DataFrame) -> dict:
    """What a run logs for the split (pipi.training.frames.split_metrics -> cv2024_metrics)."""
    probs = preds[[f"prob_{k:02d}" for k in range(len(CLASSES))]].to_numpy(np.float64)
    return cv2024_metrics(preds["label"].to_numpy(), probs, CLASSES).metrics("test")


def _check(got: dict, logged: dict) -> None:
    for key in ("mean_auc", "balanced_accuracy", "combined"):
        assert abs(logged[f"test/cv2024_{key}"] - got[key]) < TOL, key
    for metric in ("auc", "specificity", "sensitivity", "f1"):
        for c in CLASSES:
            assert abs(logged[f"test/cv2024/{metric}/{c}"] - got[metric][c]) < TOL, (metric, c)


@pytest.mark.parametrize("fmt", ["xlsx", "csv"])
def test_the_sheet_has_the_challenges_columns_and_one_row_per_image(tmp_path, fmt):
    preds = _preds(30, seed=1)
    out = write_sheet(challenge_sheet(preds, CLASSES), tmp_path / f"s.{fmt}", fmt)
    sheet = pd.read_excel(out) if fmt == "xlsx" else pd.read_csv(out)
    assert list(sheet.columns) == ["image_path", *CLASSES, "predicted_class"]
    assert list(sheet["image_path"]) == list(preds["image_path"])
    probs = preds[[f"prob_{k:02d}" for k in range(10)]].to_numpy(np.float64)
    got = sheet[list(CLASSES)].to_numpy(np.float64)
    if fmt == "csv":
        assert np.array_equal(got, probs)  # bit for bit
    else:  # openpyxl writes 16 significant digits (the challenge's own writer too): the
        # order of the values, all the challenge's metrics depend on, is kept
        assert np.allclose(got, probs, rtol=1e-15, atol=0)
        flat, ref = got.ravel(), probs.ravel()
        assert np.array_equal(np.argsort(flat, kind="stable"), np.argsort(ref, kind="stable"))
    assert list(sheet["predicted_class"]) == [CLASSES[k] for k in probs.argmax(1)]
    if fmt == "xlsx":  # one sheet, pandas' and the challenge's default name
        assert load_workbook(out).sheetnames == ["Sheet1"]


def test_a_multilabel_frame_is_one_row_and_disagreeing_rows_are_refused():
    preds = _preds(12, seed=2)
    twice = pd.concat([preds, preds.iloc[[3]].assign(label=5, label_name=CLASSES[5])],
                      ignore_index=True)
    sheet = challenge_sheet(twice, CLASSES)
    assert len(sheet) == 12 and not sheet["image_path"].duplicated().any()
    bad = twice.copy()
    bad.loc[len(bad) - 1, "prob_00"] += 0.25
    with pytest.raises(DataError, match=r"f3\.jpg' has rows with different probabilities"):
        challenge_sheet(bad, CLASSES)


def test_the_organisers_validation_scoring_of_the_sheet_gives_the_logged_metrics(tmp_path):
    """The validation sheet's truth (``image_path`` from ``Dataset/``, the ``Dataset`` source
    column, one-hot classes), matched on ``image_path`` exactly; Worms has no true frame (its
    AUC is the challenge's 0.0)."""
    preds = _preds(60, seed=3, absent=(9,))
    truth_rows = [[p, s, *[int(c == cls) for c in CLASSES]]
                  for p, s, cls in zip(preds["image_path"], preds["source"],
                                       preds["label_name"])][::-1]       # another row order
    truth = pd.read_excel(_xlsx(tmp_path / "validation_data.xlsx",
                                ["image_path", "Dataset", *CLASSES], truth_rows))
    out = write_sheet(challenge_sheet(preds, CLASSES), tmp_path / "sub.xlsx", "xlsx")
    got = organisers_report(truth, pd.read_excel(out), CLASSES)
    assert got["auc"]["Worms"] == 0.0
    _check(got, _logged(preds))


def test_the_organisers_test_scoring_matches_on_file_names(tmp_path):
    """A test sheet's truth as the challenge's benchmarking readme describes ``test_data.xlsx``
    (``image_path`` and the class name in ``class_label``), matched on the file name, every
    class present (the organisers one-hot encode ``class_label`` in sorted order)."""
    preds = _preds(50, seed=4)
    rows = [[f"Testing set\\{p.split(chr(92))[-1]}", c]
            for p, c in zip(preds["image_path"], preds["label_name"])]
    truth = pd.read_excel(_xlsx(tmp_path / "test_data.xlsx", ["image_path", "class_label"], rows))
    out = write_sheet(challenge_sheet(preds, CLASSES), tmp_path / "sub.xlsx", "xlsx")
    _check(organisers_report(truth, pd.read_excel(out), CLASSES, key="file"), _logged(preds))
