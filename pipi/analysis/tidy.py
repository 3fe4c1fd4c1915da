"""The tidy table: one row per (run, metric), recomputed from the test predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipi.analysis.evidence import Evidence
from pipi.stats import brier_score, expected_calibration_error

__all__ = ["aggregate_over_seeds", "tidy_metrics"]


def tidy_metrics(evidence: Evidence, *, ece_bins: int = 15) -> pd.DataFrame:
    """One row per (run, metric), recomputed from the test predictions.

    Metrics: ``macro_auc`` (headline classes), ``auc/<Class>``, ``accuracy`` (argmax),
    ``ece`` (15 bins, mean over headline classes), ``brier`` (one-vs-rest, mean over
    headline classes) and ``brier_multiclass``. Columns: run_id, backbone, cell, seed,
    metric, value.
    """
    rows = []
    y, cls = evidence.labels, evidence.classes
    for arm in evidence.arms.values():
        for i, (seed, rid) in enumerate(zip(arm.seeds, arm.run_ids, strict=True)):
            p = arm.probs[i].astype(np.float64)
            vals = {"macro_auc": float(arm.macro[i]),
                    **{f"auc/{evidence.names[k]}": float(a)
                       for k, a in zip(cls, arm.auc[i], strict=True)},
                    "accuracy": float((p.argmax(1) == y).mean())}
            ece = expected_calibration_error(y, p, n_bins=ece_bins, classes=cls)
            brier = brier_score(y, p, classes=cls)
            vals.update(ece=ece.statistic, brier=brier.statistic,
                        brier_multiclass=brier.multiclass)
            rows += [(rid, arm.backbone, arm.cell, seed, m, v) for m, v in vals.items()]
    return pd.DataFrame(rows, columns=["run_id", "backbone", "cell", "seed", "metric", "value"])


def aggregate_over_seeds(tidy: pd.DataFrame, *, metric: str = "macro_auc") -> pd.DataFrame:
    """Cross-seed summary of one metric per (backbone, cell).

    Returns columns backbone, cell, metric, n_seeds, mean, sd (sample sd, ddof = 1; NaN for
    one seed), min, max, seeds (tuple) and run_ids (tuple, same order as seeds).
    """
    sub = tidy[tidy["metric"] == metric].sort_values(["backbone", "cell", "seed"])
    out = []
    for (backbone, cell), g in sub.groupby(["backbone", "cell"], sort=False):
        v = g["value"].to_numpy(float)
        out.append({"backbone": backbone, "cell": cell, "metric": metric, "n_seeds": len(v),
                    "mean": float(np.mean(v)),
                    "sd": float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                    "min": float(v.min()), "max": float(v.max()),
                    "seeds": tuple(int(s) for s in g["seed"]), "run_ids": tuple(g["run_id"])})
    return pd.DataFrame(out, columns=["backbone", "cell", "metric", "n_seeds", "mean", "sd",
                                      "min", "max", "seeds", "run_ids"])
