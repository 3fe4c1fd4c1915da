"""A per-frame model as the registry holds it: the pyfunc, its version tags and alias.

The pyfunc is logged from code (``pipi/tracking/pyfunc.py``, MLflow's models-from-code: nothing
pickled); its ``code_paths`` hold only the pipi modules that file imports
(:func:`pipi.serving.code.copy_closure`: serving, models, prior, config..., no training, CLI,
workflows or tracking server) and its requirements are what they import, pinned as the install
pins them (:func:`serving_requirements`), so ``mlflow models serve --env-manager virtualenv``
builds an environment that loads it.

``train`` logs every per-frame run's model here, and ``import`` logs an outside checkpoint
the same way, so ``galar``, ``robustness``, ``transplant`` and ``promote`` load either one
through the same files (``model/artifacts/{model_state.pt,model_config.json}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi.classes import CLASSES
from pipi.config import TrainConfig, recipe_command
from pipi.models.timm_backbones import is_timm_arch
from pipi.serving.code import copy_closure
from pipi.serving.frame_model import FrameInputs
from pipi.serving.model_input import encode_png
from pipi.serving.predictors import PARAMS, preprocess
from pipi.tracking.permissions import model_prefix
from pipi.tracking.registry import log_pyfunc_model, registered_version_of, tag_model_version
from pipi.tracking.runs import active_run_id
from pipi.tracking.store import code_version
from pipi.tracking.tags import TAG_DATA_DIGEST, TAG_RECIPE, TAG_RECIPE_HASH

__all__ = ["SERVED_MODEL", "example_images", "log_and_register", "log_frame_model",
           "registered_name", "serving_requirements"]

#: The file MLflow runs to load a registered model (models-from-code).
SERVED_MODEL = Path(__file__).with_name("pyfunc.py")
#: Distributions the served code imports (pipi.serving.code.third_party), pinned to the
#: installed versions; torch as `===`, which skips a local `+cpu` build that cannot load the
#: registry's torchvision (README "Install notes").
SERVING_DISTS = ("torch", "torchvision", "mlflow", "numpy", "pandas", "pillow", "scipy")


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist).split("+")[0]


def serving_requirements(backbone: str) -> list[str]:
    """The pip requirements of a registered model with this backbone (timm only for a
    ``timm:`` backbone)."""
    dists = SERVING_DISTS + (("timm",) if is_timm_arch(backbone) else ())
    return [f"{d}{'===' if d == 'torch' else '=='}{_version(d)}" for d in dists]


def registered_name(cfg: TrainConfig) -> str:
    """The registered model of a (backbone, cell) family: ``<prefix>-<backbone>-<cell>``,
    the prefix ``pipi`` unless ``PIPI_MODEL_PREFIX`` (``--model-prefix``) says otherwise."""
    return f"{model_prefix()}-{cfg.backbone}-{cfg.cell}"


def example_images(cfg: TrainConfig, *, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return list(rng.integers(0, 256, (n, cfg.image_size, cfg.image_size, 3), dtype=np.uint8))


def log_frame_model(cfg: TrainConfig, model, work: Path, *, test_auc: float, register: bool,
                    tags: Mapping[str, str], version_tags: Mapping[str, str] | None = None
                    ) -> dict:
    """Log a per-frame model as the pyfunc of the active run (and register it)."""
    wpath = work / "model_state.pt"
    torch.save(model.state_dict(), wpath)
    cpath = work / "model_config.json"
    cpath.write_text(json.dumps(cfg.to_dict(), indent=2))
    images = example_images(cfg, n=2)
    # the output example is computed by the real model, so the signature is exact
    model.eval()
    with torch.no_grad():
        if hasattr(model, "deploy_mode"):
            model.deploy_mode = True
        x, _ = FrameInputs(cfg)(preprocess(images, cfg.image_size), train=False)
        probs = torch.softmax(model(x), 1).numpy().astype(np.float64)
    out_example = pd.DataFrame(probs, columns=list(CLASSES))
    out_example["predicted_class"] = [CLASSES[i] for i in probs.argmax(1)]
    # the serving example shows the base64 form a client sends without numpy (PNG: lossless)
    example = pd.DataFrame({"image": [encode_png(im) for im in images]})
    return log_and_register(cfg, {"weights": str(wpath), "config": str(cpath)}, example,
                            out_example, test_auc, register, tags, params=PARAMS,
                            extra=dict(version_tags or {}), work=work)


def log_and_register(cfg: TrainConfig, artifacts: dict, example, out_example,
                     test_auc: float, register: bool, tags: Mapping[str, str], *, params,
                     extra: dict, work: Path) -> dict:
    """Log the pyfunc; register it as :func:`registered_name` with version tags and the
    ``candidate`` alias."""
    run_id = active_run_id()
    name = registered_name(cfg) if register else None
    code = copy_closure(SERVED_MODEL, work / "served_code")
    info = log_pyfunc_model(
        python_model=SERVED_MODEL, artifacts=artifacts, input_example=example,
        registered_model_name=name, signature_output=out_example, params=params,
        code_paths=[code], pip_requirements=serving_requirements(cfg.backbone),
    )
    result = {"model_uri": info.model_uri, "registered": None}
    if name:
        version = registered_version_of(info, name)
        tag_model_version(
            name, version,
            {"run_id": run_id, "test_macro_auc": f"{test_auc:.6f}",
             "recipe": tags.get(TAG_RECIPE, recipe_command(cfg)),
             "recipe_hash": tags.get(TAG_RECIPE_HASH, ""),
             "data_digest": tags.get(TAG_DATA_DIGEST, ""),
             "git_commit": code_version(), "cell": cfg.cell,
             "backbone": cfg.backbone, "seed": cfg.seed, **extra},
            alias="candidate",
        )
        result["registered"] = f"models:/{name}/{version}"
        result["registered_name"] = name
        result["registered_version"] = version
    return result
