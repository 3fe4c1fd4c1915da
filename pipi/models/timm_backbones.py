"""Backbones built with timm: the foundation-model towers of the linear-probe baselines and any
``timm:<name>`` model for the per-frame cells.

* ``dinov2_vitb14``: timm's ``vit_base_patch14_dinov2`` (ViT-B/14 with DINOv2's settings:
  layer scale, 518 px pretraining grid resampled to the run's image size); embedding = the
  normed CLS token, 768-d. ``weights=FILE``: DINOv2's released state dict
  (``dinov2_vitb14_pretrain.pth``), converted by timm's ``checkpoint_filter_fn``.
* ``biomedclip_vitb16``: timm's ``vit_base_patch16_224`` as BiomedCLIP's image tower plus its
  projection (``head``: Linear 768 -> 512); embedding = the projected 512-d CLS embedding.
  ``weights=FILE``: BiomedCLIP's open_clip checkpoint (``open_clip_pytorch_model.bin``), whose
  ``visual.trunk.*`` and ``visual.head.proj.weight`` keys timm's filter maps onto the tower
  (text-tower keys are ignored).
* ``timm:<name>``: any timm model (``timm.create_model(name, num_classes=0)``); ``weights=
  imagenet`` asks timm for the model's pretrained weights, ``weights=FILE`` loads a state dict
  through the model's own checkpoint filter where it has one.

Five input channels widen the first layer named by the model's ``pretrained_cfg["first_conv"]``
(a ViT's patch-embedding convolution or a CNN's stem conv) exactly as for the torchvision
backbones (:func:`pipi.models.backbones.widen_first_conv`). Keys of a weights file that do not
match the model raise one :class:`~pipi.errors.ConfigError` listing them.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from torch import Tensor, nn

from pipi.data.normalization import CLIP_STATS, IMAGENET_STATS, Stats
from pipi.errors import ConfigError
from pipi.models.backbones import Backbone, read_weights_file, resolve_weights, widen_first_conv
from pipi.models.specs import FOUNDATION, TIMM_PREFIX, FoundationSpec, is_timm_arch

__all__ = ["CLIP_STATS", "FOUNDATION", "IMAGENET_STATS", "TIMM_PREFIX", "FoundationSpec", "Stats",
           "TimmBackbone",
           "build_timm_backbone", "input_stats", "is_timm_arch"]

log = logging.getLogger(__name__)



def input_stats(arch: str) -> Stats:
    """The (mean, std) a backbone's RGB input is normalised with: the foundation towers'
    own (CLIP's for BiomedCLIP), a ``timm:<name>`` model's ``pretrained_cfg``, else
    ImageNet's (the torchvision backbones)."""
    if arch in FOUNDATION:
        return FOUNDATION[arch].stats
    if isinstance(arch, str) and arch.startswith(TIMM_PREFIX):
        name = arch[len(TIMM_PREFIX):]
        try:
            cfg = _timm().models.get_pretrained_cfg(name)
        except (RuntimeError, ValueError, KeyError):
            cfg = None
        mean, std = getattr(cfg, "mean", None), getattr(cfg, "std", None)
        if mean is not None and std is not None and len(mean) == len(std) == 3:
            return tuple(map(float, mean)), tuple(map(float, std))
    return IMAGENET_STATS


def _timm():
    try:
        return importlib.import_module("timm")
    except ImportError as exc:  # pragma: no cover - timm is a dependency
        raise ConfigError("timm is not installed (pip install timm); it builds the "
                          f"foundation and timm:<name> backbones ({exc})") from None


def _path_get(root: nn.Module, path: str) -> nn.Module:
    return root.get_submodule(path)


def _path_set(root: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, name, new)


class TimmBackbone(Backbone):
    """A timm model without classifier as a pipi :class:`Backbone` (image -> embedding)."""

    def __init__(self, arch: str, body: nn.Module, *, in_channels: int, feature_dim: int,
                 first_conv: str) -> None:
        nn.Module.__init__(self)
        self.arch = arch
        self.body = body
        self.in_channels = in_channels
        self.feature_dim = feature_dim
        self._first_conv = first_conv

    @property
    def first_conv(self) -> nn.Conv2d:
        return _path_get(self.body, self._first_conv)

    def forward_features(self, x: Tensor) -> Tensor:
        """timm's unpooled features: (B, C, h, w) for a CNN, (B, tokens, C) for a ViT."""
        return self.body.forward_features(x)

    def pool(self, fmap: Tensor) -> Tensor:
        """timm's own pooling and head (the projection of BiomedCLIP, identity otherwise)."""
        return self.body.forward_head(fmap)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)  # (B, feature_dim)


