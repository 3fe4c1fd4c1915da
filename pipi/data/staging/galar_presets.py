"""Galar staging recipes: how ``frames_per_class`` keeps frames (``sample``) and the named
presets of ``stage galar --preset`` (the paper's 10-video subset)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipi.classes import class_index
from pipi.data.staging.galar_release import parse_video_spec
from pipi.errors import DataError

__all__ = ["GALAR_PRESETS", "SAMPLE_RULES", "GalarPreset", "resolve_preset", "sample_frames"]

_SEED_SAMPLE = 0x53414D50  # domain separation of the sampling generator
#: How ``frames_per_class`` keeps frames: a seeded uniform draw, or the first frames of each
#: class in (video id, frame) order (the published staging script's cap).
SAMPLE_RULES = ("random", "first")


@dataclass(frozen=True)
class GalarPreset:
    """A named staging recipe (``stage galar --preset``)."""

    frames_per_class: int
    sample: str
    claim: str               # "table": a multi-label frame goes to its first class in the
                             # mapping table's order (the published script); else the priority
    n_videos: int            # videos the recipe needs (its ids must be given: --videos)
    n_frames: int            # the frames the paper reports for it
    note: str


#: The paper's Galar subset (sec:galar-zeroshot: "a 10-video subset (15,298 frames) covering
#: 13 of the 14 Kvasir-Capsule labels"). The rules are those of the published staging script
#: (setup_galar.py: at most 10,000 frames per class, the first ones in video/frame order, a
#: multi-label frame to its first class in the mapping table, every section). Which 10 videos
#: is not determinable: neither the paper nor the released code or benchmark names them.
GALAR_PRESETS = {"paper-subset": GalarPreset(
    frames_per_class=10_000, sample="first", claim="table", n_videos=10, n_frames=15_298,
    note="the paper's 10-video Galar subset; its video ids are not published, pass them "
         "with --videos")}


# --------------------------------------------------------------------------- sampling
def sample_frames(cands: pd.DataFrame, frames_per_class: int | None, seed: int,
            rule: str = "random") -> pd.DataFrame:
    if frames_per_class is None:
        return cands
    parts = []
    for cls, grp in cands.groupby("class", sort=True):
        grp = grp.sort_values(["vid", "frame_number"])
        if len(grp) > frames_per_class and rule == "first":
            grp = grp.iloc[:frames_per_class]
        elif len(grp) > frames_per_class:
            rng = np.random.default_rng(
                np.random.SeedSequence([int(seed), _SEED_SAMPLE, class_index(cls)])
            )
            grp = grp.iloc[np.sort(rng.choice(len(grp), size=frames_per_class, replace=False))]
        parts.append(grp)
    return pd.concat(parts, ignore_index=True) if parts else cands.iloc[:0]


def resolve_preset(name, videos, frames_per_class, sample) -> GalarPreset | None:
    """The preset of ``stage_galar``, its options checked (one line each)."""
    if name is None:
        return None
    if name not in GALAR_PRESETS:
        raise DataError(f"preset={name!r} is unknown. Available: {list(GALAR_PRESETS)}")
    pre = GALAR_PRESETS[name]
    if frames_per_class not in (None, pre.frames_per_class) or sample not in ("random",
                                                                              pre.sample):
        raise DataError(f"preset={name} sets frames_per_class={pre.frames_per_class} and "
                        f"sample={pre.sample}; leave them out")
    ids = parse_video_spec(videos) or ()
    if len(ids) != pre.n_videos:
        raise DataError(f"preset={name}: {pre.note} ({pre.n_videos} ids, got {len(ids)})")
    return pre
