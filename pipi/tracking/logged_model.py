"""A per-frame model as the registry holds it: the pyfunc, its version tags and alias.

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
from pipi.serving.model_input import encode_png
from pipi.tracking.permissions import model_prefix
from pipi.tracking.pyfunc import PARAMS, PipiImageClassifier, preprocess
from pipi.tracking.registry import log_pyfunc_model, register_version, run_version, set_aliases
from pipi.tracking.runs import active_run_id
from pipi.tracking.store import code_version
from pipi.tracking.tags import TAG_DATA_DIGEST, TAG_RECIPE, TAG_RECIPE_HASH
from pipi.training.frames import FrameInputs

__all__ = ["example_images", "log_and_register", "log_frame_model", "registered_name"]


def registered_name(cfg: TrainConfig) -> str:
    """The registered model of a (backbone, cell) family: ``<prefix>-<backbone>-<cell>``,
    the prefix ``pipi`` unless ``PIPI_MODEL_PREFIX`` (``--model-prefix``) says otherwise."""
    return f"{model_prefix()}-{cfg.backbone}-{cfg.cell}"


def example_images(cfg: TrainConfig, *, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return list(rng.integers(0, 256, (n, cfg.image_size, cfg.image_size, 3), dtype=np.uint8))


def log_frame_model(cfg: TrainConfig, model, work: Path, *, test_auc: float, register: bool,
                    tags: Mapping[str, str], version_tags: Mapping[str, str] | None = None,
                    description: str | None = None) -> dict:
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
    return log_and_register(cfg, PipiImageClassifier(),
                            {"weights": str(wpath), "config": str(cpath)}, example,
                            out_example, test_auc, register, tags, params=PARAMS,
                            extra=dict(version_tags or {}), description=description)


def log_and_register(cfg: TrainConfig, python_model, artifacts: dict, example, out_example,
                     test_auc: float, register: bool, tags: Mapping[str, str], *, params,
                     extra: dict, description: str | None = None) -> dict:
    """Log the pyfunc; register it as :func:`registered_name` with its version tags and
    ``description`` in the call that creates the version, then the ``candidate`` alias.

    A run that already has a version (a resume after registration) logs no second model and
    registers no second version: its version is completed and kept."""
    run_id = active_run_id()
    name = registered_name(cfg) if register else None
    version_tags = {"run_id": run_id, "test_macro_auc": f"{test_auc:.6f}",
                    "recipe": tags.get(TAG_RECIPE, recipe_command(cfg)),
                    "recipe_hash": tags.get(TAG_RECIPE_HASH, ""),
                    "data_digest": tags.get(TAG_DATA_DIGEST, ""),
                    "git_commit": code_version(), "cell": cfg.cell,
                    "backbone": cfg.backbone, "seed": cfg.seed, **extra}
    existing = run_version(name, run_id) if name else None
    info = None
    if existing is None:
        info = log_pyfunc_model(
            python_model=python_model, artifacts=artifacts, input_example=example,
            registered_model_name=None, signature_output=out_example, params=params,
        )
    result = {"model_uri": info.model_uri if info else existing.source, "registered": None}
    if name:
        version = register_version(name, info, run_id=run_id, tags=version_tags,
                                   description=description)
        set_aliases(name, {"candidate": version})
        result["registered"] = f"models:/{name}/{version}"
        result["registered_name"] = name
        result["registered_version"] = version
    return result
