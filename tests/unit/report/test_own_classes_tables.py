"""aggregate's per-class tables on runs of another class set (a staged image dataset): rows
named by the data's classes, no Kvasir focal classes claimed (table or precision-recall
figure), the multi-class Brier note counting the data's columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import special

from pipi import analysis
from pipi.predictions import predictions_frame, write_predictions
from pipi.report.breakdown import calibration_table, operating_points_table
from pipi.report.curves import focal_pr_data

#: names that share two of the paper's focal classes (Lymphangiectasia, Ulcer) with Kvasir's
NAMES = ("Angioectasia", "Bleeding", "Lymphangiectasia", "Ulcer")


def _evidence(tmp):
    rng = np.random.default_rng(0)
    lab = rng.integers(0, len(NAMES), 160)
    lab[: len(NAMES)] = range(len(NAMES))
    frames = pd.DataFrame({"path": [f"test/{NAMES[k]}/{i}.jpg" for i, k in enumerate(lab)],
                           "video_id": [f"v{i % 8}" for i in range(len(lab))],
                           "frame_number": np.arange(len(lab)), "class_index": lab,
                           "class": [NAMES[k] for k in lab]})
    rows, dirs = [], {}
    for ci, cell in enumerate(("a", "pi")):
        for s in (41, 42):
            rid = f"{cell}{s}".ljust(32, "0")
            logits = rng.normal(size=(len(lab), len(NAMES))) + (1 + ci) * np.eye(len(NAMES))[lab]
            dirs[rid] = write_predictions(
                {"test": predictions_frame(frames, special.softmax(logits, axis=1))},
                tmp / rid, classes=NAMES)
            rows.append({"run_id": rid, "experiment_id": "1", "run_name": rid,
                         "status": "FINISHED", "start_time": 100 * ci + s,
                         "entry_point": "train", "cell": cell, "backbone": "efficientnet_b0",
                         "seed": s, "data_digest": "e" * 64, "dataset": "images", "study": "",
                         "variant": "", "base_run_id": "", "parent_run_id": "",
                         "test_classes": json.dumps(list(NAMES)), "code_version": "",
                         "test_macro_auc": float("nan")})
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    kept, excluded = analysis.select_runs(runs)
    return analysis.build_evidence(kept, dirs, excluded=excluded)


def test_per_class_tables_name_the_data_s_classes_and_claim_no_focal_class(tmp_path):
    an = analysis.Analysis(_evidence(tmp_path), analysis.AggregateOptions(n_resamples=100,
                                                                          figures=False))
    op = operating_points_table(an)
    assert list(dict.fromkeys(op.data["class"])) == list(NAMES)  # index order, no focal first
    assert not op.data["focal"].any()
    assert not any("(focal)" in c for c in op.display["class"])
    assert any("no focal classes" in n for n in op.notes)
    assert not any("focal class" in n and "no test positives" in n for n in op.notes)
    assert focal_pr_data(an) == {}  # no "focal" precision-recall figure either
    cal = calibration_table(an)
    assert any("all 4 columns" in n for n in cal.notes)
    assert not any("14" in n for n in cal.notes)
