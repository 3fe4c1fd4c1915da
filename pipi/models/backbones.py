"""Per-frame backbones: torchvision trunks without their classifier, optionally widened.

``build_backbone("efficientnet_b0", in_channels=5)`` gives the spatial C1 form of the paper
(RGB + P_blood + Phi at the first convolution, "5-ch"); ``in_channels=3`` is the plain RGB
backbone used by every other cell.

The torchvision model is kept whole as ``Backbone.body`` with only its final Linear removed, so
the state_dict keys of a backbone are ``"body." + <torchvision key>``. That keeps a torchvision
state_dict, a pipi backbone and a pipi frame classifier checkpoint loadable through one path.
"""

from __future__ import annotations

import logging
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torch import Tensor, nn

from pipi.errors import ConfigError, reason_of
from pipi.models.specs import ARCHS, FEATURE_DIMS, PAPER_ARCHS, PRIOR_INITS

__all__ = ["ARCHS", "FEATURE_DIMS", "PAPER_ARCHS", "PRIOR_INITS", "Backbone", "build_backbone", "check_weights",
           "imagenet_weights", "read_weights_file", "resolve_weights", "widen_first_conv"]

log = logging.getLogger(__name__)

# Prefixes stripped from checkpoint keys: DDP ("module."), torch.compile ("_orig_mod."),
# a pipi frame classifier ("backbone.") and a pipi Backbone ("body.").
_WRAPPER_PREFIXES: tuple[str, ...] = ("module.", "_orig_mod.")


def _resnet_features(body: nn.Module, x: Tensor) -> Tensor:
    """ResNet stem and the four stages, stopping before the global pool."""
    x = body.maxpool(body.relu(body.bn1(body.conv1(x))))
    return body.layer4(body.layer3(body.layer2(body.layer1(x))))


def _sequential_features(body: nn.Module, x: Tensor) -> Tensor:
    """EfficientNet / ConvNeXt: the ``features`` stack is the whole pre-pool trunk."""
    return body.features(x)


def _avg_pool(body: nn.Module, fmap: Tensor) -> Tensor:
    """Global average pool then flatten: (B, C, h, w) -> (B, C)."""
    return torch.flatten(body.avgpool(fmap), 1)


def _avg_pool_norm(body: nn.Module, fmap: Tensor) -> Tensor:
    """ConvNeXt: global average pool, LayerNorm2d, flatten (its head minus the Linear)."""
    return body.classifier(body.avgpool(fmap))


def _strip_efficientnet(body: nn.Module) -> None:
    body.classifier = nn.Identity()  # was Dropout + Linear(1280, 1000)


def _strip_resnet(body: nn.Module) -> None:
    body.fc = nn.Identity()  # was Linear(512 or 2048, 1000)


def _strip_convnext(body: nn.Module) -> None:
    # Keep LayerNorm2d (classifier.0) and Flatten (classifier.1): the pooled embedding of
    # ConvNeXt is defined after that norm. Only the Linear (classifier.2) goes.
    body.classifier = nn.Sequential(body.classifier[0], body.classifier[1])


@dataclass(frozen=True)
class _ArchSpec:
    """How one torchvision architecture is cut into trunk, pool and first conv."""

    first_conv: tuple[str, ...]  # attribute path to the first nn.Conv2d
    head_prefixes: tuple[str, ...]  # checkpoint keys that belong to the removed classifier
    strip_head: Callable[[nn.Module], None]
    features: Callable[[nn.Module, Tensor], Tensor]
    pool: Callable[[nn.Module, Tensor], Tensor]


