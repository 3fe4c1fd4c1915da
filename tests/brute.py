"""Statistics written from their definitions, for tests to check pipi.stats against."""

from __future__ import annotations

import numpy as np


def kernel_delong_z(y_pos, ref, new):
    """Paired DeLong z of AUC(new) - AUC(ref) for one class, from the m x n kernel."""
    def kern(s):
        p, n = s[y_pos], s[~y_pos]
        return (p[:, None] > n[None, :]) + 0.5 * (p[:, None] == n[None, :])

    ka, kb = kern(ref), kern(new)
    m, n = ka.shape
    d10 = kb.mean(1) - ka.mean(1)        # structural components of the difference
    d01 = kb.mean(0) - ka.mean(0)
    delta = kb.mean() - ka.mean()
    var = ((d10 - delta) ** 2).sum() / (m - 1) / m + ((d01 - delta) ** 2).sum() / (n - 1) / n
    return delta / np.sqrt(var)


def _auc(pos, score):
    """Mann-Whitney U / (m n), midranks for ties (the definition, via scipy's ranks)."""
    from scipy import stats

    r = stats.rankdata(score)
    m = pos.sum()
    return (r[pos].sum() - m * (m + 1) / 2) / (m * (pos.size - m))


def mean_delta(y, ref, new, classes, rows, *, skip=False):
    """Mean over seeds and classes of AUC(new) - AUC(ref) on the frames ``rows`` (repeats
    allowed); ref/new (S, N, C). A class with no positive or no negative there makes it NaN,
    or (``skip``) is left out of the mean."""
    yy = y[rows]
    out = []
    for k in classes:
        pos = yy == k
        if pos.all() or not pos.any():
            if skip:
                continue
            return float("nan")
        out += [_auc(pos, new[i][rows, k]) - _auc(pos, ref[i][rows, k]) for i in range(len(ref))]
    return float(np.mean(out))


def replay_delta_bootstrap(y, ref, new, classes, *, n_resamples, rng, videos=None,
                           strata=None):
    """The paired delta bootstrap written out: draw videos (or frames, optionally within
    strata) with ``np.random.default_rng(rng)``, draw again a resample that loses a class,
    recompute the statistic on the repeated frames; BCa from Efron & Tibshirani (1993)
    eqs. 14.10-14.15 (ties in z0 counted 1/2, linear-interpolation percentiles) with the
    jackknife leaving out one video (or frame). Returns a dict of the pieces."""
    from scipy import special

    gen = np.random.default_rng(rng)
    n = y.size
    if videos is not None:
        ids = np.unique(videos)
        members = [np.flatnonzero(videos == v) for v in ids]
    star, redrawn = [], 0
    while len(star) < n_resamples:
        if videos is not None:
            rows = np.concatenate([members[j] for j in gen.integers(0, len(ids), len(ids))])
        elif strata is not None:
            rows = np.concatenate([g[gen.integers(0, g.size, g.size)]
                                   for g in (np.flatnonzero(strata == s)
                                             for s in np.unique(strata))])
        else:
            rows = gen.integers(0, n, n)
        value = mean_delta(y, ref, new, classes, rows)
        if np.isnan(value):
            redrawn += 1
            continue
        star.append(value)
    star = np.array(star)
    hat = mean_delta(y, ref, new, classes, np.arange(n))
    leave = ([np.flatnonzero(videos != v) for v in np.unique(videos)] if videos is not None
             else [np.delete(np.arange(n), f) for f in range(n)])
    # a class the left-out unit empties drops out of that value (as PairedAUCBootstrap)
    jack = np.array([mean_delta(y, ref, new, classes, rows, skip=True) for rows in leave])
    z0 = special.ndtri(((star < hat).sum() + 0.5 * (star == hat).sum()) / star.size)
    d = jack.mean() - jack
    a = (d**3).sum() / (6.0 * ((d**2).sum()) ** 1.5)
    z = special.ndtri(np.array([0.025, 0.975]))
    levels = special.ndtr(z0 + (z0 + z) / (1 - a * (z0 + z)))
    below, above = (star <= 0).sum() + 1, (star >= 0).sum() + 1
    return {"statistic": hat, "star": star, "jack": jack, "z0": z0, "a": a,
            "percentile": np.percentile(star, [2.5, 97.5]),
            "bca": np.percentile(star, 100 * levels), "redrawn": redrawn,
            "pvalue": min(1.0, 2.0 * min(below, above) / (star.size + 1))}