def _create(timm, name: str, *, pretrained: bool, num_classes: int, image_size: int | None):
    kwargs = {"pretrained": pretrained, "num_classes": num_classes}
    cfg = timm.models.get_pretrained_cfg(name.split(".")[0])
    is_vit = "patch_embed" in str(getattr(cfg, "first_conv", "") or "") if cfg else False
    if image_size and is_vit:
        # a ViT's position grid follows the image size; a size that is not a multiple of the
        # patch is padded (DINOv2's 14 px patches at the smoke profile's 32 px)
        kwargs |= {"img_size": image_size, "dynamic_img_size": True, "dynamic_img_pad": True}
    try:
        return timm.create_model(name, **kwargs)
    except RuntimeError as exc:
        if "Unknown model" in str(exc) or "unknown model" in str(exc).lower():
            raise ConfigError(f"backbone=timm:{name}: timm has no model {name!r} "
                              "(timm.list_models() lists them)") from None
        raise ConfigError(f"backbone {name}: timm could not build it ({exc})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"backbone {name}: timm could not fetch its pretrained weights "
                          f"({type(exc).__name__}: {str(exc)[:200]}); without internet pass "
                          "weights=/path/to/file or weights=none") from None


def _load_file(body: nn.Module, path: Path, name: str) -> None:
    """Load a published checkpoint through timm's filter; one error listing bad keys."""
    sd = read_weights_file(path)
    module = importlib.import_module(type(body).__module__)
    filt = getattr(module, "checkpoint_filter_fn", None)
    if filt is not None:
        try:
            sd = filt(dict(sd), body)
        except (KeyError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"weights={str(path)!r}: timm's checkpoint filter for {name} "
                              f"cannot convert it ({type(exc).__name__}: {exc})") from None
    expected = body.state_dict()
    missing = sorted(k for k in expected if k not in sd)
    unexpected = sorted(k for k in sd if k not in expected)
    shapes = sorted(k for k in sd if k in expected and tuple(sd[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or shapes:
        parts = [f"missing {missing}" if missing else "",
                 f"unexpected {unexpected}" if unexpected else "",
                 "shape mismatch " + str([f"{k}: file {tuple(sd[k].shape)} model "
                                          f"{tuple(expected[k].shape)}" for k in shapes])
                 if shapes else ""]
        raise ConfigError(f"weights={str(path)!r} does not match {name}: "
                          + "; ".join(p for p in parts if p))
    body.load_state_dict(sd, strict=True)


def build_timm_backbone(arch: str, *, weights: str | Path | None = "none", in_channels: int = 3,
                        prior_init: str = "kaiming", image_size: int | None = None
                        ) -> TimmBackbone:
    """Build a timm backbone (module docstring); ``image_size`` sets a ViT's position grid."""
    timm = _timm()
    if int(in_channels) != in_channels or in_channels < 3:
        raise ConfigError(f"in_channels must be an integer >= 3, got {in_channels!r}")
    source = resolve_weights(weights)
    if arch in FOUNDATION:
        spec = FOUNDATION[arch]
        name, num_classes, dim = spec.timm_name, spec.num_classes, spec.embed_dim
        if source == "imagenet":
            raise ConfigError(f"backbone={arch}: weights=imagenet does not apply; pass "
                              f"weights=/path/to/file ({spec.source}) or weights=none")
    elif arch.startswith(TIMM_PREFIX) and arch[len(TIMM_PREFIX):]:
        name, num_classes, dim = arch[len(TIMM_PREFIX):], 0, None
    else:
        raise ConfigError(f"backbone={arch!r}: not a timm backbone; use "
                          f"{sorted(FOUNDATION)} or timm:<name>")
    body = _create(timm, name, pretrained=source == "imagenet", num_classes=num_classes,
                   image_size=image_size)
    if isinstance(source, Path):
        _load_file(body, source, arch)
    first = body.pretrained_cfg.get("first_conv") if getattr(body, "pretrained_cfg", None) else None
    if isinstance(first, (list, tuple)):
        first = first[0]
    if not first:
        raise ConfigError(f"backbone={arch}: timm names no first_conv for {name}; it cannot "
                          "take the 5-channel input")
    if in_channels != 3:
        conv = _path_get(body, first)
        if not isinstance(conv, nn.Conv2d):
            raise ConfigError(f"backbone={arch}: first layer {first} is a "
                              f"{type(conv).__name__}, not a Conv2d; it cannot be widened")
        _path_set(body, first, widen_first_conv(conv, in_channels, prior_init=prior_init))
    dim = dim or int(body.num_features)
    log.debug("built timm backbone %s (%s, weights=%s, in_channels=%d)", arch, name, source,
              in_channels)
    return TimmBackbone(arch, body, in_channels=in_channels, feature_dim=dim, first_conv=first)
