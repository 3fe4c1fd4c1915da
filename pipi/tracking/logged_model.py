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
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi.config import TrainConfig, recipe_command, run_params
from pipi.errors import ConfigError
from pipi.models.timm_backbones import is_timm_arch
from pipi.serving.code import copy_closure
from pipi.serving.frame_model import FrameInputs
from pipi.serving.model_input import encode_png
from pipi.serving.predictors import PARAMS, preprocess
from pipi.tracking.datasets import DatasetRef, log_model_metrics
from pipi.tracking.permissions import model_prefix
from pipi.tracking.registry import (
    log_pyfunc_model,
    register_version,
    run_version,
    set_aliases,
    set_registered_model_tags,
)
from pipi.tracking.handle import Run
from pipi.tracking.store import code_version
from pipi.tracking.tags import (
    TAG_BACKBONE,
    TAG_CELL,
    TAG_DATA_DIGEST,
    TAG_DATASET,
    TAG_NEEDED_BY,
    TAG_RECIPE,
    TAG_RECIPE_HASH,
    TAG_SEED,
)

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


#: Characters a registered model name part may hold (MLflow refuses '/' and ':'; a models:/
#: URI needs no more than these).
_NAME_PART_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def name_part(value: str, *, what: str) -> str:
    """``value`` as a part of a model name: every run of other characters becomes one ``-``
    (``timm:resnet10t`` -> ``timm-resnet10t``); ConfigError when nothing is left."""
    part = _NAME_PART_BAD.sub("-", str(value)).strip("-.")
    if not part:
        raise ConfigError(f"{what}={value!r} gives an empty registered model name part; use "
                          "letters, digits, '_', '.' or '-'")
    return part


def registered_name(cfg: TrainConfig) -> str:
    """The registered (and logged) model of a (backbone, cell) family:
    ``<prefix>-<backbone>-<cell>``, every part a valid MLflow name (:func:`name_part`; the
    original backbone and cell are the model's tags); the prefix ``pipi`` unless
    ``PIPI_MODEL_PREFIX`` (``--model-prefix``) says otherwise."""
    return (f"{model_prefix()}-{name_part(cfg.backbone, what='backbone')}-"
            f"{name_part(cfg.cell, what='cell')}")


def model_tags(cfg: TrainConfig, tags: Mapping[str, str]) -> dict[str, str]:
    """The tags of a logged model: cell, original backbone, seed, recipe and data."""
    out = {TAG_CELL: cfg.cell, TAG_BACKBONE: cfg.backbone, TAG_SEED: str(cfg.seed)}
    for key in (TAG_RECIPE, TAG_RECIPE_HASH, TAG_DATA_DIGEST, TAG_DATASET):
        if tags.get(key):
            out[key] = str(tags[key])[:5000]
    return out


def example_images(cfg: TrainConfig, *, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return list(rng.integers(0, 256, (n, cfg.image_size, cfg.image_size, 3), dtype=np.uint8))


def log_frame_model(run: Run, cfg: TrainConfig, model, work: Path, *, test_auc: float,
                    register: bool,
                    tags: Mapping[str, str], version_tags: Mapping[str, str] | None = None,
                    test_metrics: Mapping[str, float] | None = None,
                    test_dataset: DatasetRef | None = None,
                    description: str | None = None, step: int = 0) -> dict:
    """Log a per-frame model as the pyfunc of ``run`` (and register it) at ``step``
    (the selected epoch).
    ``test_metrics`` are logged linked to the model (and to ``test_dataset``)."""
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
    names = cfg.class_set.names
    out_example = pd.DataFrame(probs, columns=list(names))
    out_example["predicted_class"] = [names[i] for i in probs.argmax(1)]
    # the serving example shows the base64 form a client sends without numpy (PNG: lossless)
    example = pd.DataFrame({"image": [encode_png(im) for im in images]})
    return log_and_register(run, cfg, {"weights": str(wpath), "config": str(cpath)}, example,
                            out_example, test_auc, register, tags, params=PARAMS,
                            extra=dict(version_tags or {}), work=work,
                            test_metrics=test_metrics, test_dataset=test_dataset,
                            image_columns=True, description=description, step=step)


def log_and_register(run: Run, cfg: TrainConfig, artifacts: dict, example, out_example,
                     test_auc: float, register: bool, tags: Mapping[str, str], *, params,
                     extra: dict, work: Path, test_metrics: Mapping[str, float] | None = None,
                     test_dataset: DatasetRef | None = None, image_columns: bool = False,
                     description: str | None = None, step: int = 0) -> dict:
    """Log the pyfunc; register it as :func:`registered_name` with its version tags and
    ``description`` in the call that creates the version, then the ``candidate`` alias
    (unless the run was trained as another run's dependency: ``tags`` has
    :data:`TAG_NEEDED_BY`; its version is tagged ``needed_by`` and moves no alias).

    A run that already has a version (a resume after registration) logs no second model and
    registers no second version: its version is completed and kept."""
    run_id = run.run_id
    model_name = registered_name(cfg)
    name = model_name if register else None
    version_tags = {"run_id": run_id, "test_macro_auc": f"{test_auc:.6f}",
                    "recipe": tags.get(TAG_RECIPE, recipe_command(cfg)),
                    "recipe_hash": tags.get(TAG_RECIPE_HASH, ""),
                    "data_digest": tags.get(TAG_DATA_DIGEST, ""),
                    "git_commit": code_version(), "cell": cfg.cell,
                    "backbone": cfg.backbone, "seed": cfg.seed, **extra}
    existing = run_version(name, run_id) if name else None
    info = None
    if existing is None:
        code = copy_closure(SERVED_MODEL, work / "served_code")
        info = log_pyfunc_model(
            run_id, python_model=SERVED_MODEL, artifacts=artifacts, input_example=example,
            registered_model_name=None, signature_output=out_example, params=params,
            code_paths=[code], pip_requirements=serving_requirements(cfg.backbone),
            model_name=model_name, model_params=run_params(cfg),
            model_tags=model_tags(cfg, tags), image_columns=image_columns, step=step,
        )
        if test_metrics:
            log_model_metrics(run_id, info.model_id, test_metrics, dataset=test_dataset)
    result = {"model_uri": info.model_uri if info else existing.source,
              "model_id": info.model_id if info else getattr(existing, "model_id", None),
              "registered": None}
    needed_by = tags.get(TAG_NEEDED_BY, "")
    if needed_by:
        version_tags["needed_by"] = needed_by
    if name:
        version = register_version(name, info, run_id=run_id, tags=version_tags,
                                   description=description)
        if not needed_by:   # a dependency registers but moves no alias: the user asked for
            set_aliases(name, {"candidate": version})   # the run that needed it
        result["moved_alias"] = not needed_by
        set_registered_model_tags(name, {TAG_CELL: cfg.cell, TAG_BACKBONE: cfg.backbone})
        result["registered"] = f"models:/{name}/{version}"
        result["registered_name"] = name
        result["registered_version"] = version
    return result
