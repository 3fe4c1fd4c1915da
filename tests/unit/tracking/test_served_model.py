"""The registered model as MLflow stores it (issue 30): logged from code, shipping only the
modules inference imports, with requirements pinned as the install pins them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from pipi.config import TrainConfig
from pipi.serving.code import copy_closure, module_closure, third_party
from pipi.serving.frame_model import build_frame_model
from pipi.tracking.logged_model import SERVED_MODEL, log_frame_model, serving_requirements

#: What the served model must never import: the training loop, the CLI, the workflows, the
#: tracking layer (its server included) and tqdm.
FORBIDDEN = ("tqdm", "pipi.training", "pipi.cli", "pipi.workflows", "pipi.tracking",
             "pipi.runs", "pipi.sweeps", "pipi.report", "pipi.stats", "sklearn")

#: torch and mlflow import tqdm when it is installed (and go on without it): the probe hides it,
#: as the model's own environment (its requirements) does not install it.
_PROBE = """
import json, runpy, sys
sys.modules["tqdm"] = sys.modules["sklearn"] = None    # `import tqdm` raises ImportError
import numpy as np
runpy.run_path(sys.argv[1])                    # what MLflow does with the model's code file
import mlflow.models.model as mm
model = mm.__mlflow_model__                   # the object set_model registered
class Ctx:
    artifacts = json.loads(sys.argv[2])
model.load_context(Ctx())
imgs = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
out = model.predict(None, imgs)
import pipi
print(json.dumps({"pipi": pipi.__file__, "modules": sorted(k for k, v in sys.modules.items() if v is not None),
                  "probs": out.iloc[:, :14].to_numpy().tolist()}))
"""


def _tiny_model(tmp_path: Path, backbone: str = "resnet18"):
    cfg = TrainConfig(cell="pi", backbone=backbone, image_size=32, weights="none")
    torch.manual_seed(0)
    model = build_frame_model(cfg).eval()
    (tmp_path / "model_config.json").write_text(json.dumps(cfg.to_dict()))
    torch.save(model.state_dict(), tmp_path / "model_state.pt")
    return cfg, model


def test_the_served_code_runs_from_its_own_copy_without_training_cli_or_tqdm(tmp_path):
    """Only the copied closure on the path (not the worktree, not the installed pipi): the
    model's code file loads, predicts, and leaves no forbidden module imported."""
    cfg, model = _tiny_model(tmp_path)
    code = copy_closure(SERVED_MODEL, tmp_path / "code")
    assert not (code / "training").exists() and not (code / "cli").exists()
    assert not (code / "workflows").exists() and not (code / "tracking").exists()
    arts = {"config": str(tmp_path / "model_config.json"),
            "weights": str(tmp_path / "model_state.pt")}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "code")
    r = subprocess.run([sys.executable, "-c", _PROBE, str(SERVED_MODEL), json.dumps(arts)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(got["pipi"]).is_relative_to(code)
    bad = [m for m in got["modules"] if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, bad
    pipi_loaded = {m for m in got["modules"] if m == "pipi" or m.startswith("pipi.")}
    assert pipi_loaded <= set(module_closure(SERVED_MODEL))
    # the same probabilities as the network applied here
    from pipi.serving.frame_model import FrameInputs
    from pipi.serving.predictors import preprocess

    imgs = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    with torch.no_grad():
        ref = torch.softmax(model(FrameInputs(cfg)(preprocess(list(imgs), 32),
                                                   train=False)[0]), 1).numpy()
    np.testing.assert_allclose(np.array(got["probs"]), ref, atol=1e-6)


def test_requirements_pin_what_the_served_code_imports_as_the_install_does():
    reqs = serving_requirements("resnet18")
    assert reqs[0].startswith("torch===") and "+" not in reqs[0]          # not a local +cpu
    assert any(r.startswith("torchvision==") for r in reqs)
    names = {r.split("=")[0] for r in reqs}
    import_name = {"pillow": "PIL"}
    provided = {import_name.get(n, n) for n in names}
    # starlette comes with mlflow (its scoring server); tqdm only builds the training cache
    # (imported inside that function, never when serving)
    assert third_party(SERVED_MODEL) - {"starlette", "tqdm"} <= provided
    assert "timm" not in names and "tqdm" not in names
    assert any(r.startswith("timm==") for r in serving_requirements("timm:resnet10t"))


def test_a_logged_model_is_code_not_a_pickle(tmp_path, sqlite_tracking, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the store's artifacts (./mlruns) stay in the test's folder
    cfg, model = _tiny_model(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with warnings.catch_warnings(record=True) as caught, mlflow.start_run():
        warnings.simplefilter("always")
        out = log_frame_model(cfg, model, work, test_auc=0.5, register=False, tags={})
    assert not [w for w in caught if "CloudPickle" in str(w.message)]
    local = Path(mlflow.artifacts.download_artifacts(out["model_uri"], dst_path=str(tmp_path)))
    mlmodel = (local / "MLmodel").read_text()
    assert "loader_module: mlflow.pyfunc.loaders.code_model" in mlmodel
    assert not list(local.rglob("*.pkl"))
    shipped = {str(p.relative_to(local / "code")) for p in (local / "code").rglob("*.py")}
    assert shipped == {str(f.relative_to(SERVED_MODEL.parents[2]))
                       for f in module_closure(SERVED_MODEL).values()}
    assert (local / "requirements.txt").read_text().split() == serving_requirements("resnet18")


@pytest.mark.parametrize("entry", [SERVED_MODEL])
def test_the_closure_follows_imports_inside_functions_and_package_inits(entry):
    mods = module_closure(entry)
    assert "pipi" in mods and "pipi.models" in mods           # package __init__ files
    assert "pipi.serving.predictors" in mods and "pipi.prior" in mods
    assert not [m for m in mods if m.startswith(("pipi.training", "pipi.tracking"))]
