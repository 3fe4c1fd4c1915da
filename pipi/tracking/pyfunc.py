"""The registered models: MLflow pyfuncs that take plain RGB images (or clips of them).

**Per-frame cells** (``PipiImageClassifier``). Input: images in any form of
:mod:`pipi.serving.model_input` (a ``B x H x W x 3`` uint8 batch, one ``H x W x 3`` image, images of
different sizes as a list / object array, floats in [0, 1] converted explicitly, or base64
JPEG/PNG strings under an ``image`` column or key). Each image is resized to the training
size exactly as the training cache was (PIL bilinear), 5-channel models compute the analytic
prior inside, ``distill`` runs in deploy mode (no auxiliary decoder). Output: a DataFrame
with one probability column per class and ``predicted_class``. Parameters:
``strip_prior`` feeds zeros for the prior channels of a 5-channel model (the paper's
strip-and-serve recipe; no effect on 3-channel cells); ``heatmap`` (``distill`` only) adds
``p_blood_heatmap``, the auxiliary head's P_blood estimate at the feature-map resolution.

**Sequence cells** (``PipiSequenceClassifier``): a clip of consecutive frames of one video
(``T x H x W x 3``, ``1 <= T <= MAX_CLIP_FRAMES``), a batch of clips ``B x T x H x W x 3``,
or a list of clips of different lengths; output one row per frame (``clip``, ``frame``,
probabilities, ``predicted_class``). The window rule is in :mod:`pipi.serving.sequence_clip`.

Refused input raises ``MlflowException`` with ``INVALID_PARAMETER_VALUE`` (HTTP 400 under
``mlflow models serve``) and a one-line reason; :mod:`pipi.tracking.serving` keeps the
scoring server from echoing the request back.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from pipi.classes import CLASSES
from pipi.config import TrainConfig
from pipi.errors import DataError
from pipi.models import NormalAutoencoder
from pipi.models.sequence import SequenceModel
from pipi.serving.model_input import Limits, clips_from_input, images_from_input
from pipi.serving.sequence_clip import ClipPredictor, resize_batch
from pipi.tracking.serving import install_guard
from pipi.training.frames import FrameInputs, build_frame_model

__all__ = ["MAX_CLIP_FRAMES", "PARAMS", "PipiImageClassifier", "PipiSequenceClassifier",
           "preprocess"]

#: The model parameters (``params`` of a request) and their defaults.
PARAMS = {"strip_prior": False, "heatmap": False}
#: Longest clip a sequence model takes (the paper's window).
MAX_CLIP_FRAMES = 16
_BATCH = 64


def preprocess(images: list[np.ndarray], size: int) -> torch.Tensor:
    """RGB uint8 images -> float ``[B, 3, size, size]`` in [0, 1] (training-cache resize)."""
    return resize_batch(images, size)


def refused(reason) -> MlflowException:
    """A client error: HTTP 400 with this one line under ``mlflow models serve``."""
    return MlflowException(" ".join(str(reason).split()), error_code=INVALID_PARAMETER_VALUE)


def _flag(params: dict | None, name: str) -> bool:
    v = (params or {}).get(name, PARAMS[name])
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    if isinstance(v, (bool, np.bool_, int)) and v in (0, 1):
        return bool(v)
    raise refused(f"params.{name}={v!r}: must be true or false")


def _load_frame_model(config: Path, weights: Path):
    cfg = TrainConfig.from_dict(json.loads(Path(config).read_text()), weights="none")
    model = build_frame_model(cfg)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    model.eval()
    if hasattr(model, "deploy_mode"):
        model.deploy_mode = True
    return model, cfg


class PipiImageClassifier(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper around a per-frame pipi model (see the module docstring)."""

    def load_context(self, context):
        self.model, self.cfg = _load_frame_model(context.artifacts["config"],
                                                 context.artifacts["weights"])
        self.inputs = FrameInputs(self.cfg)
        self.limits = Limits(decode_size=self.cfg.image_size)
        install_guard()

    # `pd.DataFrame` is what MLflow's type-hint check skips (no schema inferred, no input
    # converted, no warning at import): a DataFrame, a dict of lists or an array is accepted
    # and checked by pipi.serving.model_input.
    def predict(self, context, model_input: pd.DataFrame, params=None):
        strip, heat = _flag(params, "strip_prior"), _flag(params, "heatmap")
        if heat and not self.cfg.cell_config.distill:
            raise refused(f"params.heatmap=true: cell {self.cfg.cell!r} has no P_blood head "
                          "(only distill does)")
        try:
            images = images_from_input(model_input, limits=self.limits)
        except DataError as exc:
            raise refused(exc) from None
        probs, maps = [], []
        with torch.no_grad():
            for i in range(0, len(images), _BATCH):
                x01 = preprocess(images[i:i + _BATCH], self.cfg.image_size)
                x, _ = self.inputs(x01, train=False, strip_prior=strip)
                if heat:
                    self.model.deploy_mode = False
                    try:
                        logits, aux = self.model(x)
                    finally:
                        self.model.deploy_mode = True
                    maps.extend(torch.sigmoid(aux[:, 0].float()).numpy())
                else:
                    logits = self.model(x)
                probs.append(torch.softmax(logits.float(), dim=1).numpy())
        p = np.concatenate(probs).astype(np.float64)
        df = pd.DataFrame(p, columns=list(CLASSES))
        df["predicted_class"] = [CLASSES[i] for i in p.argmax(1)]
        if heat:
            df["p_blood_heatmap"] = [np.round(m, 4).tolist() for m in maps]
        return df


