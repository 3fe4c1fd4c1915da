"""What a registered model computes, without MLflow: the pyfunc (``pipi/tracking/pyfunc.py``)
loads one of these from its artifacts and turns an :class:`~pipi.serving.model_input.InputError`
into an HTTP 400.

**Per-frame cells** (:class:`FramePredictor`). Input: images in any form of
:mod:`pipi.serving.model_input`. Each image is resized to the training size exactly as the
training cache was (PIL bilinear), 5-channel models compute the analytic prior inside,
``distill`` runs in deploy mode (no auxiliary decoder). Output: a DataFrame with one
probability column per class and ``predicted_class``. Parameters (:data:`PARAMS`):
``strip_prior`` feeds zeros for the prior channels of a 5-channel model (the paper's
strip-and-serve recipe; no effect on 3-channel cells); ``heatmap`` (``distill`` only) adds
``p_blood_heatmap``, the auxiliary head's P_blood estimate at the feature-map resolution.

**Sequence cells** (:class:`SequencePredictor`): a clip of consecutive frames of one video
(``T x H x W x 3``, ``1 <= T <= MAX_CLIP_FRAMES``), a batch of clips ``B x T x H x W x 3``, or a
list of clips of different lengths (the registered model's schema admits them one clip per row
of ``pixels``, or one clip's base64 frames a row each under ``image``); output one row per frame (``clip``, ``frame``,
probabilities, ``predicted_class``). The window rule is in :mod:`pipi.serving.sequence_clip`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from pipi.serving.frame_model import FrameInputs, load_frame_model
from pipi.serving.model_input import InputError, Limits, clips_from_input, images_from_input
from pipi.serving.sequence_clip import ClipPredictor, resize_batch

__all__ = ["MAX_CLIP_FRAMES", "PARAMS", "FramePredictor", "SequencePredictor", "load_predictor",
           "preprocess"]

#: The model parameters (``params`` of a request) and their defaults.
PARAMS = {"strip_prior": False, "heatmap": False}
#: Longest clip a sequence model takes (the paper's window).
MAX_CLIP_FRAMES = 16
_BATCH = 64


def preprocess(images: list[np.ndarray], size: int) -> torch.Tensor:
    """RGB uint8 images -> float ``[B, 3, size, size]`` in [0, 1] (training-cache resize)."""
    return resize_batch(images, size)


def flag(params: Mapping | None, name: str) -> bool:
    """A boolean request parameter (``true``/``false``/``1``/``0``); InputError otherwise."""
    v = (params or {}).get(name, PARAMS[name])
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    if isinstance(v, (bool, np.bool_, int)) and v in (0, 1):
        return bool(v)
    raise InputError(f"params.{name}={v!r}: must be true or false")


class FramePredictor:
    """A logged per-frame model (``model_config.json`` + ``model_state.pt``)."""

    def __init__(self, config, weights):
        self.model, self.cfg = load_frame_model(config, weights)
        self.inputs = FrameInputs(self.cfg)
        self.limits = Limits(decode_size=self.cfg.image_size)

    def predict(self, model_input, params: Mapping | None = None) -> pd.DataFrame:
        strip, heat = flag(params, "strip_prior"), flag(params, "heatmap")
        if heat and not self.cfg.cell_config.distill:
            raise InputError(f"params.heatmap=true: cell {self.cfg.cell!r} has no P_blood head "
                             "(only distill does)")
        images = images_from_input(model_input, limits=self.limits)
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
        names = self.cfg.class_set.names
        df = pd.DataFrame(p, columns=list(names))
        df["predicted_class"] = [names[i] for i in p.argmax(1)]
        if heat:
            df["p_blood_heatmap"] = [np.round(m, 4).tolist() for m in maps]
        return df


class FrameModule(torch.nn.Module):
    """A registered per-frame model as a plain torch module: ``forward(x01)`` takes RGB
    floats in [0, 1], ``[N, 3, H, W]`` at any size, and returns the class probabilities
    ``[N, K]`` exactly as the pyfunc computes them (resized to ``image_size`` as the
    training cache resizes, the backbone's normalisation, the prior inside for the
    5-channel cells). ``network`` is the bare classifier, ``inputs`` its input transform,
    ``class_names`` the output order. Frames given in NHWC memory format (channels_last)
    reach the network in NHWC too: the transform's output is NCHW, and a channels_last
    network fed NCHW reorders every layer's input (EfficientNet-B0 on a CPU here: 8-11%
    slower)."""

    def __init__(self, network: torch.nn.Module, inputs: FrameInputs, cfg):
        super().__init__()
        self.network, self.inputs, self.cfg = network.eval(), inputs, cfg
        self.class_names, self.image_size = tuple(cfg.class_set.names), cfg.image_size

    def forward(self, x01: torch.Tensor, *, strip_prior: bool = False) -> torch.Tensor:
        if x01.shape[-2:] != (self.image_size, self.image_size):
            x01 = torch.nn.functional.interpolate(x01, size=(self.image_size,) * 2,
                                                  mode="bilinear", align_corners=False,
                                                  antialias=True)
        nhwc = x01.dim() == 4 and not x01.is_contiguous() and \
            x01.is_contiguous(memory_format=torch.channels_last)
        x, _ = self.inputs(x01, train=False, strip_prior=strip_prior)
        if nhwc:
            x = x.contiguous(memory_format=torch.channels_last)
        return torch.softmax(self.network(x).float(), dim=1)


class SequencePredictor:
    """A logged sequence model (``sequence_model.pt``: base backbone + temporal head (+ C3
    autoencoder) with the train-split statistics)."""

    def __init__(self, bundle):
        self.predictor = ClipPredictor.from_bundle(bundle)
        self.cfg = self.predictor.cfg
        self.limits = Limits(decode_size=self.cfg.image_size)

    def predict(self, model_input, params: Mapping | None = None) -> pd.DataFrame:
        clips = clips_from_input(model_input, max_frames=MAX_CLIP_FRAMES, limits=self.limits)
        return self.predictor.predict(clips)


def load_predictor(artifacts: Mapping[str, str]) -> FramePredictor | SequencePredictor:
    """The predictor a logged model's artifacts describe: ``bundle`` (a sequence cell) or
    ``config`` + ``weights`` (a per-frame cell)."""
    if "bundle" in artifacts:
        return SequencePredictor(artifacts["bundle"])
    return FramePredictor(artifacts["config"], artifacts["weights"])
