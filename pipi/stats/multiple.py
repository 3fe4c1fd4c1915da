"""Multiple-comparison adjustment (Bonferroni, Benjamini-Hochberg) and significance markers.

Adjust once per declared family of comparisons (e.g. the 11 per-class DeLong tests of one
pair of arms), never per table: :class:`Family` and :func:`adjust_families` enforce that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from pipi.errors import ConfigError, DataError

__all__ = [
    "ADJUST_METHODS",
    "MARKER_LEVELS",
    "AdjustedFamily",
    "Family",
    "adjust_families",
    "adjust_pvalues",
    "significance_marker",
]

ADJUST_METHODS = ("bonferroni", "bh")
#: (threshold, marker), strictest first: p_adj < 0.001 -> "***".
MARKER_LEVELS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))


def _adjust_iv(pvalues, method):
    """Validate adjust_pvalues' input; return a float array."""
    if method not in ADJUST_METHODS:
        raise ConfigError(f"method must be one of {ADJUST_METHODS}, got {method!r}")
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise DataError(f"pvalues must be 1-D, got shape {p.shape}")
    finite = p[~np.isnan(p)]
    if ((finite < 0) | (finite > 1)).any():
        raise DataError(f"p-values must lie in [0, 1], got {finite[(finite < 0) | (finite > 1)]}")
    return p


def adjust_pvalues(pvalues, *, method: str = "bonferroni") -> np.ndarray:
    """Adjust a family of p-values for multiple comparisons.

    Parameters
    ----------
    pvalues : array_like, shape (m,)
        Raw p-values of one family. NaN entries (undefined tests) stay NaN and do not
        count towards the family size.
    method : {"bonferroni", "bh"}, optional
        "bonferroni": min(1, m p) (controls the family-wise error rate);
        "bh": Benjamini-Hochberg step-up adjusted p-values (controls the false discovery
        rate), computed by ``scipy.stats.false_discovery_control(p, method="bh")``.

    Returns
    -------
    ndarray, shape (m,)
        Adjusted p-values, in input order.

    References
    ----------
    .. [1] C. E. Bonferroni, "Teoria statistica delle classi e calcolo delle probabilita",
       Pubblicazioni del R. Istituto Superiore di Scienze Economiche e Commerciali di
       Firenze 8:3-62, 1936.
    .. [2] Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate: a practical
       and powerful approach to multiple testing", Journal of the Royal Statistical
       Society B 57(1):289-300, 1995.

    Examples
    --------
    >>> from pipi.stats import adjust_pvalues
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bonferroni")
    array([0.03, 0.12, 0.09])
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bh")
    array([0.03, 0.04, 0.04])
    """
    p = _adjust_iv(pvalues, method)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if not ok.any():
        return out
    if method == "bonferroni":
        out[ok] = np.minimum(1.0, p[ok] * ok.sum())
    else:
        out[ok] = stats.false_discovery_control(p[ok], method="bh")
    return out


def significance_marker(p_adj):
    """Paper markers for adjusted p-values: "***" < 0.001, "**" < 0.01, "*" < 0.05, else "".

    Parameters
    ----------
    p_adj : float or array_like of float
        Adjusted p-value(s); NaN gives "".

    Returns
    -------
    str or list of str
        One marker per p-value (a list for array input).

    Examples
    --------
    >>> from pipi.stats import significance_marker
    >>> significance_marker(0.004), significance_marker([0.0004, 0.03, 0.2])
    ('**', ['***', '*', ''])
    """
    if np.ndim(p_adj) == 0:
        p = float(p_adj)
        for level, marker in MARKER_LEVELS:
            if p < level:
                return marker
        return ""
    return [significance_marker(p) for p in np.asarray(p_adj, dtype=float).ravel()]


@dataclass(frozen=True)
class AdjustedFamily:
    """A family after adjustment: raw and adjusted p-values and markers, in label order."""

    name: str
    method: str
    labels: tuple[str, ...]
    pvalues: np.ndarray
    adjusted: np.ndarray
    markers: tuple[str, ...]

    def as_dict(self) -> dict[str, float]:
        """Adjusted p-value per label."""
        return dict(zip(self.labels, map(float, self.adjusted), strict=True))


@dataclass(frozen=True)
class Family:
    """A declared family of comparisons whose p-values are adjusted together, once.

    Parameters
    ----------
    name : str
        Unique name of the family (e.g. "perclass_delong/rgb_vs_pi/seed41").
    pvalues : mapping of label -> raw p-value
        E.g. class name -> per-class DeLong p.
    """

    name: str
    pvalues: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not self.name:
            raise ConfigError("a Family needs a non-empty name")
        if not self.pvalues:
            raise ConfigError(f"family {self.name!r} has no p-values")

    def adjust(self, *, method: str = "bonferroni") -> AdjustedFamily:
        """Adjust this family's p-values with `method` ("bonferroni" or "bh")."""
        labels = tuple(self.pvalues)
        raw = np.array([self.pvalues[k] for k in labels], dtype=float)
        adj = adjust_pvalues(raw, method=method)
        return AdjustedFamily(self.name, method, labels, raw, adj, tuple(significance_marker(adj)))


def adjust_families(
    families: Sequence[Family], *, method: str = "bonferroni"
) -> dict[str, AdjustedFamily]:
    """Adjust each declared family once; a family name may appear only once.

    Parameters
    ----------
    families : sequence of Family
    method : {"bonferroni", "bh"}, optional

    Returns
    -------
    dict of str -> AdjustedFamily
        Keyed by family name.

    References
    ----------
    .. [1] Y. Benjamini and Y. Hochberg, JRSS B 57(1):289-300, 1995.

    Examples
    --------
    >>> from pipi.stats import Family, adjust_families
    >>> out = adjust_families([Family("perclass", {"Ulcer": 0.01, "Polyp": 0.2})])
    >>> out["perclass"].as_dict(), out["perclass"].markers
    ({'Ulcer': 0.02, 'Polyp': 0.4}, ('*', ''))
    """
    out: dict[str, AdjustedFamily] = {}
    for fam in families:
        if fam.name in out:
            raise ConfigError(
                f"family {fam.name!r} is declared twice; merge its p-values into "
                "one Family so that it is adjusted once"
            )
        out[fam.name] = fam.adjust(method=method)
    return out
