"""The paper's limitation experiment as cells (issue 42 item 3): C1 summaries + C2 on a frozen
ImageNet backbone (``c1_frozen``) against C2 alone (``b_frozen``), a study preset on ResNet-50
with torchvision's DEFAULT ImageNet weights (V2 for ResNet-50), and aggregate's row."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import local_runs
from sklearn.metrics import roc_auc_score

from pipi import analysis
from pipi.cells import get_cell
from pipi.models.backbones import imagenet_weights
from pipi.report import build_report
from pipi.sweeps.plan import get_study

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("test_limitation")]


def test_the_cells_the_study_and_the_weights():
    c1, b = get_cell("c1_frozen"), get_cell("b_frozen")
    assert (c1.base_cell, c1.c1, c1.temporal) == ("probe", "c8", True)
    assert (b.base_cell, b.c1, b.temporal) == ("probe", None, True)
    assert get_cell("probe").frozen
    st = get_study("limitation")
    assert st.cells == ("b_frozen", "c1_frozen") and st.backbones == ("resnet50",)
    assert str(imagenet_weights("resnet50")) == "ResNet50_Weights.IMAGENET1K_V2"
    assert str(imagenet_weights("efficientnet_b0")) == "EfficientNet_B0_Weights.IMAGENET1K_V1"


def test_aggregate_prints_the_limitation_row(tmp_path):
    runs, dirs = local_runs(tmp_path, {"b_frozen": [41, 42, 43], "c1_frozen": [41, 42, 43]},
                            backbone="resnet50")
    kept, excluded = analysis.select_runs(runs)
    ev = analysis.build_evidence(kept, dirs, excluded=excluded, experiment="e",
                                 experiment_id="1", tracking_uri="http://127.0.0.1:5000")
    rep = build_report(ev, analysis.AggregateOptions(n_resamples=100, figures=False))
    t = rep.table("limitation")
    (row,) = t.data.to_dict("records")
    assert row["backbone"] == "resnet50"
    b, c = ev.arm("resnet50", "b_frozen"), ev.arm("resnet50", "c1_frozen")

    def macro(arm, i):
        y, p = ev.labels, arm.probs[i]
        return np.mean([roc_auc_score(y == k, p[:, k]) for k in ev.classes])

    want = np.mean([macro(c, c.index(s)) - macro(b, b.index(s)) for s in (41, 42, 43)])
    assert row["delta"] == pytest.approx(want, abs=1e-9)
    assert "Δ" in t.display.columns and t.display["Δ"].iloc[0]
