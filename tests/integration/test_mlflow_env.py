"""`mlflow run` in MLflow's own environment (issue 30): on a fresh clone with no `.venv`,
`mlflow run . -e train --env-manager uv` builds the environment python_env.yaml describes
(pyenv's Python 3.11.7, the pinned requirements, not pipi) with uv and trains in it.
`uv` comes from the test's `.venv` (the `test` extra), as a user's comes from their PATH;
virtualenv, MLflow's default, is built by test_serve.py's own-environment test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)

# one xdist group with test_serve's uv case (59 + 59 s), the virtualenv serve case (166 s)
# on the other worker: xdist gives the first worker a second group when there are three
pytestmark = [pytest.mark.slow, pytest.mark.envbuild, pytest.mark.xdist_group("envs-uv")]


def _fresh_clone(dst: Path) -> Path:
    """The working tree as a fresh clone has it (tracked and untracked files, no .venv)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(".venv"):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_bytes(src.read_bytes())
    assert not (dst / ".venv").exists()
    return dst


def test_mlflow_run_train_in_its_own_uv_environment_on_a_fresh_clone(tmp_path):
    proj = _fresh_clone(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_", "PIPI_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # only the `mlflow` launcher and `uv` come from the test's environment; pyenv stays on PATH
    # (uv takes its Python 3.11.7 from there and never downloads one)
    uv_bin = tmp_path / "uv-bin"
    uv_bin.mkdir()
    (uv_bin / "uv").symlink_to(VENV / "bin" / "uv")
    env["PATH"] = os.pathsep.join([str(uv_bin)] + [p for p in env["PATH"].split(os.pathsep)
                                                   if not p.startswith(str(VENV))])
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PIPI_HOME=str(tmp_path / "home"),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
               # an env root of its own: MLflow names a uv environment as it names a
               # virtualenv one, and would reuse a pip-built one (uv's cache keeps it quick)
               MLFLOW_ENV_ROOT=str(tmp_path / "envs"), UV_PYTHON_DOWNLOADS="never")
    t0 = time.monotonic()
    r = subprocess.run([str(VENV / "bin" / "mlflow"), "run", ".", "-e", "train",
                        "--env-manager", "uv", "-P", "cell=a", "-P", "profile=smoke",
                        "-P", "weights=none"],
                       cwd=proj, env=env, capture_output=True, text=True, timeout=3000,
                       check=False)
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    print(f"\nmlflow run -e train --env-manager uv: {took:.0f} s "
          f"({'environment built' if 'Installing dependencies' in out else 'environment reused'})")
    check = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", (
            "import json, mlflow\n"
            "runs = mlflow.search_runs(search_all_experiments=True)\n"
            "print(json.dumps([{k: r.get(k) for k in ('status', 'tags.pipi.entry_point', "
            "'tags.mlflow.project.env', 'params.cell', 'tags.pipi.cell')} "
            "for _, r in runs.iterrows()]))\n")],
        env={**os.environ, "MLFLOW_TRACKING_URI": env["MLFLOW_TRACKING_URI"]},
        capture_output=True, text=True, timeout=300, check=False)
    assert check.returncode == 0, check.stderr[-2000:]
    runs = json.loads(check.stdout.strip().splitlines()[-1])
    train = [x for x in runs if x["tags.pipi.entry_point"] == "train"]
    assert len(train) == 1 and train[0]["status"] == "FINISHED", runs
    assert train[0]["tags.mlflow.project.env"] == "uv"
    assert train[0]["tags.pipi.cell"] == "a"
    # the environment MLflow built: pyenv's 3.11.7, the registry's torch, and no pipi in it
    assert "using uv" in out and "Installing dependencies" in out, out[-3000:]
    built = next(Path(env["MLFLOW_ENV_ROOT"]).glob("mlflow-*/bin/python"))
    probe = subprocess.run(
        [str(built), "-c", ("import sys, importlib.util as u, torch; print(sys.version.split()[0],"
                            " torch.__version__, u.find_spec('pipi') is None)")],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"})
    assert probe.returncode == 0, probe.stderr[-2000:]
    python, torch_version, no_pipi = probe.stdout.split()
    # the index's standard build (a CUDA one, `2.13.0+cu130` here), never the local `+cpu`
    assert python == "3.11.7" and no_pipi == "True"
    assert torch_version.split("+")[0] == "2.13.0" and not torch_version.endswith("+cpu")