_SPECS: dict[str, _ArchSpec] = {
    "efficientnet_b0": _ArchSpec(
        first_conv=("features", "0", "0"),  # 3x3 stride-2 conv, 3 -> 32, no bias
        head_prefixes=("classifier.", "fc.", "head."),
        strip_head=_strip_efficientnet,
        features=_sequential_features,
        pool=_avg_pool,
    ),
    "resnet18": _ArchSpec(
        first_conv=("conv1",),  # 7x7 stride-2 conv, 3 -> 64, no bias
        head_prefixes=("fc.", "classifier.", "head."),
        strip_head=_strip_resnet,
        features=_resnet_features,
        pool=_avg_pool,
    ),
    "convnext_tiny": _ArchSpec(
        first_conv=("features", "0", "0"),  # 4x4 stride-4 patchify conv, 3 -> 96, with bias
        head_prefixes=("classifier.2.", "fc.", "head."),
        strip_head=_strip_convnext,
        features=_sequential_features,
        pool=_avg_pool_norm,
    ),
}
#: ResNet-50: the same cut as ResNet-18 (7x7 stride-2 conv 3 -> 64, ``fc`` 2048 -> 1000).
_SPECS["resnet50"] = _SPECS["resnet18"]


def _get_submodule(root: nn.Module, path: tuple[str, ...]) -> nn.Module:
    module = root
    for name in path:
        module = getattr(module, name) if not name.isdigit() else module[int(name)]
    return module


def _set_submodule(root: nn.Module, path: tuple[str, ...], new: nn.Module) -> None:
    parent = _get_submodule(root, path[:-1])
    name = path[-1]
    if name.isdigit():
        parent[int(name)] = new
    else:
        setattr(parent, name, new)


class Backbone(nn.Module):
    """A torchvision trunk without classifier: image -> pre-pool map -> pooled embedding.

    Parameters
    ----------
    arch : str
        One of :data:`ARCHS`.
    body : nn.Module
        The torchvision model with its final Linear already removed (see
        :func:`build_backbone`, which is the intended constructor).
    in_channels : int
        Number of input channels of the first convolution.

    Attributes
    ----------
    feature_dim : int
        Width ``C`` of the embedding and of the pre-pool feature map.
    in_channels : int
        Input channels (3 for RGB, 5 for RGB + P_blood + Phi).
    """

    def __init__(self, arch: str, body: nn.Module, *, in_channels: int) -> None:
        super().__init__()
        self.arch = arch
        self.body = body
        self.in_channels = in_channels
        self.feature_dim = FEATURE_DIMS[arch]
        self._spec = _SPECS[arch]

    @property
    def first_conv(self) -> nn.Conv2d:
        """The input convolution (the one widened for extra channels)."""
        return _get_submodule(self.body, self._spec.first_conv)

    def forward_features(self, x: Tensor) -> Tensor:
        """Pre-pool spatial feature map: (B, in_channels, H, W) -> (B, C, H/32, W/32)."""
        return self._spec.features(self.body, x)

    def pool(self, fmap: Tensor) -> Tensor:
        """Pool a feature map to the embedding: (B, C, h, w) -> (B, C)."""
        return self._spec.pool(self.body, fmap)

    def forward(self, x: Tensor) -> Tensor:
        """Embedding of a batch of images: (B, in_channels, H, W) -> (B, C)."""
        return self.pool(self.forward_features(x))


def widen_first_conv(conv: nn.Conv2d, in_channels: int, *, prior_init: str) -> nn.Conv2d:
    """Return a copy of ``conv`` taking ``in_channels`` inputs.

    The first ``conv.in_channels`` input slices (RGB) are copied exactly, as is the bias. The
    extra slices (the prior channels) get ``kaiming_normal_(mode="fan_out",
    nonlinearity="relu")`` -- the initialisation torchvision uses for the convolutions of
    ResNet and EfficientNet; its fan-out does not depend on the number of inputs, so the
    extra slices get std ``sqrt(2 / (out_channels * kh * kw))`` -- or zeros.
    """
    if prior_init not in PRIOR_INITS:
        raise ConfigError(f"prior_init must be one of {list(PRIOR_INITS)}, got {prior_init!r}")
    old = conv.in_channels
    if in_channels < old:
        raise ConfigError(f"in_channels must be >= {old}, got {in_channels}")
    new = nn.Conv2d(
        in_channels,
        conv.out_channels,
        kernel_size=conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        groups=conv.groups,
        bias=conv.bias is not None,
        padding_mode=conv.padding_mode,
    ).to(device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        extra = torch.empty_like(new.weight[:, old:])
        if prior_init == "kaiming":
            nn.init.kaiming_normal_(extra, mode="fan_out", nonlinearity="relu")
        else:
            extra.zero_()
        new.weight.copy_(torch.cat([conv.weight, extra], dim=1))
        if conv.bias is not None:
            new.bias.copy_(conv.bias)
    return new


def resolve_weights(weights: str | Path | None) -> str | Path | None:
    """Normalise ``weights`` to ``"imagenet"``, ``None`` or an existing file path."""
    if weights is None:
        return None
    if isinstance(weights, str) and weights.strip().lower() in ("none", ""):
        return None
    if isinstance(weights, str) and weights.strip().lower() == "imagenet":
        return "imagenet"
    path = Path(weights).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"weights={str(weights)!r} is neither 'imagenet', 'none' nor an existing file. "
            "Pass weights=imagenet, weights=none or weights=/path/to/state_dict.pth."
        )
    return path


