"""Cross-vendor retention in `aggregate` (pipi.analysis.retention, pipi.report.retention) and the
GalKva input built from runs, checked against brute-force computations with scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import study  # noqa: F401  (the module fixture)
from fakes import (
    GALKVA,
    RETENTION_SEEDS,
    brute_macro,
    evidence,
)
from scipy import stats

from pipi.analysis.retention import (
    ALL_SYSTEMS,
    retention_rows,
)

#: Signal on the true class: Kvasir (a, pi); Galar per capsule system (a, pi).
SEEDS = RETENTION_SEEDS


def mann_whitney_auc(pos, scores):
    """AUC as the Mann-Whitney U of positives over negatives (scipy), faster than sklearn."""
    u = stats.mannwhitneyu(scores[pos], scores[~pos], use_continuity=False).statistic
    return u / (pos.sum() * (~pos).sum())


@pytest.mark.slow
def test_retention_interval_agrees_with_a_brute_force_video_bootstrap(study):
    """Percentile interval of Δ_Galar*/Δ_Kvasir* from an independent resampling of videos
    with Mann-Whitney AUCs (scipy); Monte Carlo error allowed."""
    ev, cv, _ = evidence(study)
    row = next(r for r in retention_rows(ev, cv, n_resamples=300, seed=0)
               if r.class_set == "galkva" and r.subset == ALL_SYSTEMS)
    rng = np.random.default_rng(7)

    def boot(dataset):
        df = study["kv"] if dataset == "kvasir" else study["ga"]
        keep = np.isin(df["class_index"].to_numpy(), GALKVA)
        y, vid = df["class_index"].to_numpy()[keep], df["video_id"].to_numpy()[keep]
        videos = np.unique(vid)
        by_video = {v: np.flatnonzero(vid == v) for v in videos}
        out = []
        p = {(c, s): study["probs"][(dataset, c, s)][keep] for c in ("a", "pi") for s in SEEDS}
        for _ in range(200):
            idx = np.concatenate([by_video[v] for v in rng.choice(videos, len(videos))])
            out.append(np.mean([brute_macro(y[idx], p["pi", s][idx], GALKVA, mann_whitney_auc)
                                - brute_macro(y[idx], p["a", s][idx], GALKVA, mann_whitney_auc)
                                for s in SEEDS]))
        return np.array(out)

    ratio = boot("galar") / boot("kvasir")
    lo, hi = np.quantile(ratio, [0.025, 0.975])
    ci = row.retention.confidence_interval
    width = hi - lo
    assert abs(ci.low - lo) < 0.3 * width and abs(ci.high - hi) < 0.3 * width


