"""PI-TTA probes (`pipi.probes.tta`) and the `ablate` study `pi_tta`.

The batched per-image adaptation is checked against plain per-image loops (a deep copy of the
module and `torch.optim.SGD` for K steps); the study against the base run's own logged
predictions and metrics.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd

from pipi.classes import CLASSES
from pipi.probes import tta
from pipi.training.frames import PROB_COLUMNS
from pipi.workflows.ablate import run_ablation

SMOKE = {"profile": "smoke", "weights": "none", "progress": False}
def _test_preds(run_id: str, dst: Path) -> pd.DataFrame:
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(dst))
    return pd.read_parquet(Path(folder) / "test.parquet")


def test_pi_tta_study(tracking, tiny_staged, tmp_path):
    from sklearn.metrics import roc_auc_score

    # ResNet-18 (an untrained EfficientNet in eval mode is nearly input-independent)
    kw = {"study": "pi_tta", "seeds": "13", "backbones": "resnet18", "data": str(tiny_staged),
          "experiment": "pi-tta", **SMOKE}
    res = run_ablation(**kw)
    a = [c for c in res.children if c.cell == "a"]
    kids = {c.cell: c for c in res.children if "@" in c.cell}
    assert len(a) == 1 and set(kids) == {f"a@tta_{v}" for v in tta.VARIANTS}
    assert {c.status for c in res.children} <= {"trained", "reused"}
    base_run = mlflow.get_run(a[0].run_id)
    base = _test_preds(a[0].run_id, tmp_path / "base")
    base_probs = base[list(PROB_COLUMNS)].to_numpy()
    diffs = {}
    for variant in tta.VARIANTS:
        cell = f"a@tta_{variant}"
        run = mlflow.get_run(kids[cell].run_id)
        tags, m = run.data.tags, run.data.metrics
        assert tags["pipi.cell"] == cell and tags["pipi.variant"] == f"tta_{variant}"
        assert tags["pipi.study"] == "pi_tta" and tags["pipi.base_run_id"] == a[0].run_id
        assert tags["mlflow.parentRunId"] == res.parent_run_id
        assert tags["pipi.paper_variant"] == str(variant != "bn_tent").lower()
        assert run.data.params["pi_tta.steps"] == "5" and run.data.params["pi_tta.lr"] == "0.001"
        preds = _test_preds(run.info.run_id, tmp_path / variant)
        assert list(preds["path"]) == list(base["path"])
        probs = preds[list(PROB_COLUMNS)].to_numpy()
        diffs[variant] = np.abs(probs - base_probs).max()
        assert math.isclose(m["tta/max_abs_prob_diff"], diffs[variant], abs_tol=1e-7)
        # test macro-AUC recomputed from the logged predictions (one-vs-rest, sklearn)
        y = preds["label"].to_numpy()
        classes = [CLASSES.index(n) for n in json.loads(tags["pipi.evaluable_classes"])]
        aucs = [roc_auc_score(y == k, probs[:, k]) for k in classes if 0 < (y == k).sum() < len(y)]
        assert math.isclose(m["test/macro_auc"], np.mean(aucs), abs_tol=1e-6)
        if variant in tta.PAPER_VARIANTS:
            assert "by construction" in tags["pipi.tta_note"]
            assert diffs[variant] <= 1e-6                                 # identical predictions
            assert abs(m["tta/delta_test_macro_auc"]) < 1e-6
            assert math.isclose(m["tta/baseline_test_macro_auc"],
                                base_run.data.metrics["test/macro_auc"])
            assert m["tta/loss_after"] < m["tta/loss_before"]             # the module adapted
        else:
            assert "non-paper" in tags["pipi.tta_note"]
    assert diffs["bn_tent"] > 1e-6 and diffs["bn_tent"] > 20 * max(
        diffs[v] for v in tta.PAPER_VARIANTS)
    summary = mlflow.artifacts.load_text(f"runs:/{res.parent_run_id}/summary/summary.md")
    assert "a@tta_aux_sgd" in summary

    n_runs = len(mlflow.search_runs(experiment_names=["pi-tta"]))
    again = run_ablation(**kw)
    assert {c.status for c in again.children} == {"reused"}          # nothing re-evaluated
    assert sorted(c.run_id for c in again.children) == sorted(c.run_id for c in res.children)
    assert len(mlflow.search_runs(experiment_names=["pi-tta"])) == n_runs + 1   # the parent
