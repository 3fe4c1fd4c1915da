"""How RGB input in [0, 1] is normalised: per-channel (mean, std) pairs (no torch: the report
and the CLI read them without loading the library)."""

from __future__ import annotations

__all__ = ["CLIP_STATS", "IMAGENET_MEAN", "IMAGENET_STATS", "IMAGENET_STD", "Stats"]

#: per-channel (mean, std) of an RGB input in [0, 1]
Stats = tuple[tuple[float, float, float], tuple[float, float, float]]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_STATS: Stats = (IMAGENET_MEAN, IMAGENET_STD)
#: OpenAI CLIP's, which open_clip (and so BiomedCLIP's image tower) was trained with
CLIP_STATS: Stats = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
