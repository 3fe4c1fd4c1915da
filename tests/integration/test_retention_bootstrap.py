"""Cross-vendor retention in `aggregate` (pipi.analysis.retention, pipi.report.retention) and the
GalKva input built from runs, checked against brute-force computations with scikit-learn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fakes import (
    GALAR_CLASSES,
    GALKVA,
    KVASIR_CLASSES,
    SYSTEMS,
    brute_macro,
    evidence,
    frames,
    probs_for,
    run_row,
)
from scipy import stats

from pipi.analysis.retention import (
    ALL_SYSTEMS,
    retention_rows,
)
from pipi.predictions import predictions_frame, write_predictions

#: Signal on the true class: Kvasir (a, pi); Galar per capsule system (a, pi).
KVASIR_Q = {"a": 1.0, "pi": 1.6}
GALAR_Q = {"PillCam SB3": {"a": 0.8, "pi": 1.2}, "Olympus": {"a": 0.8, "pi": 0.9}}
SEEDS = (41, 42, 43)








@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Kvasir runs of a and pi (3 seeds) and their Galar children, as `load_runs` returns them."""
    tmp = tmp_path_factory.mktemp("retention")
    kv = frames(6, 50, KVASIR_CLASSES, 0, "k")
    ga = frames(6, 50, GALAR_CLASSES, 1, "g", systems=SYSTEMS)
    rows, dirs, probs = [], {}, {}
    for ci, cell in enumerate(("a", "pi")):
        for s in SEEDS:
            kid, gid = f"k{cell}{s}".ljust(32, "0"), f"g{cell}{s}".ljust(32, "0")
            p = probs_for(kv, KVASIR_Q[cell], 100 * ci + s)
            dirs[kid] = write_predictions({"test": predictions_frame(kv, p)}, tmp / kid)
            q = ga["capsule_system"].map(lambda x, c=cell: GALAR_Q[x][c]).to_numpy()
            g = probs_for(ga, q, 1000 + 100 * ci + s)
            dirs[gid] = write_predictions({"test": predictions_frame(ga, g)}, tmp / gid)
            probs[("kvasir", cell, s)], probs[("galar", cell, s)] = p, g
            rows.append(run_row(kid, cell, s, digest="k" * 64))
            rows.append(run_row(gid, f"{cell}@zero_shot", s, digest="g" * 64, study="galar",
                                base=kid, params={"galar.fold": "evaluation"}, entry="galar"))
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return {"runs": runs, "dirs": dirs, "kv": kv, "ga": ga, "probs": probs, "tmp": tmp}






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


