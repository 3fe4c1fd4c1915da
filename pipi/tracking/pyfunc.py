"""The registered model: an MLflow pyfunc that takes plain RGB images.

Input: a batch ``B x H x W x 3`` of uint8 RGB images (one image: ``img[None]``), or an object
array of ``H x W x 3`` images of different sizes (a ragged batch). Each image is resized to the training size exactly as the training cache was (PIL
bilinear), 5-channel models compute the analytic prior inside, ``distill`` runs in deploy
mode (no auxiliary decoder). Output: a DataFrame with one probability column per class and
``predicted_class``. The ``strip_prior`` parameter feeds zeros for the prior channels of a
5-channel model (the paper's strip-and-serve recipe).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch
from PIL import Image

from pipi.classes import CLASSES
from pipi.config import TrainConfig
from pipi.training import FrameInputs, build_frame_model


def _as_images(model_input) -> list[np.ndarray]:
    if isinstance(model_input, pd.DataFrame):
        model_input = list(model_input.iloc[:, 0])
    if isinstance(model_input, dict):
        model_input = next(iter(model_input.values()))
    if isinstance(model_input, np.ndarray):
        if model_input.dtype == object and model_input.ndim == 1:  # ragged batch
            return [np.asarray(x) for x in model_input]
        if model_input.ndim == 3:
            return [model_input]
        if model_input.ndim == 4:
            return list(model_input)
        raise ValueError(f"expected H x W x 3 or B x H x W x 3, got shape {model_input.shape}")
    return [np.asarray(x) for x in model_input]


def preprocess(images: list[np.ndarray], size: int) -> torch.Tensor:
    """RGB uint8 images -> float ``[B, 3, size, size]`` in [0, 1] (training-cache resize)."""
    out = []
    for im in images:
        if im.ndim != 3 or im.shape[-1] != 3:
            raise ValueError(f"each image must be H x W x 3 RGB, got shape {im.shape}")
        pil = Image.fromarray(np.ascontiguousarray(im.astype(np.uint8)))
        out.append(np.asarray(pil.resize((size, size), Image.BILINEAR)).transpose(2, 0, 1))
    return torch.from_numpy(np.stack(out)).float().div_(255.0)


class PipiImageClassifier(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper around a per-frame pipi model (see the module docstring)."""

    def load_context(self, context):
        cfg_doc = json.loads(Path(context.artifacts["config"]).read_text())
        self.cfg = TrainConfig.from_dict(cfg_doc, weights="none")
        self.model = build_frame_model(self.cfg)
        state = torch.load(context.artifacts["weights"], map_location="cpu", weights_only=True)
        self.model.load_state_dict(state)
        self.model.eval()
        if hasattr(self.model, "deploy_mode"):
            self.model.deploy_mode = True
        self.inputs = FrameInputs(self.cfg)

    def predict(self, context, model_input, params=None):
        strip = bool((params or {}).get("strip_prior", False))
        x01 = preprocess(_as_images(model_input), self.cfg.image_size)
        with torch.no_grad():
            x, _ = self.inputs(x01, train=False, strip_prior=strip)
            probs = torch.softmax(self.model(x).float(), dim=1).numpy()
        df = pd.DataFrame(probs, columns=list(CLASSES))
        df["predicted_class"] = [CLASSES[i] for i in probs.argmax(1)]
        return df
