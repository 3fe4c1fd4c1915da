"""Weight surgery between an RGB-trained and a +PI-trained per-frame model: the paper's
"Channel ablation" mechanism experiments (first-conv cosine, BN transplant, subset-block
transplant, Table "subset-transplant").

Every function takes the models pipi builds (:class:`~pipi.models.FrameClassifier`,
:class:`~pipi.models.DistillClassifier` or a bare :class:`~pipi.models.Backbone`) and never
changes its arguments: a transplant returns a deep copy of the RGB model.

Module paths (a :class:`~pipi.models.FrameClassifier` keeps the torchvision model as
``backbone.body`` and its own linear classifier as ``head``):

============  =====================  ==========================  ============================
subset        EfficientNet-B0        ResNet-18                   ConvNeXt-Tiny
============  =====================  ==========================  ============================
B (early)     features.1-2           layer1                      features.1
C (mid)       features.3-5           layer2, layer3              features.2-5
D (late)      features.6-7           layer4                      features.6-7
E (head)      features.8 + head      head                        classifier.0 + head
F (all-but-   features.1-8 + head    layer1-4 + head             features.1-7, classifier.0
stem)                                                            + head
============  =====================  ==========================  ============================

The EfficientNet-B0 rows are the paper's. The other two follow the feature-map resolution
(output stride) of the EfficientNet stages: B ends at stride 4, C spans strides 8-16, D is the
stride-32 stage, E is what follows the last stage (EfficientNet's 1x1 conv ``features.8``,
ConvNeXt's final LayerNorm ``classifier.0``; ResNet-18 has nothing there but its ``fc``, i.e.
pipi's ``head``), F is everything but the stem. ConvNeXt's downsampling layers
(``features.2/4/6``: LayerNorm + 2x2 conv) go with the stage they feed. The stem
(``features.0``, ResNet's ``conv1`` + ``bn1``) is never transplanted: its input channels
differ between a 3-channel and a 5-channel model.

The norm transplant moves every BatchNorm (affine weight and bias, running mean and variance,
``num_batches_tracked``) of the model, including the stem's, which does not depend on the input
channels: 49 layers and 245 tensors for EfficientNet-B0, as in the paper. ConvNeXt-Tiny has no
BatchNorm; there every LayerNorm (weight and bias, 23 layers) moves instead, and
:attr:`Transplant.kind` says which.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from pipi.errors import ConfigError
from pipi.models.backbones import Backbone, find_backbone
from pipi.models.specs import SUBSETS, Subset

__all__ = [
    "CHANNEL_NAMES",
    "NORM_KINDS",
    "SUBSETS",
    "Subset",
    "Transplant",
    "bn_transplant",
    "channel_norms",
    "first_conv",
    "first_conv_cosine",
    "first_conv_path",
    "norm_kind",
    "subset_paths",
    "subset_transplant",
]

#: Names of the first conv's input channels, by input-channel count.
CHANNEL_NAMES: dict[int, tuple[str, ...]] = {
    3: ("R", "G", "B"),
    5: ("R", "G", "B", "P_blood", "Phi"),
}

#: Norm layers a norm transplant moves, by kind; the first kind a backbone has is used.
NORM_KINDS: dict[str, tuple[type[nn.Module], ...]] = {
    "batchnorm": (nn.modules.batchnorm._BatchNorm,),
    "layernorm": (nn.LayerNorm,),  # torchvision's LayerNorm2d subclasses it
}




@dataclass(frozen=True, eq=False)
class Transplant:
    """A transplanted model and what was moved into it.

    Attributes
    ----------
    model : nn.Module
        A deep copy of the destination (RGB) model holding the moved tensors; same device,
        dtype and train/eval mode as the destination.
    what : str
        ``"bn"`` for the norm transplant, else the subset's name (``"D"``).
    kind : str
        ``"batchnorm"`` or ``"layernorm"`` for the norm transplant, ``"subset"`` otherwise.
    modules : tuple of str
        Paths (in the model) of the modules whose tensors were moved.
    tensors : tuple of str
        The state_dict keys copied from the source (parameters and buffers).
    """

    model: nn.Module
    what: str
    kind: str
    modules: tuple[str, ...]
    tensors: tuple[str, ...]

    @property
    def n_parameters(self) -> int:
        """Number of scalar values moved (parameters and buffers)."""
        sd = self.model.state_dict()
        return int(sum(sd[k].numel() for k in self.tensors))


# --------------------------------------------------------------------------- lookup
def _find_backbone(model: nn.Module) -> tuple[str, Backbone]:
    """The (path, module) of the pipi Backbone inside ``model`` ("" if it is one)."""
    return find_backbone(model, hint="or a checkpoint loaded into one.")


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def first_conv(model: nn.Module) -> nn.Conv2d:
    """The input convolution of a pipi model (the one widened for the prior channels).

    ``backbone.body.features.0.0`` for EfficientNet-B0 and ConvNeXt-Tiny,
    ``backbone.body.conv1`` for ResNet-18 (drop ``backbone.`` for a bare Backbone).
    """
    return _find_backbone(model)[1].first_conv


def first_conv_path(model: nn.Module) -> str:
    """The module path of :func:`first_conv` inside ``model``."""
    path, backbone = _find_backbone(model)
    return _join(path, "body", *backbone._spec.first_conv)


def norm_kind(model: nn.Module) -> str:
    """``"batchnorm"`` if the backbone has BatchNorm layers, else ``"layernorm"`` (ConvNeXt)."""
    _, backbone = _find_backbone(model)
    for kind, types in NORM_KINDS.items():
        if any(isinstance(m, types) for m in backbone.modules()):
            return kind
    raise ConfigError(f"{backbone.arch} has neither BatchNorm nor LayerNorm layers")


def subset_paths(model: nn.Module, subset: str | Subset) -> tuple[str, ...]:
    """Module paths inside ``model`` that a subset covers.

    Parameters
    ----------
    model : nn.Module
        A pipi model (its backbone's ``arch`` picks the subset table).
    subset : str or Subset
        A subset name of ``SUBSETS[arch]`` (``"B"`` .. ``"F"``) or a :class:`Subset`.

    Returns
    -------
    tuple of str
        E.g. ``("backbone.body.features.6", "backbone.body.features.7")``; ``"head"`` when the
        subset includes the classifier.
    """
    path, backbone = _find_backbone(model)
    sub = _resolve_subset(backbone.arch, subset)
    paths = [_join(path, "body", b) for b in sub.blocks]
    if sub.head:
        if not isinstance(getattr(model, "head", None), nn.Linear):
            raise ConfigError(
                f"subset {sub.name} includes the classifier but {type(model).__name__} has no "
                "linear 'head'; pass the whole FrameClassifier, not its backbone."
            )
        paths.append("head")
    modules = dict(model.named_modules())
    missing = [p for p in paths if p not in modules]
    if missing:  # the table and the torchvision model disagree: a bug, not a user error
        raise ConfigError(f"subset {sub.name} of {backbone.arch}: no modules {missing}")
    return tuple(paths)


def _resolve_subset(arch: str, subset: str | Subset) -> Subset:
    if isinstance(subset, Subset):
        return subset
    table = SUBSETS[arch]
    if subset not in table:
        raise ConfigError(
            f"Unknown subset {subset!r} for {arch}. Available: "
            + ", ".join(f"{s.name} ({s.label}: {s.description})" for s in table.values())
        )
    return table[subset]


# --------------------------------------------------------------------------- first conv
def _rgb_weights(model: nn.Module) -> torch.Tensor:
    w = first_conv(model).weight.detach()  # (out, in, kh, kw)
    return w[:, :3].reshape(-1).to("cpu", torch.float64)  # RGB input slices, flattened


def first_conv_cosine(model_a: nn.Module, model_b: nn.Module) -> float:
    """Cosine similarity of the RGB-channel weights of two first convolutions.

    Only input channels 0..2 enter (a 5-channel and a 3-channel model compare on their common
    RGB slices), flattened over (out_channels, 3, kh, kw), in float64.

    Returns
    -------
    float
        In [-1, 1]; NaN if either weight is all zero.

    Raises
    ------
    ConfigError
        The two first convolutions differ in shape apart from their input channels (different
        backbones).
    """
    wa, wb = _rgb_weights(model_a), _rgb_weights(model_b)
    if wa.shape != wb.shape:
        ca, cb = first_conv(model_a), first_conv(model_b)
        raise ConfigError(
            f"first convolutions do not match: {tuple(ca.weight.shape)} vs "
            f"{tuple(cb.weight.shape)}; compare runs of the same backbone."
        )
    denom = (wa.norm() * wb.norm()).item()
    if denom == 0.0:
        return float("nan")
    return float(torch.dot(wa, wb).item() / denom)


def channel_norms(model: nn.Module) -> dict[str, float]:
    """L2 norm of the first conv's weights per input channel.

    Keys are ``R, G, B`` (3 channels) or ``R, G, B, P_blood, Phi`` (5 channels), ``ch<i>``
    otherwise; each value is the norm of ``weight[:, i]`` over (out_channels, kh, kw). The
    paper's joint RGB norm is ``sqrt(R**2 + G**2 + B**2)``.
    """
    w = first_conv(model).weight.detach().to("cpu", torch.float64)  # (out, in, kh, kw)
    names = CHANNEL_NAMES.get(w.shape[1], tuple(f"ch{i}" for i in range(w.shape[1])))
    return {n: float(w[:, i].norm().item()) for i, n in enumerate(names)}


# --------------------------------------------------------------------------- transplants
def _check_pair(dst: nn.Module, src: nn.Module) -> None:
    """Same architecture and state_dict layout, up to the first conv's input channels."""
    _, bd = _find_backbone(dst)
    _, bs = _find_backbone(src)
    if bd.arch != bs.arch:
        raise ConfigError(
            f"cannot transplant between backbones {bs.arch} (source) and {bd.arch} "
            "(destination); pair runs of the same backbone."
        )
    sd_d, sd_s = dst.state_dict(), src.state_dict()
    if sd_d.keys() != sd_s.keys():
        extra = sorted(sd_d.keys() ^ sd_s.keys())[:5]
        raise ConfigError(
            f"the two models differ in structure (e.g. {extra}); pair models of the same "
            "kind (FrameClassifier with FrameClassifier, both with the same number of classes)."
        )
    conv_key = first_conv_path(dst) + ".weight"
    bad = [k for k in sd_d if k != conv_key and sd_d[k].shape != sd_s[k].shape]
    if bad:
        k = bad[0]
        raise ConfigError(
            f"shape mismatch for {k}: {tuple(sd_s[k].shape)} (source) vs "
            f"{tuple(sd_d[k].shape)} (destination); pair models of the same architecture."
        )


def _module_keys(model: nn.Module, paths: tuple[str, ...]) -> Iterator[str]:
    """State_dict keys (parameters and buffers) under each module path, in model order."""
    for key in model.state_dict():
        if any(key.startswith(p + ".") for p in paths):
            yield key


def _transplant(dst: nn.Module, src: nn.Module, keys: list[str]) -> nn.Module:
    out = copy.deepcopy(dst)
    sd_out, sd_src = out.state_dict(), src.state_dict()
    with torch.no_grad():
        for k in keys:  # state_dict tensors share storage with the module: copy in place
            sd_out[k].copy_(sd_src[k])
    return out


def bn_transplant(rgb_model: nn.Module, pi_model: nn.Module) -> Transplant:
    """Copy every norm layer of the +PI model into a copy of the RGB model.

    BatchNorm layers (affine weight and bias, running mean and variance,
    ``num_batches_tracked``) where the backbone has any, else LayerNorm layers (weight and
    bias; ConvNeXt-Tiny). All other tensors, the convolutions included, stay the RGB model's.

    Parameters
    ----------
    rgb_model : nn.Module
        Destination, e.g. the RGB (``a``) model of a seed.
    pi_model : nn.Module
        Source, e.g. the +PI (``pi``) model of the same seed and backbone.

    Returns
    -------
    Transplant
        ``what="bn"``, ``kind`` the norm kind moved, the copy in ``model``.

    Raises
    ------
    ConfigError
        The two models are not the same architecture.
    """
    _check_pair(rgb_model, pi_model)
    kind = norm_kind(rgb_model)
    types = NORM_KINDS[kind]
    paths = tuple(p for p, m in rgb_model.named_modules() if isinstance(m, types))
    keys = list(_module_keys(rgb_model, paths))
    return Transplant(_transplant(rgb_model, pi_model, keys), "bn", kind, paths, tuple(keys))


def subset_transplant(rgb_model: nn.Module, pi_model: nn.Module,
                      subset: str | Subset) -> Transplant:
    """Copy every parameter and buffer of a block subset from +PI into a copy of RGB.

    Parameters
    ----------
    rgb_model : nn.Module
        Destination (the RGB model of a seed).
    pi_model : nn.Module
        Source (the +PI model of the same seed and backbone).
    subset : str or Subset
        A name of ``SUBSETS[arch]`` (``"B"`` .. ``"F"``) or a custom :class:`Subset`.

    Returns
    -------
    Transplant
        ``what`` the subset's name, ``kind="subset"``, ``modules`` from :func:`subset_paths`.

    Raises
    ------
    ConfigError
        Unknown subset, or models of different architectures.
    """
    _check_pair(rgb_model, pi_model)
    paths = subset_paths(rgb_model, subset)
    conv_key = first_conv_path(rgb_model) + ".weight"
    keys = list(_module_keys(rgb_model, paths))
    if conv_key in keys:
        raise ConfigError(f"a subset may not include the stem ({conv_key}): its input "
                          "channels differ between the RGB and the +PI model")
    name = subset.name if isinstance(subset, Subset) else subset
    return Transplant(_transplant(rgb_model, pi_model, keys), name, "subset", paths, tuple(keys))
