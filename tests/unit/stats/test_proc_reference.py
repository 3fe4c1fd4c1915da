"""DeLong against R's pROC: values hard-coded from pROC 1.18.0, and a live run when R is present.

CI installs R with: apt-get install -y --no-install-recommends r-base-core r-cran-proc
"""

from __future__ import annotations

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
Y = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0]
REF = [0.9, 0.8, 0.6, 0.6, 0.3, 0.7, 0.2, 0.6, 0.4, 0.1, 0.5, 0.5, 0.3, 0.2]
NEW = [0.2, 0.5, 0.1, 0.4, 0.3, 0.6, 0.7, 0.6, 0.4, 0.9, 0.8, 0.3, 0.4, 0.1]
PROC_Z = 4.9310029089348557
PROC_P = 8.1808515737560956e-07
PROC_DELTA_CI = (0.40168149417925414, 0.93165183915407912)
PROC_AUC = (0.21875, 0.8854166666666666297)
PROC_VAR = (0.0160528273809523794, 0.0077194940476190479)
PROC_COV = 0.0027467757936507934
PROC_CI_REF_95 = (0.0, 0.21875, 0.46707695250342773)
PROC_CI_NEW_90 = (0.74089875570243968, 0.88541666666666663, 1.0)


def test_delong_matches_hard_coded_proc():
    res = delong_test(Y, REF, NEW)
    assert res.statistic == pytest.approx(PROC_Z, rel=1e-12)
    assert res.pvalue == pytest.approx(PROC_P, rel=1e-10)
    assert res.confidence_interval == pytest.approx(PROC_DELTA_CI, rel=1e-12)
    assert (res.auc_ref, res.auc_new) == pytest.approx(PROC_AUC, rel=1e-14)
    assert (res.variance_ref, res.variance_new) == pytest.approx(PROC_VAR, rel=1e-12)
    assert res.covariance == pytest.approx(PROC_COV, rel=1e-12)
    ci = delong_ci(Y, REF)
    assert (ci.confidence_interval.low, ci.statistic, ci.confidence_interval.high) == pytest.approx(
        PROC_CI_REF_95, rel=1e-12, abs=1e-15
    )
    ci = delong_ci(Y, NEW, confidence_level=0.9)
    assert (ci.confidence_interval.low, ci.statistic, ci.confidence_interval.high) == pytest.approx(
        PROC_CI_NEW_90, rel=1e-12
    )


