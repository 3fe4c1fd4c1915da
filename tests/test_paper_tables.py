"""Issue 20: the paper's tables and intervals in `aggregate`'s report, on generated
predictions (no training, no server)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_aggregate_fidelity import B0, evidence_of, make_runs

from pipi import analysis
from pipi.report import build_report

SEEDS = [41, 42, 43, 44, 45, 47]


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("six")
    runs, dirs = make_runs(tmp, {"a": SEEDS, "pi": SEEDS, "distill": SEEDS})
    ev = evidence_of(runs, dirs)
    opts = analysis.AggregateOptions(n_resamples=200, figures=False)
    return ev, opts, build_report(ev, opts)


def test_seed_bca_column_beside_the_video_one_equals_scipy(six):
    ev, opts, rep = six
    t = rep.table("per_frame")
    assert {"95% BCa CI (videos)", "95% BCa CI (seeds)"} <= set(t.display.columns)
    row = t.data.set_index("cell").loc["pi"]
    assert row["seed_ci_unit"] == "seeds" and row["seed_ci_n_seeds"] == 6
    deltas = ev.arm(B0, "pi").macro - ev.arm(B0, "a").macro
    ref = stats.bootstrap((deltas,), np.mean, n_resamples=opts.n_resamples, method="BCa",
                          rng=np.random.default_rng(opts.seed))
    assert abs(row["seed_ci_bca_low"] - ref.confidence_interval.low) < 1e-9
    assert abs(row["seed_ci_bca_high"] - ref.confidence_interval.high) < 1e-9
    assert any(n.startswith("BCa CI (seeds)") for n in t.notes)


@pytest.mark.parametrize("key", ["paired_tests", "cross_backbone"])
def test_every_cross_seed_delta_table_has_both_labelled_intervals(six, key):
    _, _, rep = six
    t = rep.table(key)
    assert {"95% BCa CI (videos)", "95% BCa CI (seeds)"} <= set(t.display.columns)
    key_col = "mean_delta" if key == "paired_tests" else "delta"
    have = t.data[t.data[key_col].notna()]
    assert len(have) and have["seed_ci_bca_low"].notna().all()
    assert t.data.loc[t.data[key_col].isna(), "seed_ci_bca_low"].isna().all()
