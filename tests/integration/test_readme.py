"""The README's commands, run as written on a fresh copy of the project (fresh PIPI_HOME,
fresh tracking store): the quick start's `make demo`, then `mlflow run . -e aggregate`."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from readme_text import code_block_after, commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
VENV = Path(sys.prefix)


def _copy_project(dst: Path) -> Path:
    """The working tree as a fresh clone would have it (tracked and untracked, not ignored)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    (dst / ".venv").symlink_to(VENV)
    # the shared .venv is installed: make must not re-install it from the copy
    stamp = VENV / ".pipi-installed"
    if stamp.exists():
        t = stamp.stat().st_mtime - 60
        os.utime(dst / "pyproject.toml", (t, t))
    return dst


@pytest.mark.slow
def test_make_demo_then_aggregate_as_written(tmp_path):
    proj = _copy_project(tmp_path / "pipi")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_", "PIPI_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not p.startswith(str(VENV)))
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env["PYTHONPATH"] = str(proj)  # the copy's code, not the checkout the venv points at

    demo = subprocess.run(["make", "demo"], cwd=proj, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "pip install" not in demo.stdout  # the installed .venv was used as is
    out = demo.stdout + demo.stderr
    assert "macro-AUC" in out and "mlflow ui" in out
    # the model is logged from code, not pickled: MLflow's CloudPickle warning never shows
    assert "CloudPickle" not in out and "cloudpickle" not in out.lower(), out[-3000:]
    assert (proj / "mlflow.db").is_file() and (proj / ".pipi").is_dir()

    # the documented form without an activated .venv: `.venv/bin/mlflow run ...`
    agg_cmd = next(c for c in commands(code_block_after(README, "## A tour"))
                   if c.startswith("mlflow run . -e aggregate"))
    base = agg_cmd.split(" [")[0].split()
    assert base == ["mlflow", "run", ".", "-e", "aggregate", "--env-manager", "local"]
    agg = subprocess.run([".venv/bin/mlflow", *base[1:], "-P", "out=report"], cwd=proj, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert agg.returncode == 0, agg.stdout[-3000:] + agg.stderr[-3000:]

    # one training run in MLflow's Default experiment (no empty wrapper run), and the
    # aggregate report was computed from it
    # read back in this process (a `python -c` here paid mlflow's import and the store's
    # opening again: seconds)
    client = MlflowClient(tracking_uri=f"sqlite:///{proj / 'mlflow.db'}")
    default = client.get_experiment_by_name("Default")
    runs = [{"id": r.info.run_id, "status": r.info.status,
             "ep": r.data.tags.get("pipi.entry_point"), "cell": r.data.tags.get("pipi.cell"),
             "n_metrics": sum(1 for v in r.data.metrics.values() if not math.isnan(v)),
             "auc": r.data.metrics.get("test/macro_auc")}
            for r in client.search_runs([default.experiment_id], max_results=50000)]
    train = [r for r in runs if r["ep"] == "train"]
    assert len(train) == 1 and train[0]["status"] == "FINISHED" and train[0]["cell"] == "pi"
    # the quick start shows a model that learned (demo profile, 2 epochs: 0.87 on the demo
    # data, docs/benchmarks.md), not chance
    assert train[0]["auc"] > 0.75, train[0]
    assert all(r["ep"] for r in runs), runs           # no run without an entry point tag
    assert all(r["n_metrics"] or r["ep"] != "train" for r in runs)
    report = json.loads((proj / "report" / "aggregate.json").read_text())
    assert [r["run_id"] for r in report["runs"]] == [train[0]["id"]]
