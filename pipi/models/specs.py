"""What the library's architectures are called and what is known of them without building one
(no torch, issue 39): the backbone names and widths, the foundation towers, the transplant
subsets. The modules that build them (:mod:`pipi.models.backbones`,
:mod:`pipi.models.timm_backbones`, :mod:`pipi.models.surgery`) import these from here, so the
CLI's options, the configuration and the report read them without loading torch."""

from __future__ import annotations

from dataclasses import dataclass

from pipi.data.normalization import CLIP_STATS, IMAGENET_STATS, Stats

__all__ = ["ARCHS", "FEATURE_DIMS", "FOUNDATION", "PAPER_ARCHS", "PRIOR_INITS", "SUBSETS",
           "TIMM_PREFIX", "FoundationSpec", "Subset", "is_timm_arch"]

#: ``resnet50`` (ImageNet weights only; the published code's fourth backbone and the paper's
#: C1 limitation experiment) is built and loaded exactly as ``resnet18``.
ARCHS: tuple[str, ...] = ("efficientnet_b0", "resnet18", "convnext_tiny", "resnet50")
#: The three backbones of the paper's cross-backbone replication.
PAPER_ARCHS: tuple[str, ...] = ARCHS[:3]
# Width of the pooled embedding, i.e. the channel count of the pre-pool feature map.
FEATURE_DIMS: dict[str, int] = {"efficientnet_b0": 1280, "resnet18": 512, "convnext_tiny": 768,
                                "resnet50": 2048}
# How the prior channels of a widened first conv start: "kaiming" as the paper states,
# "zeros" as the published code does (a widened model then starts as the RGB model).
PRIOR_INITS: tuple[str, ...] = ("kaiming", "zeros")

TIMM_PREFIX = "timm:"


@dataclass(frozen=True)
class FoundationSpec:
    """A foundation-model tower: the timm model, its embedding width, its published form and
    the input normalisation it was trained with."""

    timm_name: str
    embed_dim: int          # width of the embedding the linear probe reads
    num_classes: int        # timm head: 0 (none) or the projection width
    source: str             # the published weights file the filter converts
    stats: Stats = IMAGENET_STATS


FOUNDATION: dict[str, FoundationSpec] = {
    "dinov2_vitb14": FoundationSpec("vit_base_patch14_dinov2", 768, 0,
                                    "DINOv2's released dinov2_vitb14 state dict"),
    "biomedclip_vitb16": FoundationSpec("vit_base_patch16_224", 512, 512,
                                        "BiomedCLIP's open_clip checkpoint (visual.* keys)",
                                        CLIP_STATS),
}


def is_timm_arch(arch: str) -> bool:
    """Whether ``arch`` is built by timm (a foundation tower or ``timm:<name>``)."""
    return isinstance(arch, str) and (arch in FOUNDATION or arch.startswith(TIMM_PREFIX))


@dataclass(frozen=True)
class Subset:
    """A block subset of the subset-block transplant.

    Attributes
    ----------
    name : str
        Letter of the paper's table (``"B"`` .. ``"F"``).
    label : str
        What the subset is (``"early"``, ``"mid"``, ``"late"``, ``"head"``, ``"all-but-stem"``).
    blocks : tuple of str
        Module paths inside the torchvision model (``Backbone.body``), e.g. ``"features.6"``.
    head : bool
        Whether pipi's linear classifier (``head``; the paper's "classifier") is included.
    """

    name: str
    label: str
    blocks: tuple[str, ...]
    head: bool

    @property
    def description(self) -> str:
        """The "blocks" column of the paper's table: ``"features.8 + classifier"``."""
        parts = [", ".join(self.blocks)] if self.blocks else []
        if self.head:
            parts.append("classifier")
        return " + ".join(parts)


def _subsets(early, mid, late, head_blocks, *, all_blocks) -> dict[str, Subset]:
    return {
        "B": Subset("B", "early", tuple(early), False),
        "C": Subset("C", "mid", tuple(mid), False),
        "D": Subset("D", "late", tuple(late), False),
        "E": Subset("E", "head", tuple(head_blocks), True),
        "F": Subset("F", "all-but-stem", tuple(all_blocks), True),
    }


def _features(*idx: int) -> list[str]:
    return [f"features.{i}" for i in idx]


#: Subsets per backbone (see the module docstring for the reasoning of the non-paper ones).
SUBSETS: dict[str, dict[str, Subset]] = {
    "efficientnet_b0": _subsets(
        _features(1, 2), _features(3, 4, 5), _features(6, 7), _features(8),
        all_blocks=_features(*range(1, 9)),
    ),
    "resnet18": _subsets(
        ["layer1"], ["layer2", "layer3"], ["layer4"], [],
        all_blocks=["layer1", "layer2", "layer3", "layer4"],
    ),
    "resnet50": _subsets(  # the same stages as ResNet-18 (bottleneck blocks)
        ["layer1"], ["layer2", "layer3"], ["layer4"], [],
        all_blocks=["layer1", "layer2", "layer3", "layer4"],
    ),
    "convnext_tiny": _subsets(
        _features(1), _features(2, 3, 4, 5), _features(6, 7), ["classifier.0"],
        all_blocks=[*_features(*range(1, 8)), "classifier.0"],
    ),
}
assert set(SUBSETS) == set(ARCHS), "every backbone needs its transplant subsets"
