"""A smoke `probe` run on each foundation backbone trains only its head and appears in the
per-frame table of `aggregate` as "frozen + linear probe" (slow: trains through MLflow)."""

from __future__ import annotations

import mlflow
import pytest

from pipi.config import make_config
from pipi.workflows import aggregate
from pipi.runs import training as runner

pytestmark = pytest.mark.slow
FOUNDATION = ("dinov2_vitb14", "biomedclip_vitb16")


def test_probe_runs_appear_in_the_per_frame_table(sqlite_tracking, tiny_staged, tmp_path):
    exp = "probe-smoke"
    runs = {}
    for backbone, cell in [("efficientnet_b0", "a"), ("efficientnet_b0", "pi"),
                           *[(b, "probe") for b in FOUNDATION]]:
        cfg = make_config(cell=cell, backbone=backbone, profile="smoke", weights="none", seed=41)
        out = runner.train(cfg, data=str(tiny_staged), experiment=exp, progress=False,
                           register=False)
        runs[backbone, cell] = out
    res = aggregate.run_aggregate(experiment=exp, out=tmp_path / "report", log_run=False,
                                  options=aggregate.AggregateOptions(n_resamples=50,
                                                                     figures=False))
    t = res.report.table("per_frame")
    probes = t.data[t.data["cell"] == "probe"].set_index("backbone")
    assert set(probes.index) == set(FOUNDATION)
    shown = t.display["Configuration"].tolist()
    assert sum("frozen + linear probe" in s for s in shown) == 2
    for b in FOUNDATION:
        assert probes.loc[b, "mean"] == pytest.approx(runs[b, "probe"].test_macro_auc,
                                                      abs=1e-6)
        assert probes.loc[b, "n_paired_vs_pi"] == 1
    run = mlflow.tracking.MlflowClient().get_run(runs["dinov2_vitb14", "probe"].run_id)
    assert run.data.params["cell"] == "probe" and run.data.params["backbone"] == "dinov2_vitb14"
