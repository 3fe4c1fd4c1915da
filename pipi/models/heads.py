"""Per-frame models: a backbone plus a linear head, and the distillation variant.

Neither model special-cases memory format or precision: they run unchanged on
``channels_last`` inputs and under ``torch.autocast``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from pipi.errors import ConfigError
from pipi.models.backbones import Backbone

__all__ = ["DECODERS", "AuxDecoder", "CodeDecoder", "DistillClassifier", "FrameClassifier", "distill_loss"]


def _check_head_args(num_classes: int, dropout: float) -> None:
    if int(num_classes) != num_classes or num_classes < 2:
        raise ConfigError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {dropout!r}")


class FrameClassifier(nn.Module):
    """Backbone -> dropout -> linear head.

    Parameters
    ----------
    backbone : Backbone
        A 3- or 5-channel backbone from :func:`pipi.models.build_backbone`.
    num_classes : int
        Number of output classes ``K``.
    dropout : float
        Dropout before the linear head (EfficientNet-B0's own head uses 0.2).
    """

    def __init__(self, backbone: Backbone, num_classes: int, *, dropout: float = 0.2,
                 frozen: bool = False) -> None:
        super().__init__()
        _check_head_args(num_classes, dropout)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(backbone.feature_dim, self.num_classes)
        # a linear probe: the backbone is a fixed feature extractor (no gradient, eval mode)
        self.frozen = bool(frozen)
        if self.frozen:
            self.backbone.requires_grad_(False)
            self.backbone.eval()

    def train(self, mode: bool = True) -> FrameClassifier:
        super().train(mode)
        if self.frozen:
            self.backbone.eval()  # normalisation statistics and dropout stay fixed
        return self

    @property
    def in_channels(self) -> int:
        return self.backbone.in_channels

    def embed(self, x: Tensor) -> Tensor:
        """Pooled embedding: (B, in_channels, H, W) -> (B, C)."""
        return self.backbone(x)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits: (B, in_channels, H, W) -> (B, K)."""
        return self.head(self.dropout(self.embed(x)))


class AuxDecoder(nn.Module):
    """Small decoder predicting P_blood logits from a pre-pool feature map.

    1x1 conv C -> ``width``, BatchNorm, GELU, 3x3 conv ``width`` -> 1. Output keeps the map's
    resolution: (B, C, h, w) -> (B, 1, h, w).
    """

    def __init__(self, in_channels: int, *, width: int = 64) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.norm = nn.BatchNorm2d(width)
        self.act = nn.GELU()
        self.out = nn.Conv2d(width, 1, kernel_size=3, padding=1)

    def forward(self, fmap: Tensor) -> Tensor:
        return self.out(self.act(self.norm(self.reduce(fmap))))


class CodeDecoder(nn.Module):
    """The published code's decoder (``ImageClassifierPIDistill.distill_decoder``), ``-P
    decoder=code``: 3x3 conv C -> ``width`` (bias), GELU, 3x3 conv ``width`` -> ``width``,
    GELU, 1x1 conv ``width`` -> 1; (B, C, h, w) -> (B, 1, h, w). ``layers`` holds them at the
    published indices (0, 2, 4), so an imported ``distill_decoder.*`` loads as ``aux.layers.*``.
    """

    def __init__(self, in_channels: int, *, width: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1), nn.GELU(),
            nn.Conv2d(width, width, kernel_size=3, padding=1), nn.GELU(),
            nn.Conv2d(width, 1, kernel_size=1))

    def forward(self, fmap: Tensor) -> Tensor:
        return self.layers(fmap)


#: The distill cell's decoders (the paper says only "a small decoder head"): ``pipi``
#: (:class:`AuxDecoder`, the default) and ``code`` (:class:`CodeDecoder`, the published code's).
DECODERS = {"pipi": AuxDecoder, "code": CodeDecoder}


class DistillClassifier(nn.Module):
    """RGB classifier trained with an auxiliary P_blood head that is dropped at deployment.

    While ``deploy_mode`` is False, ``forward`` returns ``(logits, aux_logits)`` with
    ``aux_logits`` of shape (B, 1, h, w) at the backbone's feature-map resolution. Setting
    ``model.deploy_mode = True`` makes ``forward`` return the logits only, without running
    the decoder: the deployed model is a plain RGB classifier.

    Parameters
    ----------
    backbone : Backbone
        A 3-channel backbone (the prior is a training target, never an input here).
    num_classes : int
        Number of output classes ``K``.
    dropout : float
        Dropout before the linear head.
    decoder : str
        The auxiliary decoder, a key of :data:`DECODERS`.
    """

    def __init__(self, backbone: Backbone, num_classes: int, *, dropout: float = 0.2,
                 decoder: str = "pipi") -> None:
        super().__init__()
        _check_head_args(num_classes, dropout)
        if decoder not in DECODERS:
            raise ConfigError(f"decoder={decoder!r}; use one of {list(DECODERS)}")
        if backbone.in_channels != 3:
            raise ConfigError(
                "DistillClassifier needs a 3-channel RGB backbone (the prior is only a "
                f"training target), got in_channels={backbone.in_channels}"
            )
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(backbone.feature_dim, self.num_classes)
        self.aux = DECODERS[decoder](backbone.feature_dim)
        self.deploy_mode = False

    @property
    def in_channels(self) -> int:
        return self.backbone.in_channels

    def embed(self, x: Tensor) -> Tensor:
        """Pooled embedding: (B, 3, H, W) -> (B, C)."""
        return self.backbone(x)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """Logits (B, K), plus aux logits (B, 1, h, w) unless ``deploy_mode``."""
        fmap = self.backbone.forward_features(x)  # (B, C, h, w)
        logits = self.head(self.dropout(self.backbone.pool(fmap)))
        if self.deploy_mode:
            return logits
        return logits, self.aux(fmap)


def distill_loss(
    logits: Tensor,
    labels: Tensor,
    aux_logits: Tensor,
    p_blood: Tensor,
    *,
    class_weights: Tensor | None = None,
    lam: float,
) -> Tensor:
    """Joint loss ``CE(logits, labels; class_weights) + lam * BCE(aux_logits, P_blood)``.

    Parameters
    ----------
    logits : Tensor
        (B, K) class logits.
    labels : Tensor
        (B,) integer class labels.
    aux_logits : Tensor
        (B, 1, h, w) decoder logits.
    p_blood : Tensor
        (B, 1, H, W) or (B, H, W) analytic prior in [0, 1]; average-pooled to (h, w) with
        ``F.adaptive_avg_pool2d`` before the binary cross-entropy (with logits, mean over
        pixels).
    class_weights : Tensor, optional
        (K,) weights of the cross-entropy (inverse class frequency in the paper's recipe).
    lam : float
        Weight ``lambda >= 0`` of the auxiliary term.

    Returns
    -------
    Tensor
        Scalar loss.
    """
    if lam < 0:
        raise ConfigError(f"lam must be >= 0, got {lam!r}")
    if p_blood.ndim == 3:
        p_blood = p_blood.unsqueeze(1)
    if p_blood.ndim != 4 or p_blood.shape[1] != 1:
        raise ValueError(f"p_blood must be (B, 1, H, W) or (B, H, W), got {tuple(p_blood.shape)}")
    target = F.adaptive_avg_pool2d(p_blood.to(aux_logits.dtype), aux_logits.shape[-2:])
    weight = None if class_weights is None else class_weights.to(logits.device, logits.dtype)
    ce = F.cross_entropy(logits, labels, weight=weight)
    bce = F.binary_cross_entropy_with_logits(aux_logits, target)
    return ce + lam * bce
