"""DeLong against R's pROC: values hard-coded from pROC 1.18.0, and a live run when R is present.

CI installs R with: apt-get install -y --no-install-recommends r-base-core r-cran-proc
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from pipi.stats import delong_ci, delong_test

# Hard-coded reference (pROC 1.18.0, R 4.2). Ties in both arms, reference AUC < 0.5,
# AUC CIs clipped at 0 and at 1. R code:
#
#   library(pROC)
#   y   <- c(0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0)
#   ref <- c(0.9, 0.8, 0.6, 0.6, 0.3, 0.7, 0.2, 0.6, 0.4, 0.1, 0.5, 0.5, 0.3, 0.2)
#   new <- c(0.2, 0.5, 0.1, 0.4, 0.3, 0.6, 0.7, 0.6, 0.4, 0.9, 0.8, 0.3, 0.4, 0.1)
#   r_ref <- roc(y, ref, direction = "<", levels = c(0, 1), quiet = TRUE)
#   r_new <- roc(y, new, direction = "<", levels = c(0, 1), quiet = TRUE)
#   t <- roc.test(r_new, r_ref, method = "delong", paired = TRUE)
#   print(c(t$statistic, t$p.value, t$conf.int), digits = 17)
#   print(c(auc(r_ref), auc(r_new), var(r_ref), var(r_new), cov(r_new, r_ref)), digits = 17)
#   print(as.numeric(ci.auc(r_ref, method = "delong")), digits = 17)
#   print(as.numeric(ci.auc(r_new, method = "delong", conf.level = 0.9)), digits = 17)
_R_SCRIPT = r"""
suppressMessages(library(pROC))
args <- commandArgs(trailingOnly = TRUE)
for (f in args) {
  d <- read.csv(f)
  r_ref <- roc(d$y, d$ref, direction = "<", levels = c(0, 1), quiet = TRUE)
  r_new <- roc(d$y, d$new, direction = "<", levels = c(0, 1), quiet = TRUE)
  t <- roc.test(r_new, r_ref, method = "delong", paired = TRUE, conf.level = 0.9)
  ci <- as.numeric(ci.auc(r_ref, method = "delong", conf.level = 0.95))
  v <- c(t$statistic, t$p.value, t$conf.int, auc(r_ref), auc(r_new), var(r_ref),
         var(r_new), cov(r_new, r_ref), ci[1], ci[3])
  cat(sprintf("%.17g", v), "\n")
}
"""


def _datasets():
    """(y, ref, new) with ties, AUC < 0.5, imbalance, a tiny set and a large set."""
    out = []
    for seed, n, decimals, flip in [
        (0, 60, 1, False),
        (1, 200, 0, True),
        (2, 35, 2, False),
        (3, 1500, 1, True),
        (4, 9, 1, False),
    ]:
        rng = np.random.default_rng(seed)
        y = (rng.random(n) < 0.3).astype(int)
        y[:2] = [0, 1]
        y[2:4] = [0, 1]
        common = rng.normal(size=n)
        ref = np.round(common + 0.5 * y + rng.normal(size=n), decimals)
        new = np.round(common + 1.0 * y + rng.normal(size=n), decimals)
        if flip:
            ref = -ref  # reference below 0.5
        out.append((y, ref, new))
    return out


@pytest.mark.skipif(
    shutil.which("Rscript") is None,
    reason="Rscript not installed (apt-get install r-base-core r-cran-proc)",
)
def test_delong_matches_live_proc(tmp_path):
    probe = subprocess.run(
        ["Rscript", "-e", "library(pROC)"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("R package pROC not installed (apt-get install r-cran-proc)")
    files = []
    data = _datasets()
    for i, (y, ref, new) in enumerate(data):
        f = tmp_path / f"d{i}.csv"
        np.savetxt(
            f,
            np.column_stack([y, ref, new]),
            delimiter=",",
            header="y,ref,new",
            comments="",
            fmt=["%d", "%.17g", "%.17g"],
        )
        files.append(str(f))
    script = tmp_path / "proc.R"
    script.write_text(_R_SCRIPT)
    out = subprocess.run(
        ["Rscript", str(script), *files], capture_output=True, text=True, check=True, timeout=120
    )
    rows = [np.array(line.split(), dtype=float) for line in out.stdout.strip().splitlines()]
    assert len(rows) == len(data)
    for (y, ref, new), r in zip(data, rows, strict=True):
        res = delong_test(y, ref, new, confidence_level=0.9)
        ci = delong_ci(y, ref)
        ours = [
            res.statistic,
            res.pvalue,
            *res.confidence_interval,
            res.auc_ref,
            res.auc_new,
            res.variance_ref,
            res.variance_new,
            res.covariance,
            *ci.confidence_interval,
        ]
        np.testing.assert_allclose(ours, r, rtol=1e-9, atol=1e-13)
    assert any(r[4] < 0.5 for r in rows)  # a reference AUC below 0.5 was compared
