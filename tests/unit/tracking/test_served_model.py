"""The registered model as MLflow stores it (issue 30): logged from code, shipping only the
modules inference imports, with requirements pinned as the install pins them, named, described
and linked (params, tags, test metrics, split datasets, input schema)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.exceptions import MlflowException

from pipi.config import TrainConfig
from pipi.errors import ConfigError
from pipi.serving.code import copy_closure, module_closure, third_party
from pipi.serving.frame_model import build_frame_model
from pipi.serving.model_input import encode_png
from pipi.tracking.datasets import log_split_datasets
from pipi.tracking.runs import run_of
from pipi.tracking.logged_model import (
    SERVED_MODEL,
    log_frame_model,
    name_part,
    registered_name,
    serving_requirements,
)
from pipi.tracking.tags import TAG_BACKBONE, TAG_RECIPE

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
from mlflow.pyfunc import scoring_server
from starlette.requests import Request
print(json.dumps({"pipi": pipi.__file__, "modules": sorted(k for k, v in sys.modules.items() if v is not None),
                  "probs": out.iloc[:, :14].to_numpy().tolist(),
                  "server": [scoring_server.invocations.__module__, Request.body.__module__]}))
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
    env["__pyfunc_model_path__"] = str(tmp_path)  # as in `mlflow models serve`'s process
    r = subprocess.run([sys.executable, "-c", _PROBE, str(SERVED_MODEL), json.dumps(arts)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(got["pipi"]).is_relative_to(code)
    # the model leaves MLflow's scoring server as it is (the limits are pipi serve's)
    assert got["server"] == ["mlflow.pyfunc.scoring_server", "starlette.requests"]
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
    # tqdm only builds the training cache (imported inside that function, never when serving)
    assert third_party(SERVED_MODEL) - {"tqdm"} <= provided
    assert "starlette" not in third_party(SERVED_MODEL)  # the model patches no server
    assert "timm" not in names and "tqdm" not in names
    assert any(r.startswith("timm==") for r in serving_requirements("timm:resnet10t"))


#: What a spawned process evaluates: it imports a module outside the served closure.
CHILD_IMPORT = "__import__('importlib').import_module('pipi.data.staging.kvasir').__name__"


def test_a_logged_model_is_code_not_a_pickle_and_explains_itself(tmp_path, sqlite_tracking,
                                                                  monkeypatch):
    """Logged from code; named <prefix>-<backbone>-<cell> with params, tags and test metrics
    linked to it and to the test split's dataset; an input schema (base64 ``image`` or array
    ``pixels``) that the input example satisfies and MLflow enforces."""
    monkeypatch.chdir(tmp_path)  # the store's artifacts (./mlruns) stay in the test's folder
    cfg, model = _tiny_model(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    frames = pd.DataFrame({"split": ["train", "train", "val", "test"], "frame": [1, 2, 3, 4]})
    with warnings.catch_warnings(record=True) as caught, mlflow.start_run() as run:
        warnings.simplefilter("always")
        handle = run_of(run.info.run_id)
        refs = log_split_datasets(handle, frames, source=str(tmp_path), name="tiny",
                                  digest="d" * 64)
        out = log_frame_model(handle, cfg, model, work, test_auc=0.5, register=False,
                              tags={TAG_RECIPE: "pipi train --cell pi"},
                              test_metrics={"test/macro_auc": 0.625}, test_dataset=refs["test"])
    assert not [w for w in caught if "CloudPickle" in str(w.message)]
    local = Path(mlflow.artifacts.download_artifacts(out["model_uri"], dst_path=str(tmp_path)))
    mlmodel = (local / "MLmodel").read_text()
    assert "loader_module: mlflow.pyfunc.loaders.code_model" in mlmodel
    assert not list(local.rglob("*.pkl"))
    shipped = {str(p.relative_to(local / "code")) for p in (local / "code").rglob("*.py")}
    assert shipped == {str(f.relative_to(SERVED_MODEL.parents[2]))
                       for f in module_closure(SERVED_MODEL).values()}
    assert (local / "requirements.txt").read_text().split() == serving_requirements("resnet18")
    # what the Models tab lists
    lm = mlflow.get_logged_model(out["model_id"])
    assert lm.name == "pipi-resnet18-pi"
    assert lm.params["cell"] == "pi" and lm.params["image_size"] == "32"
    assert lm.tags[TAG_BACKBONE] == "resnet18" and lm.tags[TAG_RECIPE] == "pipi train --cell pi"
    [metric] = lm.metrics
    assert (metric.key, metric.value) == ("test/macro_auc", 0.625)
    assert (metric.dataset_name, metric.dataset_digest) == (refs["test"].name, refs["test"].digest)
    inputs = mlflow.get_run(run.info.run_id).inputs.dataset_inputs
    contexts = {i.dataset.name: next(t.value for t in i.tags if t.key == "mlflow.data.context")
                for i in inputs}
    assert contexts == {"tiny-train": "training", "tiny-val": "validation",
                        "tiny-test": "testing"}
    # the input schema, its example, and what MLflow accepts under it
    from mlflow.types import DataType
    from mlflow.types.schema import AnyType

    schema = mlflow.models.get_model_info(out["model_uri"]).signature.inputs
    image, pixels = schema.inputs
    assert (image.name, image.type, image.required) == ("image", DataType.string, False)
    assert (pixels.name, isinstance(pixels.type, AnyType), pixels.required) == \
        ("pixels", True, False)
    m = mlflow.pyfunc.load_model(out["model_uri"])
    example = mlflow.models.Model.load(local).load_input_example(local)
    assert list(example.columns) == ["image"]
    assert len(m.predict(example)) == len(example)              # the example passes the schema
    imgs = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    a = m.predict(pd.DataFrame({"image": [encode_png(i) for i in imgs]}))
    b = m.predict(pd.DataFrame({"pixels": list(imgs)}))
    c = m.predict({"pixels": [i.tolist() for i in imgs]})
    for other in (b, c):
        np.testing.assert_allclose(other.iloc[:, :14].to_numpy(float),
                                   a.iloc[:, :14].to_numpy(float), atol=1e-6)
    with pytest.raises(MlflowException):
        m.predict(imgs)                      # a bare array names no column of the schema
    # loading it left no partial copy of pipi in front of sys.path: a process spawned now
    # imports the whole package (pipi.data.staging.kvasir is not in the served closure)
    import multiprocessing
    import sys

    import pipi
    home = Path(pipi.__file__).resolve().parent.parent
    assert not [p for p in sys.path if Path(p or ".").joinpath("pipi", "__init__.py").is_file()
                and Path(p or ".").resolve() != home]
    # (the child runs a builtin: a function of this module would make it import this module,
    # torch and mlflow included, before it could run)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(eval, (CHILD_IMPORT,)) == "pipi.data.staging.kvasir"


def test_registered_names_are_valid_mlflow_names_and_keep_the_original_as_a_tag():
    from mlflow.utils.validation import _validate_model_name

    cfg = TrainConfig(cell="pi", backbone="timm:resnet10t")
    assert registered_name(cfg) == "pipi-timm-resnet10t-pi"
    _validate_model_name(registered_name(cfg))
    assert name_part("timm:hf-hub:org/model", what="backbone") == "timm-hf-hub-org-model"
    assert name_part("pi@zero_phi", what="cell") == "pi-zero_phi"
    with pytest.raises(ConfigError, match="backbone=':/'"):
        name_part(":/", what="backbone")


@pytest.mark.parametrize("entry", [SERVED_MODEL])
def test_the_closure_follows_imports_inside_functions_and_package_inits(entry):
    mods = module_closure(entry)
    assert "pipi" in mods and "pipi.models" in mods           # package __init__ files
    assert "pipi.serving.predictors" in mods and "pipi.prior" in mods
    assert not [m for m in mods if m.startswith(("pipi.training", "pipi.tracking"))]
