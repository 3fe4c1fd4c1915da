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
