"""The analytic prior's options, without torch: what a command line, a config and a run's
params need to check and name them (:mod:`pipi.prior` computes the prior and re-exports these;
``pipi train --help`` imports only this, issue 39)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipi.errors import ConfigError

#: Hemoglobin index variants (their formulas: ``pipi.prior.HB_INDICES``, the same names).
HB_INDEX_NAMES: tuple[str, ...] = ("paper", "code", "code_v2")
#: Second-channel variants: ``Phi`` (paper) or ``log(G / B) * Phi`` (published code).
SECOND_CHANNELS: tuple[str, ...] = ("phi", "log_gb_phi")
#: Where the per-image percentiles of ``H`` are taken: every pixel (the published behaviour,
#: zero-filled rotation corners included) or only the field of view (``fov``).
PRIOR_MASKS: tuple[str, ...] = ("none", "fov")


#: The prior's steepness when nothing calibrated sets it (the published code's default).
DEFAULT_ALPHA = 4.0


@dataclass(frozen=True)
class PriorConfig:
    """Options of the analytic prior; ``prior_channels(x, **asdict(cfg))`` applies them.

    Parameters
    ----------
    alpha : float
        Steepness of the logistic; the published code's default (the paper calibrates it on a
        validation subset).
    lambda_eff : float or None
        Attenuation length of ``Phi`` in pixels; ``None`` means ``0.25 x`` the image diagonal.
    clip : tuple of float
        Per-image percentile bounds of ``H`` as fractions (paper: 1 % and 99 %).
    hb_index : {"paper", "code", "code_v2"}
        ``R / (R + G + B)`` (paper), ``R / (G + B)`` or the v2 prior (published code).
    second_channel : {"phi", "log_gb_phi"}
        ``Phi`` (paper) or ``log(G / B) * Phi`` (published code).
    """

    alpha: float = DEFAULT_ALPHA  # published code's default steepness
    lambda_eff: float | None = None  # None: 0.25 x diagonal (paper)
    clip: tuple[float, float] = (0.01, 0.99)  # paper: suppress specular outliers
    hb_index: str = "paper"  # paper formula; "code" = published R/(G+B)
    second_channel: str = "phi"  # paper channel; "log_gb_phi" = published code
    mask: str = "none"  # percentiles over every pixel (published) | "fov": the field of view only

    def resolved_lambda(self, height: int, width: int) -> float:
        """``lambda_eff`` in pixels for an image of this size (the default resolved)."""
        return default_lambda(height, width) if self.lambda_eff is None else float(self.lambda_eff)

    def __post_init__(self) -> None:
        alpha = self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ConfigError(f"alpha must be a real number > 0, got {alpha!r}")
        if not (math.isfinite(alpha) and alpha > 0):
            raise ConfigError(f"alpha must be finite and > 0, got {alpha!r}")
        lam = self.lambda_eff
        if lam is not None:
            if isinstance(lam, bool) or not isinstance(lam, (int, float)):
                raise ConfigError(f"lambda_eff must be None or a number > 0, got {lam!r}")
            if not (math.isfinite(lam) and lam > 0):
                raise ConfigError(
                    f"lambda_eff must be finite and > 0 (pixels), got {lam!r}; "
                    "pass None for 0.25 x the image diagonal"
                )
        clip = self.clip
        try:
            lo, hi = (float(c) for c in clip)
        except (TypeError, ValueError):
            raise ConfigError(
                f"clip must be a pair of fractions (lo, hi), e.g. (0.01, 0.99); got {clip!r}"
            ) from None
        if not (0.0 <= lo < hi <= 1.0):
            raise ConfigError(
                f"clip must satisfy 0 <= lo < hi <= 1 (fractions, not percents); got {clip!r}"
            )
        object.__setattr__(self, "clip", (lo, hi))
        if self.hb_index not in HB_INDEX_NAMES:
            raise ConfigError(
                f"Unknown hb_index {self.hb_index!r}. Available: {sorted(HB_INDEX_NAMES)}"
            )
        if self.mask not in PRIOR_MASKS:
            raise ConfigError(f"prior_mask={self.mask!r} is unknown. Available: {list(PRIOR_MASKS)}")
        if self.second_channel not in SECOND_CHANNELS:
            raise ConfigError(
                f"Unknown second_channel {self.second_channel!r}. "
                f"Available: {list(SECOND_CHANNELS)}"
            )


def default_lambda(h: int, w: int) -> float:
    """0.25 x the image diagonal, ``0.25 * sqrt(H**2 + W**2)`` (published implementation)."""
    return 0.25 * math.hypot(h, w)
