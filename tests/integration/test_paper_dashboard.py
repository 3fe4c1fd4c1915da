"""Issue 20: the paper's tables and intervals in `aggregate`'s report, on generated
predictions (no training, no server)."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import B0, make_runs

from pipi import analysis
from pipi.report import build_report

SEEDS = [41, 42, 43, 44, 45, 47]


CNX = "convnext_tiny"


def _png_bytes(color: str) -> bytes:
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 2))
    fig.add_subplot(1, 1, 1).imshow(np.full((4, 4, 3), 0.5), cmap=None)
    fig.suptitle(color)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def paper_evidence(tmp):
    """Six seeds of the per-frame, channel, transplant arms (B0) and the channel arms of
    ConvNeXt-Tiny; one FINISHED Grad-CAM run with its two example images."""
    import pandas as pd

    arms = {c: SEEDS for c in ("a", "pi", "distill", "pblood_only", "phi_only", "pi@zero_both",
                               "a@transplant_D", "a@transplant_bn")}
    runs, dirs = make_runs(tmp / "b0", arms)
    cnx, cdirs = make_runs(tmp / "cnx", {c: SEEDS for c in ("a", "pi", "pblood_only")}, start=7)
    cnx["backbone"] = CNX
    cnx["recipe"] = cnx["recipe"].str.replace(B0, CNX)
    runs = pd.concat([runs, cnx], ignore_index=True)
    dirs |= cdirs
    a_runs = runs[(runs["cell"] == "a") & (runs["backbone"] == B0)].set_index("seed")["run_id"]
    pi_runs = runs[(runs["cell"] == "pi") & (runs["backbone"] == B0)].set_index("seed")["run_id"]
    for cell, study, base in (("a@transplant_D", "transplant", a_runs),
                              ("a@transplant_bn", "transplant", a_runs),
                              ("pi@zero_both", "channel_infer", pi_runs)):
        sel = runs["cell"] == cell
        runs.loc[sel, "study"] = study
        runs.loc[sel, "variant"] = cell.split("@")[1]
        runs.loc[sel, "base_run_id"] = runs.loc[sel, "seed"].map(base)
    runs["seed"] = runs["seed"].astype("Int64")
    gc = runs.iloc[[0]].copy()
    gc["run_id"], gc["study"], gc["variant"] = "g" * 32, "gradcam", "gradcam"
    gc["entry_point"], gc["cell"] = "transplant", "a@gradcam"
    all_runs = pd.concat([runs, gc], ignore_index=True)
    kept, excluded = analysis.select_runs(runs)
    ev = analysis.build_evidence(kept, {r: dirs[r] for r in kept["run_id"]}, excluded=excluded,
                                 all_runs=all_runs, experiment="exp", experiment_id="1")
    images = {"g" * 32: {"gradcam/overlay.png": _png_bytes("overlay"),
                         "gradcam/prior.png": _png_bytes("prior")}}
    from dataclasses import replace
    return replace(ev, images=images)


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    ev = paper_evidence(tmp_path_factory.mktemp("paper"))
    return ev, build_report(ev, analysis.AggregateOptions(n_resamples=100))


def test_dashboard_in_chromium_shows_the_new_tables_and_figures(paper, tmp_path):
    from test_dashboard import CHROMIUM, open_in_chromium

    from pipi.workflows import aggregate as workflow
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed")
    _, rep = paper
    out = workflow.write_report(rep, tmp_path / "out", aggregate_run_id="f" * 32)
    dom, console = open_in_chromium(out / "dashboard.html", tmp_path)
    assert dom.body.get("data-selfcheck") == "ok", console
    assert {"deployment_options", "calibration_per_class", f"channel_train_{CNX}",
            "per_frame"} <= set(dom.tables)
    alts = {i.get("alt") for i in dom.images}
    assert {"pr_focal", "mechanism_localization", "transplant_reconstruction",
            "prior_examples", "gradcam_examples"} <= alts
    html = (out / "dashboard.html").read_text()
    assert "95% BCa CI (seeds)" in html and "Erosion" in html
