"""Test-image perturbations of the paper's robustness study (section "Robustness to test-image
perturbations"), as pure numpy/Pillow functions on uint8 frames.

The eight perturbations of the paper's robustness table, plus the unperturbed baseline
``none`` (the paper's text says "nine perturbations" but lists these eight; with the baseline
they are the nine rows of its table):

* ``jpeg25``, ``jpeg50``, ``jpeg80``: a round trip through Pillow's JPEG encoder at quality
  25 / 50 / 80 with Pillow's default chroma subsampling (4:2:0), applied to the uint8 frame at
  the evaluation size (the frame cache's resolution, 224 x 224 for the paper's recipe), since
  that is the image the model sees;
* ``brightness-20``, ``brightness+20``: every 8-bit intensity multiplied by 0.8 / 1.2, rounded
  to the nearest integer and clipped to ``[0, 255]`` (a relative +-20 % shift, as Pillow's
  ``ImageEnhance.Brightness(0.8 / 1.2)`` does);
* ``noise0.02``, ``noise0.05``, ``noise0.10``: additive Gaussian noise with standard deviation
  sigma in ``[0, 1]`` intensity units, independent per pixel and channel, clipped to ``[0, 1]``
  and rounded back to the nearest 8-bit level.

Noise is drawn from a generator seeded by ``(seed, perturbation name, frame key)`` alone, so a
frame receives the identical noise in every run, batch composition and order it is perturbed
in: the paired RGB vs +PI comparison of the paper sees the same corrupted pixels in both arms.
Use a key that is stable across machines and staging folders, e.g. the frame's path relative to
the release root (the ``frame_path`` column of the predictions format).

The analytic prior is *not* handled here: a perturbation is the last step before
normalisation, and the caller recomputes ``P_blood`` and ``Phi`` from the perturbed pixels
(:class:`pipi.training.frames.FrameInputs` does that on whatever uint8 frames it is given).

Examples
--------
>>> import numpy as np
>>> frames = np.full((2, 8, 8, 3), 100, np.uint8)                  # (N, H, W, 3)
>>> out = apply_perturbation(frames, "brightness+20", keys=["a.jpg", "b.jpg"])
>>> int(out[0, 0, 0, 0])
120
>>> parse_perturbations("noise0.05,jpeg25")
['jpeg25', 'noise0.05']
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from pipi.errors import ConfigError

__all__ = [
    "KINDS",
    "PERTURBATIONS",
    "Perturbation",
    "apply_perturbation",
    "frame_rng",
    "get_perturbation",
    "list_perturbations",
    "parse_perturbations",
]

#: Salt of every frame's random stream (``frame_rng``); changing it changes every perturbation.
RNG_SALT = "pipi.perturb"
#: Perturbation families, in the paper's table order.
KINDS: tuple[str, ...] = ("none", "jpeg", "brightness", "noise")


@dataclass(frozen=True)
class Perturbation:
    """One registered test-image perturbation.

    Attributes
    ----------
    name : str
        Registry key, also the value of the ``pipi.perturbation`` tag (``"jpeg25"``).
    kind : str
        Family, one of :data:`KINDS`.
    level : float
        The family's parameter as the paper states it: JPEG quality (25, 50, 80), relative
        brightness change (-0.2, +0.2), noise sigma in [0, 1] units (0.02, 0.05, 0.10); 0 for
        ``none``.
    label : str
        Row label of the paper's robustness table (``"JPEG q=25"``).
    severity : float
        How strong the perturbation is on a common 0-1 scale within its family (the x axis of
        a lift-vs-strength figure): ``(100 - quality) / 100`` for JPEG, ``abs(level)`` for
        brightness and noise, 0 for ``none``.
    """

    name: str
    kind: str
    level: float
    label: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {list(KINDS)}, got {self.kind!r}")
        if self.kind == "jpeg" and not (1 <= self.level <= 95 and float(self.level).is_integer()):
            raise ConfigError(f"JPEG quality must be an integer in [1, 95], got {self.level!r}")
        if self.kind == "brightness" and not -1.0 < self.level:
            raise ConfigError(f"brightness level must be > -1, got {self.level!r}")
        if self.kind == "noise" and not self.level > 0:
            raise ConfigError(f"noise sigma must be > 0, got {self.level!r}")

    @property
    def stochastic(self) -> bool:
        """Whether the perturbation draws random numbers (then it depends on seed and key)."""
        return self.kind == "noise"

    @property
    def severity(self) -> float:
        if self.kind == "jpeg":
            return (100.0 - self.level) / 100.0
        return abs(float(self.level))


def _registry(*specs: Perturbation) -> dict[str, Perturbation]:
    out: dict[str, Perturbation] = {}
    for spec in specs:
        if spec.name in out:  # a duplicate is a programming error, refuse it loudly
            raise ConfigError(f"perturbation {spec.name!r} registered twice")
        out[spec.name] = spec
    return out


#: Every perturbation by name, in the paper's table order (baseline first).
PERTURBATIONS: dict[str, Perturbation] = _registry(
    Perturbation("none", "none", 0.0, "Baseline"),
    Perturbation("jpeg80", "jpeg", 80, "JPEG q=80"),
    Perturbation("jpeg50", "jpeg", 50, "JPEG q=50"),
    Perturbation("jpeg25", "jpeg", 25, "JPEG q=25"),
    Perturbation("brightness-20", "brightness", -0.2, "Brightness -20%"),
    Perturbation("brightness+20", "brightness", 0.2, "Brightness +20%"),
    Perturbation("noise0.02", "noise", 0.02, "Gaussian noise sigma=0.02"),
    Perturbation("noise0.05", "noise", 0.05, "Gaussian noise sigma=0.05"),
    Perturbation("noise0.10", "noise", 0.10, "Gaussian noise sigma=0.10"),
)


def list_perturbations(*, include_baseline: bool = True) -> list[str]:
    """Registered names in table order; ``include_baseline=False`` drops ``none``."""
    return [n for n in PERTURBATIONS if include_baseline or n != "none"]


def get_perturbation(name: str) -> Perturbation:
    """The registered spec of ``name``; a :class:`ConfigError` lists the valid names."""
    try:
        return PERTURBATIONS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"Unknown perturbation {name!r}. Available: {list(PERTURBATIONS)} "
            "(or 'all' for every one of them)."
        ) from None


def parse_perturbations(spec: str | Sequence[str]) -> list[str]:
    """Turn a CLI value into registered names in table order, without duplicates.

    Parameters
    ----------
    spec : str or sequence of str
        ``"all"`` (every perturbation, baseline included), a comma-separated list such as
        ``"jpeg25,noise0.05"`` (spaces ignored), or a list of names.

    Returns
    -------
    list of str
        The names, ordered as in :data:`PERTURBATIONS`.

    Raises
    ------
    ConfigError
        An empty value or an unknown name (the message lists the valid ones).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = {str(s).strip() for s in items} - {""}
    if not names:
        raise ConfigError(
            f"No perturbation given. Pass 'all' or a comma-separated subset of "
            f"{list(PERTURBATIONS)}."
        )
    if "all" in names:
        return list(PERTURBATIONS)
    unknown = sorted(names - PERTURBATIONS.keys())
    if unknown:
        raise ConfigError(
            f"Unknown perturbation(s) {unknown}. Available: {list(PERTURBATIONS)} "
            "(or 'all'); separate several with commas, e.g. 'jpeg25,noise0.05'."
        )
    return [n for n in PERTURBATIONS if n in names]