def imagenet_weights(arch: str):
    """The ImageNet weights ``weights=imagenet`` loads: torchvision's ``DEFAULT`` of the
    architecture, as the published code asks for them (``IMAGENET1K_V1`` for EfficientNet-B0,
    ResNet-18 and ConvNeXt-Tiny; ``IMAGENET1K_V2`` for ResNet-50)."""
    return torchvision.models.get_model_weights(arch).DEFAULT


def _load_imagenet(arch: str) -> nn.Module:
    enum = imagenet_weights(arch)
    try:
        return torchvision.models.get_model(arch, weights=enum)
    except (urllib.error.URLError, OSError, RuntimeError) as exc:
        raise ConfigError(
            f"Could not fetch the ImageNet weights of {arch} ({enum.url}): "
            f"{type(exc).__name__}: {exc}. Without internet access, download that file "
            "elsewhere and pass it as a local state_dict file via weights=/path/to/file.pth, "
            "or train from scratch with weights=none."
        ) from exc


def read_weights_file(path: Path) -> dict[str, Tensor]:
    """Read a state_dict file, unwrap a pipi checkpoint and strip wrapper prefixes."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for unreadable files
        first = reason_of(exc)
        if "weights only load failed" in first.lower():  # torch's advice would load code
            first = "not a torch save file holding only tensors"
        raise ConfigError(f"weights={str(path)!r}: cannot read it as a torch state_dict file "
                          f"({type(exc).__name__}: {first}); pass a .pth file saved "
                          "with torch.save(model.state_dict(), path), or weights=none") from None
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise ConfigError(
            f"{path} does not hold a state_dict (a mapping of names to tensors) nor a "
            "checkpoint dict with a 'state_dict' entry."
        )
    sd = dict(obj)
    for prefix in _WRAPPER_PREFIXES:
        if sd and all(k.startswith(prefix) for k in sd):
            sd = {k[len(prefix) :]: v for k, v in sd.items()}
    # A pipi frame classifier: keep the backbone's entries only (drop head / aux decoder).
    if any(k.startswith("backbone.") for k in sd):
        sd = {k[len("backbone.") :]: v for k, v in sd.items() if k.startswith("backbone.")}
    # A pipi Backbone: its keys are "body." + torchvision key.
    if sd and all(k.startswith("body.") for k in sd):
        sd = {k[len("body.") :]: v for k, v in sd.items()}
    return sd


def _load_into_body(body: nn.Module, sd: dict[str, Tensor], spec: _ArchSpec, path: Path) -> None:
    expected = body.state_dict()
    unexpected = [k for k in sd if k not in expected]
    bad = [k for k in unexpected if not k.startswith(spec.head_prefixes)]
    missing = [k for k in expected if k not in sd]
    if bad or missing:
        raise ConfigError(
            f"{path} does not match this backbone: missing keys {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''}, unexpected keys {bad[:5]}"
            f"{'...' if len(bad) > 5 else ''}. Pass a state_dict of the same torchvision "
            "architecture (or a pipi checkpoint of it)."
        )
    sd = {k: v for k, v in sd.items() if k in expected}
    shapes = [k for k, v in sd.items() if tuple(v.shape) != tuple(expected[k].shape)]
    if shapes:
        k = shapes[0]
        raise ConfigError(
            f"{path}: shape mismatch for {k}: file {tuple(sd[k].shape)}, "
            f"model {tuple(expected[k].shape)}."
        )
    body.load_state_dict(sd, strict=True)


def build_backbone(
    arch: str,
    *,
    weights: str | Path | None = "imagenet",
    in_channels: int = 3,
    prior_init: str = "kaiming",
) -> Backbone:
    """Build a per-frame backbone without its classifier.

    Parameters
    ----------
    arch : str
        One of :data:`ARCHS`.
    weights : str, Path or None
        ``"imagenet"`` (torchvision's ``DEFAULT``: :func:`imagenet_weights`, downloaded on
        first use), a path to a
        state_dict file (the torchvision 3-channel model, with or without its classifier; or a
        pipi checkpoint dict with a ``"state_dict"`` entry), or ``None`` / ``"none"`` for a
        random initialisation.
    in_channels : int
        Input channels; more than 3 widens the first convolution (RGB weights copied, the
        extra channels initialised per ``prior_init``).
    prior_init : {"kaiming", "zeros"}
        Initialisation of the extra input channels.

    Returns
    -------
    Backbone

    Raises
    ------
    ConfigError
        Unknown ``arch`` or ``prior_init``, ``in_channels < 3``, an unreadable or mismatched
        weights file, or ImageNet weights that cannot be downloaded.
    """
    if arch not in _SPECS:
        raise ConfigError(f"Unknown arch {arch!r}. Available: {list(ARCHS)}")
    if prior_init not in PRIOR_INITS:
        raise ConfigError(f"prior_init must be one of {list(PRIOR_INITS)}, got {prior_init!r}")
    if int(in_channels) != in_channels or in_channels < 3:
        raise ConfigError(f"in_channels must be an integer >= 3, got {in_channels!r}")
    spec = _SPECS[arch]
    source = resolve_weights(weights)

    if source == "imagenet":
        body = _load_imagenet(arch)
    else:
        body = torchvision.models.get_model(arch, weights=None)
    spec.strip_head(body)

    sd: dict[str, Tensor] | None = None
    if isinstance(source, Path):
        sd = read_weights_file(source)
        conv_key = ".".join(spec.first_conv) + ".weight"
        file_in = sd[conv_key].shape[1] if conv_key in sd and sd[conv_key].ndim == 4 else 3
        if file_in == 3:
            # The usual case: torchvision 3-channel weights, loaded before widening.
            _load_into_body(body, sd, spec, source)
            sd = None
        elif file_in != in_channels:
            raise ConfigError(
                f"{source} has a {file_in}-channel first convolution but in_channels="
                f"{in_channels} was asked for; pass in_channels={file_in} or 3-channel weights."
            )

    if in_channels != 3:
        conv = _get_submodule(body, spec.first_conv)
        _set_submodule(
            body, spec.first_conv, widen_first_conv(conv, in_channels, prior_init=prior_init)
        )
    if sd is not None:
        # A widened checkpoint (e.g. a trained 5-channel backbone): load after widening.
        _load_into_body(body, sd, spec, source)

    log.debug("built %s backbone (weights=%s, in_channels=%d)", arch, source, in_channels)
    return Backbone(arch, body, in_channels=in_channels)


def check_weights(weights: str) -> str:
    """Validate a ``weights`` option before a run starts: imagenet, none, or a readable file."""
    resolved = resolve_weights(weights)
    if isinstance(resolved, Path):
        read_weights_file(resolved)
    return weights


def find_backbone(model: nn.Module, *, hint: str = "") -> tuple[str, Backbone]:
    """The (path, module) of the pipi :class:`Backbone` inside ``model`` ("" if it is one).

    Raises :class:`~pipi.errors.ConfigError` (ending with ``hint``) when there is none.
    """
    for path, module in model.named_modules():
        if isinstance(module, Backbone):
            return path, module
    raise ConfigError(f"{type(model).__name__} holds no pipi Backbone; pass a model built by "
                      "pipi (pipi.serving.frame_model.build_frame_model or pipi.models.build_backbone)"
                      + (f", {hint}" if hint else ""))
