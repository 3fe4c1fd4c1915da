"""Small validation helpers shared by the :mod:`pipi.stats` modules."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from scipy import special

from pipi.errors import ConfigError, DataError
from pipi.stats._results import DegenerateDataWarning

ALTERNATIVES = ("two-sided", "greater", "less")


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """A numpy Generator from a Generator, a seed or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise ConfigError(f"rng must be a numpy Generator, an int seed or None, got {type(rng)!r}")


def check_alternative(alternative: str) -> str:
    """Raise ConfigError unless `alternative` is one of ALTERNATIVES."""
    if alternative not in ALTERNATIVES:
        raise ConfigError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    return alternative


def check_level(confidence_level: float) -> float:
    """Raise ConfigError unless 0 < confidence_level < 1."""
    level = float(confidence_level)
    if not 0.0 < level < 1.0:
        raise ConfigError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    return level


def z_pvalue(z: float, alternative: str) -> float:
    """Normal p-value of z (positive z: new arm better)."""
    if not np.isfinite(z):
        return float("nan")
    if alternative == "two-sided":
        return float(2.0 * special.ndtr(-abs(z)))
    if alternative == "greater":
        return float(special.ndtr(-z))
    return float(special.ndtr(z))


def warn_degenerate(message: str, *, stacklevel: int = 3) -> None:
    """Emit a DegenerateDataWarning (the caller then returns NaN)."""
    warnings.warn(message, DegenerateDataWarning, stacklevel=stacklevel)


def binary_labels(y_true, name: str = "y_true") -> np.ndarray:
    """A 1-D bool array from 0/1 (or bool) labels; DataError otherwise."""
    y = np.asarray(y_true)
    if y.ndim != 1:
        raise DataError(f"{name} must be 1-D, got shape {y.shape}")
    if y.dtype != bool:
        uniq = np.unique(y)
        if not np.isin(uniq, (0, 1)).all():
            raise DataError(
                f"{name} must hold binary labels 0/1 (1 = positive), got values {uniq[:5]}; "
                "use y == k for a one-vs-rest class"
            )
        y = y == 1
    return y


def scores_1d(scores, n: int, name: str) -> np.ndarray:
    """A finite 1-D float array of length n."""
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or s.shape[0] != n:
        raise DataError(f"{name} must be 1-D of length {n} (one score per frame), got {s.shape}")
    if not np.isfinite(s).all():
        raise DataError(f"{name} contains NaN or inf; drop or impute those frames first")
    return s


def class_labels_and_probs(
    y_labels, probs, classes: Sequence[int] | None, *, name: str = "probs"
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Validate (labels, probs (n, K), classes) for one-vs-rest metrics.

    `y_labels` is an int class index per frame or a one-hot (n, K) matrix. Returns the int
    labels, the float probabilities and the tuple of class columns to evaluate.
    """
    p = np.asarray(probs, dtype=float)
    if p.ndim != 2:
        raise DataError(f"{name} must be 2-D (frames, classes), got shape {p.shape}")
    n, k = p.shape
    if not np.isfinite(p).all():
        raise DataError(f"{name} contains NaN or inf")
    y = np.asarray(y_labels)
    if y.ndim == 2:
        if y.shape != p.shape:
            raise DataError(f"one-hot labels have shape {y.shape}, expected {p.shape}")
        if not (np.isin(y, (0, 1)).all() and (y.sum(axis=1) == 1).all()):
            raise DataError("one-hot labels must have exactly one 1 per row")
        y = y.argmax(axis=1)
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"labels must be 1-D of length {n} or one-hot, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            raise DataError(f"labels must be integer class indices, got dtype {y.dtype}")
    if n and (y.min() < 0 or y.max() >= k):
        raise DataError(
            f"labels must lie in [0, {k}) (columns of {name}), got {y.min()}..{y.max()}"
        )
    if classes is None:
        cls = tuple(range(k))
    else:
        cls = tuple(int(c) for c in classes)
        bad = [c for c in cls if not 0 <= c < k]
        if bad:
            raise ConfigError(f"classes {bad} are not columns of {name} (K = {k})")
        if len(set(cls)) != len(cls):
            raise ConfigError(f"classes must not repeat, got {cls}")
        if not cls:
            raise ConfigError("classes must name at least one class column")
    return y, p, cls
