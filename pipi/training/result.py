"""What a fit hands back: the trained module, its predictions and metrics (a typed record)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch

__all__ = ["FitResult"]


@dataclass(frozen=True)
class FitResult:
    """A fitted cell, per-frame (:func:`pipi.training.frames.run_frame_cell`) or sequence
    (:func:`pipi.training.sequence.fit_sequence`).

    ``predictions`` maps ``val`` and ``test`` to their prediction frames (the v1 format);
    ``metrics`` holds ``val/*`` and ``test/*`` scalars and ``best_epoch``; ``classes`` and
    ``val_classes`` are the class indices with positives in the test and val splits;
    ``history`` is one dict of metrics per epoch. A per-frame fit also gives the resolved
    ``runtime`` parameters and the staged ``frames`` and ``manifest`` it trained on; a cached
    linear probe the path of its backbone ``features``.
    """

    model: torch.nn.Module
    predictions: dict[str, pd.DataFrame]
    metrics: dict[str, float]
    classes: list[int]
    val_classes: list[int]
    history: list[dict]
    runtime: dict[str, str] = field(default_factory=dict)
    frames: pd.DataFrame | None = None
    manifest: dict | None = None
    features: str = ""

    @property
    def best_epoch(self) -> int:
        return self.metrics["best_epoch"]

    @property
    def test_predictions(self) -> pd.DataFrame:
        return self.predictions["test"]
