"""The paper's canonical Kvasir-Capsule split, shipped as ``pipi/data/staging/kvasir_paper_split.json``.

The file lists the paper's 6 val and 7 test videos and where they come from (its
``provenance``); train is every other staged video. :func:`paper_split_applies` is the rule
``stage kvasir --split auto`` (the default) uses to pick it: the staged release has exactly the
release's 43 labelled videos and all 13 val/test ids are among them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from pipi.errors import DataError

__all__ = ["PaperSplit", "paper_split", "paper_split_applies", "paper_video_split"]

_FILE = "kvasir_paper_split.json"


@dataclass(frozen=True)
class PaperSplit:
    """The paper's val and test videos (train: every other staged video)."""

    val: tuple[str, ...]
    test: tuple[str, ...]
    n_videos: int  # the release's labelled videos (43)
    provenance: tuple[str, ...]
    source: str = f"pipi/data/{_FILE}"

    @property
    def held_out(self) -> frozenset[str]:
        return frozenset(self.val) | frozenset(self.test)


def paper_split() -> PaperSplit:
    """Read the packaged paper split."""
    doc = json.loads(resources.files("pipi.data.staging").joinpath(_FILE).read_text("utf-8"))
    return PaperSplit(val=tuple(doc["val"]), test=tuple(doc["test"]),
                      n_videos=int(doc["n_videos"]), provenance=tuple(doc["provenance"]))


def paper_split_applies(videos: set[str], split: PaperSplit | None = None) -> bool:
    """True when ``videos`` are the release's labelled videos: exactly ``n_videos`` (43) of
    them, the paper's 13 val and test ids among them."""
    split = split or paper_split()
    return len(videos) == split.n_videos and split.held_out <= set(videos)


def paper_video_split(videos: set[str], source: str) -> dict[str, str]:
    """{video: split} of the paper's split over ``videos``; refuses, naming ``source`` (the
    metadata file), when a val or test video of the paper is not staged."""
    split = paper_split()
    missing = sorted(split.held_out - set(videos))
    if missing:
        raise DataError(
            f"{source}: --split paper needs the paper's val and test videos, and "
            f"{len(missing)} of them are not in it: {missing}; use --split random (or auto)"
        )
    out = {v: "train" for v in videos}
    out.update({v: "val" for v in split.val})
    out.update({v: "test" for v in split.test})
    return dict(sorted(out.items()))
