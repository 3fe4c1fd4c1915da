"""A per-frame cell's network and its inputs, as training builds them and serving loads them.

:func:`build_frame_model` builds the network of a :class:`~pipi.config.TrainConfig`;
:class:`FrameInputs` turns uint8 batches into its inputs (augmentation in training, the
analytic prior, the backbone's normalisation, zeroed channels); :func:`load_frame_model` reads
the two files a logged model holds (``model_config.json``, ``model_state.pt``). Only torch,
numpy and the library below (models, prior, data.cache's tensor functions): the registered
model imports this module, never the training loop.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from pipi.config import TrainConfig
from pipi.data.cache import AugmentConfig, augment, augment_draws, normalize
from pipi.models import DistillClassifier, FrameClassifier, build_backbone
from pipi.models.timm_backbones import build_timm_backbone, input_stats, is_timm_arch
from pipi.prior import prior_channels

__all__ = ["FrameInputs", "build_frame_model", "load_frame_model"]


def build_frame_model(cfg: TrainConfig) -> torch.nn.Module:
    cell = cfg.cell_config
    weights = None if cfg.weights in ("none", "", None) else cfg.weights
    if is_timm_arch(cfg.backbone):
        backbone = build_timm_backbone(cfg.backbone, weights=weights,
                                       in_channels=cell.input_channels,
                                       prior_init=cfg.prior_init, image_size=cfg.image_size)
    else:
        backbone = build_backbone(cfg.backbone, weights=weights,
                                  in_channels=cell.input_channels, prior_init=cfg.prior_init)
    k = len(cfg.class_set)
    if cell.distill:
        return DistillClassifier(backbone, k, decoder=cfg.decoder)
    if cell.frozen:  # linear probe: frozen features, a plain linear head
        return FrameClassifier(backbone, k, dropout=0.0, frozen=True)
    return FrameClassifier(backbone, k)


@dataclass
class FrameInputs:
    """Turns uint8 batches into model inputs for a cell: augment, prior, normalise, zero.

    ``check=False`` skips the prior's value check (a device synchronisation) for frames that
    come from the uint8 cache."""

    cfg: TrainConfig
    check: bool = True

    def __post_init__(self):
        # the backbone's own input normalisation (CLIP's for BiomedCLIP, ImageNet's for the
        # torchvision backbones); the prior channels are never normalised
        self.stats = input_stats(self.cfg.backbone)

    def __call__(self, x01: torch.Tensor, *, train: bool, gen: torch.Generator | None = None,
                 strip_prior: bool = False, scale: float = 1.0,
                 draws: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x01``: float ``[B, 3, H, W]`` with values in [0, scale] (scale 255: raw uint8 values).
        ``draws``: the augmentation's random numbers already drawn (``augment_draws``)."""
        cfg, cell = self.cfg, self.cfg.cell_config
        train = train and cfg.augment  # augment=false: training frames as evaluation sees them
        need_prior = cell.input_channels == 5 or cell.distill
        # strip-and-serve: the prior channels are zeros, so the prior is never computed
        compute_prior = cell.distill or (cell.input_channels == 5 and not strip_prior)
        aug = AugmentConfig(cfg.hflip, cfg.rotation_deg, *cfg.jitter)
        valid = None
        target_src = None
        if train and cell.distill and cfg.distill_target == "frame":
            # The distill target is the prior of the frame itself (paper: P_blood(x)): the
            # same flip/rotation as the input (so target and input stay aligned), no colour
            # jitter. One draw serves both passes, the same numbers augment would draw.
            if draws is None:
                draws = augment_draws(gen, x01.shape[0]).to(x01.device)
            geometry = AugmentConfig(cfg.hflip, cfg.rotation_deg, 0.0, 0.0, 0.0)
            target_src = augment(x01, geometry, None, scale=scale, draws=draws)
        if train and not need_prior:
            # RGB-only: augmentation and normalisation in one fused pass
            return augment(x01, aug, gen, scale=scale, normalized=True, draws=draws,
                           stats=self.stats), None
        if train and cfg.prior.mask == "fov":
            # the field of view: pixels the zero-filled rotation did not create
            x01, valid = augment(x01, aug, gen, scale=scale, return_valid=True, draws=draws)
        elif train:
            x01 = augment(x01, aug, gen, scale=scale, draws=draws)
        elif scale != 1.0:
            x01 = x01 / scale
        prior = None
        if compute_prior:
            # The prior is computed after augmentation, on the un-normalised image (paper);
            # the distill target (distill_target=frame) before the colour jitter.
            prior = prior_channels(x01 if target_src is None else target_src,
                                   **asdict(cfg.prior), valid=valid, check=self.check)
        x = normalize(x01, self.stats)
        if cell.input_channels == 5:
            p = (x01.new_zeros((x01.shape[0], 2, *x01.shape[2:])) if strip_prior
                 else prior.clone())
            for ch in cell.zero_channels:
                p[:, ch - 3] = 0
            x = torch.cat([x, p], dim=1)
        return x, (prior[:, :1] if prior is not None else None)


def load_frame_model(config: Path, weights: Path) -> tuple[torch.nn.Module, TrainConfig]:
    """The eval-mode network of a logged per-frame model (``distill`` in deploy mode: no
    auxiliary decoder) and its config, from ``model_config.json`` and ``model_state.pt``."""
    cfg = TrainConfig.from_dict(json.loads(Path(config).read_text()), weights="none")
    model = build_frame_model(cfg)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    model.eval()
    if hasattr(model, "deploy_mode"):
        model.deploy_mode = True
    return model, cfg
