"""Sign-flip permutation test of the mean of paired deltas (one delta per seed)."""

from __future__ import annotations

import numpy as np

from pipi.errors import ConfigError, DataError
from pipi.stats._common import as_rng, check_alternative
from pipi.stats._results import SignFlipResult

__all__ = ["sign_flip_test"]

#: Relative tolerance under which a null value counts as equal to the observed one (as scipy).
_REL_TIE = 1e-14


def _sign_flip_iv(deltas, n_resamples, alternative):
    """Validate sign_flip_test's input; return (deltas, n_resamples, alternative)."""
    d = np.asarray(deltas, dtype=float)
    if d.ndim != 1 or d.size < 1:
        raise DataError(f"deltas must be a non-empty 1-D array (one delta per seed), got {d.shape}")
    if not np.isfinite(d).all():
        raise DataError("deltas contain NaN or inf; drop the seeds whose delta is undefined")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ConfigError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return d, int(n_resamples), check_alternative(alternative)


def sign_flip_test(
    deltas,
    *,
    n_resamples: int = 10_000,
    alternative: str = "two-sided",
    rng: np.random.Generator | int | None = None,
) -> SignFlipResult:
    """Sign-flip (paired permutation) test that the mean delta is zero.

    Under H0 each per-seed delta (new - reference) is symmetric about 0, so its sign is
    exchangeable. The statistic is the mean delta.

    Parameters
    ----------
    deltas : array_like, shape (n,)
        One paired difference per seed, e.g. macro-AUC(new) - macro-AUC(ref).
    n_resamples : int, optional
        If ``2**n <= n_resamples`` all 2**n sign patterns are enumerated (exact test);
        otherwise this many random patterns are drawn (Monte Carlo).
    alternative : {"two-sided", "greater", "less"}, optional
        "greater": the new arm is better (mean delta > 0).
    rng : numpy.random.Generator, int or None, optional
        Used only by the Monte Carlo test.

    Returns
    -------
    SignFlipResult
        ``statistic`` (mean delta), ``pvalue``, ``exact``, ``n_resamples`` (patterns used)
        and the ``null_distribution`` of the mean.

    Notes
    -----
    Exact test: p = #{patterns with T* >= T} / 2**n (one-sided), and
    #{|T*| >= |T|} / 2**n two-sided; the observed pattern is one of the 2**n, so p is never 0.
    With 6 seeds there are 64 patterns and the smallest two-sided p is 2/64 = 0.03125
    (all deltas of one sign), the smallest one-sided p is 1/64. Monte Carlo test with m
    random patterns of which b are at least as extreme: p = (b + 1) / (m + 1) (Phipson &
    Smyth 2010). Values within a relative 1e-14 of the observed statistic count as ties
    (as in ``scipy.stats.permutation_test``).

    References
    ----------
    .. [1] R. A. Fisher, "The Design of Experiments", Oliver & Boyd, 1935, sec. 21.
    .. [2] B. Phipson and G. K. Smyth, "Permutation p-values should never be zero",
       Statistical Applications in Genetics and Molecular Biology 9(1):39, 2010.

    Examples
    --------
    >>> from pipi.stats import sign_flip_test
    >>> res = sign_flip_test([0.010, 0.004, 0.021, 0.007, 0.013, 0.002])
    >>> res.exact, res.n_resamples, res.pvalue
    (True, 64, 0.03125)
    """
    d, n_resamples, alternative = _sign_flip_iv(deltas, n_resamples, alternative)
    n = d.size
    observed = float(d.mean())
    exact = 2**n <= n_resamples
    if exact:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1  # (2**n, n) every pattern
        signs = 1.0 - 2.0 * bits
    else:
        signs = as_rng(rng).choice(np.array([-1.0, 1.0]), size=(n_resamples, n))
    null = signs @ d / n  # (patterns,)
    gamma = abs(observed) * _REL_TIE
    if alternative == "two-sided":
        hits = int((np.abs(null) >= abs(observed) - gamma).sum())
    elif alternative == "greater":
        hits = int((null >= observed - gamma).sum())
    else:
        hits = int((null <= observed + gamma).sum())
    m = null.size
    p = hits / m if exact else (hits + 1) / (m + 1)
    return SignFlipResult(
        statistic=observed,
        pvalue=float(min(p, 1.0)),
        exact=exact,
        n_resamples=m,
        null_distribution=null,
        alternative=alternative,
    )
