"""Issue 20: the paper's tables and intervals in `aggregate`'s report, on generated
predictions (no training, no server)."""

from __future__ import annotations

import pytest
from fakes import CNX, paper_evidence

from pipi import analysis
from pipi.report import build_report

SEEDS = [41, 42, 43, 44, 45, 47]


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
