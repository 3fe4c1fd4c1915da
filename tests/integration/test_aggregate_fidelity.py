"""`aggregate` fidelity (issue 9: headline classes, recipes, statistics, missing tables) and bad
`out` folders and FAILED runs (issue 10), on generated predictions, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fakes import make_runs

from pipi import analysis
from pipi.errors import ConfigError, DataError
from pipi.workflows import aggregate as workflow


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """run_aggregate against generated runs: the tracking reads replaced, no server, no run."""
    runs, dirs = make_runs(tmp_path / "runs", {"a": [41, 42], "pi": [41, 42]})
    from pipi import tracking

    calls = []
    monkeypatch.setattr(tracking, "load_runs", lambda *a, **k: calls.append(a) or runs)
    monkeypatch.setattr(tracking, "has_artifact", lambda *a: True)
    monkeypatch.setattr(tracking, "download_predictions", lambda rid, cache: dirs[rid])
    monkeypatch.setattr(tracking, "current_tracking_uri", lambda: "sqlite:///x.db")

    def run(out, **kw):
        return workflow.run_aggregate(experiment="exp", out=out, log_run=False,
                                      options=analysis.AggregateOptions(n_resamples=20,
                                                                        figures=False), **kw)
    return run, calls


def test_out_is_checked_before_anything_is_read(offline, tmp_path):
    run, calls = offline
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("my work")
    with pytest.raises(ConfigError) as err:
        run(user)
    assert str(user) in str(err.value) and "not a previous pipi report" in str(err.value)
    assert "\n" not in str(err.value) and calls == []
    assert [p.name for p in user.iterdir()] == ["thesis.tex"]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        run(tmp_path / "afile")
    with pytest.raises(ConfigError, match=r"out=/proc/pipi-x: cannot write there"):
        run(Path("/proc/pipi-x"))
    with pytest.raises(ConfigError, match="resample must be one of"):
        run(tmp_path / "new", resample="patients")
    assert calls == [] and not (tmp_path / "new").exists()


def test_a_previous_report_is_replaced_and_other_files_are_kept(offline, tmp_path):
    run, calls = offline
    out = tmp_path / "report"
    res = run(out)
    marker = json.loads((out / workflow.MARKER).read_text())
    assert res.out == out and "report.md" in marker["files"] and len(calls) == 1
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / "stale.png").write_bytes(b"old")   # a file of the previous report
    marker["files"].append("figures/stale.png")
    (out / workflow.MARKER).write_text(json.dumps(marker))
    (out / "notes.txt").write_text("mine")
    run(out, resample="frame")
    assert (out / "notes.txt").read_text() == "mine" and not (out / "figures" / "stale.png").exists()
    doc = json.loads((out / "aggregate.json").read_text())
    assert doc["resample"] == "frame"
    (out / "tables" / "pi_tta.md").write_text("mine")   # a user's file of the same name:
    marker = json.loads((out / workflow.MARKER).read_text())
    marker["files"].remove("tables/pi_tta.md")           # not one the previous report wrote
    (out / workflow.MARKER).write_text(json.dumps(marker))
    with pytest.raises(ConfigError, match=r"refusing to overwrite \['tables/pi_tta.md'\]"):
        run(out)
    assert (out / "tables" / "pi_tta.md").read_text() == "mine"


def test_a_failed_aggregate_leaves_no_empty_out_folder(offline, tmp_path, monkeypatch):
    run, _ = offline
    from pipi import tracking

    monkeypatch.setattr(tracking, "load_runs", lambda *a, **k: pd.DataFrame(
        columns=["run_id", "status", "cell", "entry_point", "backbone", "seed", "start_time"]))
    with pytest.raises(DataError, match="no FINISHED model runs"):
        run(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()
