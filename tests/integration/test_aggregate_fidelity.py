"""`aggregate` fidelity (issue 9: headline classes, recipes, statistics, missing tables) and bad
`out` folders and FAILED runs (issue 10), on generated predictions, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fakes import QUALITY, make_frames, write_run

from pipi import analysis
from pipi.classes import CLASSES
from pipi.errors import ConfigError, DataError
from pipi.workflows import aggregate as workflow

B0 = "efficientnet_b0"
PAPER = {"select_metric": "macro_auc", "alpha": "4.0", "epochs": "30", "lr": "0.001"}


def recipe(cell, seed, **params):
    opts = {"cell": cell, "seed": seed, "backbone": B0, "profile": "paper", **params}
    return "mlflow run . -e train --env-manager local " + " ".join(
        f"-P {k}={v}" for k, v in opts.items() if k in ("cell", "seed", "backbone", "profile")
        or PAPER.get(k) != v)


def make_runs(tmp: Path, arms: dict, *, test=None, val=None, tags: str = "test", start=0,
              extra: dict | None = None):
    """(runs frame as load_runs returns it, run id -> predictions folder).

    arms: cell -> seeds. ``tags``: "test" (pipi.test_classes and pipi.val_classes),
    "evaluable" (only the older pipi.evaluable_classes = val and test classes), "none".
    ``extra``: (cell, seed) -> column overrides (params, recipe, status, ...).
    """
    test = make_frames(7, 60, 0) if test is None else test
    val = make_frames(3, 40, 1, split="val") if val is None else val
    test_names = [CLASSES[k] for k in sorted(set(test["class_index"]))]
    val_names = [CLASSES[k] for k in sorted(set(val["class_index"]))]
    rows, dirs = [], {}
    for ci, (cell, seeds) in enumerate(arms.items()):
        for s in seeds:
            rid = f"{cell}{s}{start}".replace("_", "").replace("@", "")[:32].ljust(32, "0")
            dirs[rid] = write_run(tmp / rid / "predictions", test, val,
                                  QUALITY.get(cell.split("@")[0], 1.1), 1000 * ci + s)
            row = {"run_id": rid, "experiment_id": "1", "run_name": rid, "status": "FINISHED",
                   "start_time": start + 1000 * ci + s, "entry_point": "train", "cell": cell,
                   "backbone": B0, "seed": s, "data_digest": "d" * 64,
                   "dataset": "kvasir-capsule", "study": "", "variant": "", "base_run_id": "",
                   "parent_run_id": "", "code_version": "", "test_macro_auc": float("nan"),
                   "evaluable_classes": "", "test_classes": "", "val_classes": "",
                   "recipe": recipe(cell, s), "recipe_hash": "", "failure_reason": "",
                   "params": json.dumps({**PAPER, "cell": cell, "seed": str(s)})}
            if tags == "test":
                row |= {"test_classes": json.dumps(test_names),
                        "val_classes": json.dumps(val_names)}
            elif tags == "evaluable":
                row["evaluable_classes"] = json.dumps(sorted(set(test_names) & set(val_names)))
            row |= (extra or {}).get((cell, s), {})
            rows.append(row)
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs


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
