"""A trained sequence cell applied to clips of consecutive frames (the registered model's core).

The clip is treated as one video whose frames are numbered 0..T-1 in the order given, and
every frame is classified exactly as a labelled frame was in training:

* the base per-frame model embeds each frame (resized to the training size with PIL
  bilinear, as the training cache was), standardised with the train-split statistics;
* **window rule**: frame ``t``'s window holds the ``W = cfg.window`` frames of the clip
  nearest to ``t`` (ties towards the earlier frame), in order; near the clip's ends it
  shifts inwards; a clip shorter than ``W`` fills the window with all its frames and pads
  and masks the rest (:func:`pipi.serving.windows.build_windows` with one video, frame numbers =
  positions);
* C1: the P_blood summaries of each frame, z-scored with train statistics (``c``,
  ``c_dprime``, ``d``) or, for ``c_prime`` (per patient), with the clip's own statistics
  (the clip stands for the patient's video; a one-frame clip then gives zeros);
* C3: the residual of the Normal-class autoencoder, z-scored with train statistics.

Output: one row per frame (``clip``, ``frame``, one probability per class, ``predicted_class``).
"""

from __future__ import annotations

import pickle
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch import nn

from pipi.config import TrainConfig
from pipi.models import NormalAutoencoder, residual_features
from pipi.models.sequence import SequenceModel
from pipi.prior import c1_features, prior_channels
from pipi.serving.frame_model import FrameInputs, build_frame_model
from pipi.serving.windows import build_windows, c1_form, zscore

__all__ = ["ClipPredictor", "resize_batch", "resize_frame", "to_unit"]


def resize_frame(image: np.ndarray, size: int) -> np.ndarray:
    """A ``uint8`` ``H x W x 3`` image at ``size x size`` (the training cache's resize: PIL
    bilinear), still ``uint8`` and channels last."""
    pil = Image.fromarray(np.ascontiguousarray(image))
    return np.array(pil.resize((size, size), Image.BILINEAR))


def to_unit(frames: torch.Tensor) -> torch.Tensor:
    """``uint8`` ``[B, S, S, 3]`` -> float ``[B, 3, S, S]`` in [0, 1], left in NHWC memory
    (``torch.channels_last``): what :func:`resize_batch` computes, on any device."""
    return frames.permute(0, 3, 1, 2).float().div_(255.0)


def resize_batch(images: list[np.ndarray], size: int) -> torch.Tensor:
    """``uint8`` ``H x W x 3`` images -> float ``[B, 3, size, size]`` in [0, 1] (training-cache
    resize: PIL bilinear), NCHW-contiguous."""
    frames = torch.from_numpy(np.stack([resize_frame(im, size) for im in images]))
    return to_unit(frames).contiguous()


def _standardise(x: torch.Tensor, stats) -> torch.Tensor:
    """``(x - mean) / std`` in float64 as in training (:func:`pipi.serving.windows.zscore`): a
    near-constant column has a std near 1e-11, where float32 rounding would be amplified."""
    mean, std = (np.asarray(v, dtype=np.float64) for v in stats)
    return torch.from_numpy(((x.double().numpy() - mean) / std).astype(np.float32))


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


class ClipPredictor:
    """Base model + sequence head (+ C3 autoencoder) with their train-split statistics."""

    def __init__(self, *, cfg: TrainConfig, base_cfg: TrainConfig, base: nn.Module,
                 head: SequenceModel, norms: dict, autoencoder: nn.Module | None = None):
        self.cfg, self.base_cfg = cfg, base_cfg
        self.base, self.head, self.ae = base.eval(), head.eval(), autoencoder
        if hasattr(self.base, "deploy_mode"):
            self.base.deploy_mode = True
        self.norms = norms
        self.inputs = FrameInputs(base_cfg)

    @classmethod
    def from_bundle(cls, path) -> ClipPredictor:
        """The predictor of a logged sequence model's ``sequence_model.pt`` bundle."""
        bundle = _load_bundle(path)
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
        return cls(cfg=cfg, base_cfg=base_cfg, base=base, head=head,
                   norms={k: (np.asarray(m), np.asarray(s))
                          for k, (m, s) in bundle["norms"].items()},
                   autoencoder=ae)

    @torch.no_grad()
    def clip_probs(self, frames: list[np.ndarray]) -> np.ndarray:
        """Probabilities ``(T, K)`` of every frame of one clip (K: the run's classes)."""
        cfg, cell = self.cfg, self.cfg.cell_config
        x01 = resize_batch(frames, cfg.image_size)                       # (T, 3, S, S)
        emb = _standardise(self.base.embed(self.inputs(x01, train=False)[0]).float(),
                           self.norms["emb"])                            # (T, D)
        t = len(frames)
        table = pd.DataFrame({"split": "clip", "video_id": "clip",
                              "frame_number": np.arange(t)})
        win = build_windows(table, window=cfg.window)
        idx = torch.from_numpy(np.where(win.index < 0, 0, win.index))
        e = emb[idx]                                                     # (T, W, D)
        e[torch.from_numpy(win.mask)] = 0.0
        kw = {}
        if cell.c1:
            p = prior_channels(x01, **asdict(cfg.prior))
            raw = c1_features(p[:, 0], form=c1_form(cfg)).float()
            kw["c1"] = (torch.from_numpy(zscore(raw.numpy(), raw.numpy()))
                        if cell.c1 == "c8_patient" else _standardise(raw, self.norms["c1"]))
        if cell.c3:
            kw["c3"] = _standardise(residual_features(self.ae.eval(), x01).float(),
                                    self.norms["c3"])
        logits = self.head(e, torch.from_numpy(win.centre), torch.from_numpy(win.mask), **kw)
        return torch.softmax(logits.float(), 1).numpy()

    def predict(self, clips: list[list[np.ndarray]]) -> pd.DataFrame:
        """One row per frame of every clip: ``clip``, ``frame``, a probability per class, class."""
        parts = []
        for b, clip in enumerate(clips):
            probs = self.clip_probs(clip)
            names = self.cfg.class_set.names
            df = pd.DataFrame(probs.astype(np.float64), columns=list(names))
            df.insert(0, "frame", np.arange(len(clip)))
            df.insert(0, "clip", b)
            df["predicted_class"] = [names[i] for i in probs.argmax(1)]
            parts.append(df)
        return pd.concat(parts, ignore_index=True)
