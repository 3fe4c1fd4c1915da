"""Settings of ``aggregate``'s statistics (all logged as params of the aggregate run)."""

from __future__ import annotations

from dataclasses import dataclass

from pipi.analysis.arms import CHANNEL_FAMILIES, HEADLINE_BACKBONE
from pipi.errors import ConfigError
from pipi.stats import RESAMPLE


@dataclass(frozen=True)
class AggregateOptions:
    """Settings of the statistics (all logged as params of the aggregate run)."""

    n_resamples: int = 1000            # bootstrap resamples (paper: 1,000)
    n_permutations: int = 10_000       # sign-flip patterns; exact when 2**seeds <= this (paper)
    confidence_level: float = 0.95
    seed: int = 0                      # rng of the bootstrap (and Monte Carlo sign flips)
    headline_backbone: str = HEADLINE_BACKBONE  # falls back to the backbone with most runs
    fpr_targets: tuple[float, ...] = (0.05, 0.10)  # paper's operating points
    sensitivity_target: float = 0.90
    ece_bins: int = 15                 # paper: 15 equal-width bins
    figures: bool = True
    resample: str = "video"            # bootstrap unit: test videos (clustered) | frames
                                       # (the published code's frame-level resampling)
    channel_family: str = "paper"      # BH family of the training-time channel ablation: the
                                       # paper's five paired tests | vs_pi (the three vs +PI)

    def __post_init__(self):
        if self.resample not in RESAMPLE:
            raise ConfigError(f"resample must be one of {list(RESAMPLE)}, got {self.resample!r}")
        if self.channel_family not in CHANNEL_FAMILIES:
            raise ConfigError(f"channel_family must be one of {list(CHANNEL_FAMILIES)}, got "
                              f"{self.channel_family!r}")
        if int(self.n_resamples) != self.n_resamples or self.n_resamples < 2:
            raise ConfigError(f"n_resamples must be an integer >= 2, got {self.n_resamples!r}")