def _load_bundle(path) -> dict:
    """A sequence model's bundle, read without unpickling code (``weights_only``). Bundles
    written before the norms were tensors hold numpy arrays: those numpy types (and only
    they) are allowed for them."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        from numpy._core.multiarray import _reconstruct

        kinds = [np.ndarray, np.dtype, _reconstruct,
                 *{type(np.dtype(t)) for t in (np.float32, np.float64)}]
        with torch.serialization.safe_globals(kinds):
            return torch.load(path, map_location="cpu", weights_only=True)


class PipiSequenceClassifier(mlflow.pyfunc.PythonModel):
    """pyfunc around a sequence cell: base backbone + temporal head (+ C3 autoencoder)."""

    def load_context(self, context):
        bundle = _load_bundle(context.artifacts["bundle"])
        cfg = TrainConfig.from_dict(bundle["config"], weights="none")
        base_cfg = TrainConfig.from_dict(bundle["base_config"], weights="none")
        base = build_frame_model(base_cfg)
        base.load_state_dict(bundle["base_state"])
        head = SequenceModel(**bundle["spec"])
        head.load_state_dict(bundle["head_state"])
        ae = None
        if bundle.get("autoencoder_state") is not None:
            ae = NormalAutoencoder()
            ae.load_state_dict(bundle["autoencoder_state"])
            ae.eval()
        self.cfg = cfg
        self.predictor = ClipPredictor(cfg=cfg, base_cfg=base_cfg, base=base, head=head,
                                       norms={k: (np.asarray(m), np.asarray(s))
                                              for k, (m, s) in bundle["norms"].items()},
                                       autoencoder=ae)
        self.limits = Limits(decode_size=cfg.image_size)
        install_guard()

    # `pd.DataFrame` is what MLflow's type-hint check skips (no schema inferred, no input
    # converted, no warning at import): a DataFrame, a dict of lists or an array is accepted
    # and checked by pipi.serving.model_input.
    def predict(self, context, model_input: pd.DataFrame, params=None):
        try:
            clips = clips_from_input(model_input, max_frames=MAX_CLIP_FRAMES,
                                     limits=self.limits)
        except DataError as exc:
            raise refused(exc) from None
        return self.predictor.predict(clips)
