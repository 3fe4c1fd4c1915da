"""An evaluation's scores logged into an in-memory run (issue 39, step 6: a workflow step that
is not about the store runs on ``MemoryRun``): what ``log_scores`` writes is read back as the
run contract's files and the class tags, against an independent computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from fakes import make_frames, make_probs
from sklearn.metrics import roc_auc_score

from pipi.classes import CLASSES
from pipi.predictions import predictions_frame, read_predictions, read_schema
from pipi.runs.evaluate import log_scores
from pipi.tracking.handle import MemoryRun
from pipi.tracking.tags import TAG_TEST_CLASSES, TAG_VAL_CLASSES


def test_log_scores_writes_the_contract_files_finite_metrics_and_class_tags(tmp_path):
    test, val = make_frames(4, 50, 0), make_frames(3, 40, 1, split="val")
    scored = pd.concat([test.assign(split="test"), val.assign(split="val")], ignore_index=True)
    preds = {"test": predictions_frame(test, make_probs(test, 1.5, 0)),
             "val": predictions_frame(val, make_probs(val, 1.5, 1))}
    y, p = test["class_index"].to_numpy(), make_probs(test, 1.5, 0)
    k = sorted(set(y))[0]
    auc = roc_auc_score(y == k, p[:, k])
    metrics = {f"test/auc/{CLASSES[k]}": auc, "test/undefined": math.nan}
    with MemoryRun() as run:
        log_scores(run, preds, metrics, scored, tmp_path)
        assert run.history == {f"test/auc/{CLASSES[k]}": [(0, auc)]}   # the NaN left out
        assert json.loads(run.tags[TAG_TEST_CLASSES]) == [CLASSES[c] for c in sorted(set(y))]
        assert json.loads(run.tags[TAG_VAL_CLASSES]) == [
            CLASSES[c] for c in sorted(set(val["class_index"]))]
        folder = run.artifact_dir / "predictions"
        assert sorted(run.artifacts()) == ["predictions/schema.json", "predictions/test.parquet",
                                           "predictions/val.parquet"]
        back = read_predictions(folder, "test")
        np.testing.assert_allclose(back[[c for c in back if c.startswith("prob_")]].to_numpy(),
                                   p, rtol=0, atol=1e-6)
        assert read_schema(folder)["classes"] == list(CLASSES)