def frame_rng(seed: int, name: str, key: str) -> np.random.Generator:
    """The generator of one (seed, perturbation, frame) triple.

    A SHA-256 digest of the three values seeds a PCG64 generator, so the stream depends on
    nothing else (not on the batch, the order, the process or the platform).
    """
    digest = hashlib.sha256(f"{RNG_SALT}\0{int(seed)}\0{name}\0{key}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


def _jpeg(frame: np.ndarray, quality: int) -> np.ndarray:
    """One Pillow JPEG round trip of an (H, W, 3) uint8 frame."""
    buf = io.BytesIO()
    # subsampling left at Pillow's default (4:2:0), optimize/progressive off: the standard encoder
    Image.fromarray(frame, mode="RGB").save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    with Image.open(buf) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


def _brightness(images: np.ndarray, level: float) -> np.ndarray:
    # a 256-entry lookup table: round(v * (1 + level)) clipped to [0, 255] for every 8-bit v
    lut = np.clip(np.rint(np.arange(256, dtype=np.float64) * (1.0 + level)), 0, 255)
    return lut.astype(np.uint8)[images]  # (N, H, W, 3)


def _noise(images: np.ndarray, sigma: float, *, name: str, keys: Sequence[str],
           seed: int) -> np.ndarray:
    out = np.empty_like(images)
    for i, (frame, key) in enumerate(zip(images, keys)):
        # (H, W, 3) float32 standard normals, one per pixel and channel
        eps = frame_rng(seed, name, key).standard_normal(frame.shape, dtype=np.float32)
        x01 = frame.astype(np.float32) / np.float32(255.0) + np.float32(sigma) * eps
        out[i] = np.rint(np.clip(x01, 0.0, 1.0) * np.float32(255.0)).astype(np.uint8)
    return out


def _check_inputs(images: np.ndarray, keys: Sequence[str]) -> list[str]:
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise ValueError(
            f"images must be a uint8 numpy array (N, H, W, 3), got "
            f"{type(images).__name__} {getattr(images, 'dtype', '')}; perturb the uint8 "
            "frames of the cache before converting them to float."
        )
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must have shape (N, H, W, 3), got {images.shape}")
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a sequence of per-frame keys, not a single string")
    keys = [str(k) for k in keys]
    if len(keys) != len(images):
        raise ValueError(
            f"keys must name every frame: got {len(keys)} keys for {len(images)} frames"
        )
    return keys


def apply_perturbation(images: np.ndarray, name: str, *, keys: Sequence[str],
                       seed: int = 0) -> np.ndarray:
    """Apply a registered perturbation to a batch of uint8 RGB frames.

    Parameters
    ----------
    images : np.ndarray
        ``(N, H, W, 3)`` uint8 frames at the evaluation size (the frame cache's resolution).
    name : str
        A key of :data:`PERTURBATIONS`.
    keys : sequence of str
        One stable key per frame (e.g. its path relative to the release); with ``seed`` and
        ``name`` it alone determines the noise of that frame. Required for every
        perturbation so that callers never forget it for the stochastic ones.
    seed : int
        Seed of the noise; the same seed gives the same noise for a frame in every run.

    Returns
    -------
    np.ndarray
        ``(N, H, W, 3)`` uint8, a new array (the input is never modified).

    Raises
    ------
    ConfigError
        Unknown ``name``.
    ValueError
        ``images`` not uint8 ``(N, H, W, 3)``, or ``keys`` not one per frame.
    TypeError
        ``keys`` is a single string instead of a sequence of them.
    """
    spec = get_perturbation(name)
    keys = _check_inputs(images, keys)
    if spec.kind == "none":
        return images.copy()
    if spec.kind == "jpeg":
        out = np.empty_like(images)
        for i, frame in enumerate(images):
            out[i] = _jpeg(np.ascontiguousarray(frame), int(spec.level))
        return out
    if spec.kind == "brightness":
        return _brightness(images, spec.level)
    return _noise(images, spec.level, name=spec.name, keys=keys, seed=seed)
