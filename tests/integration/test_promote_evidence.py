"""`promote -P evidence=videos|seeds`: which interval gates, recorded on the version."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
from scipy import stats
from test_promote import SEEDS, _cli, _macro, registry  # noqa: F401  (fixture)

from pipi.errors import ConfigError
from pipi.workflows.promote import gather_evidence


def test_unknown_evidence_is_one_line():
    with pytest.raises(ConfigError, match="evidence='frames'"):
        gather_evidence({}, baseline="a", min_sign_positive=4, evidence="frames")


@pytest.mark.slow
def test_evidence_seeds_gates_on_the_seed_level_bca_and_records_it(registry, sqlite_tracking):  # noqa: F811
    c = mlflow.tracking.MlflowClient()
    name = "pipi-efficientnet_b0-b_plus"
    v = registry["versions"]["b_plus", 41]
    r = _cli("--model", name, "--version", v, "--evidence", "seeds")
    assert r.exit_code == 0, r.output
    assert "95% BCa CI (seeds)" in r.output
    mv = c.get_model_version(name, v)
    assert mv.tags["pipi.promote.evidence"] == "seeds"
    assert mv.tags["pipi.promote.ci_unit"] == "seeds"
    f = registry["folders"]
    deltas = np.array([_macro(f["b_plus", s]) - _macro(f["a", s]) for s in SEEDS])
    ref = stats.bootstrap((deltas,), np.mean, n_resamples=1000, method="BCa",
                          rng=np.random.default_rng(0))  # aggregate's defaults
    lo, hi = json.loads(mv.tags["pipi.promote.ci"])
    assert lo == pytest.approx(ref.confidence_interval.low, abs=1e-5)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=1e-5)
    both = json.loads(mv.tags["pipi.promote.intervals"])
    assert set(both) == {"seeds", "videos"}
    r = _cli("--model", name, "--version", v)  # default: videos, recorded as such
    assert c.get_model_version(name, v).tags["pipi.promote.evidence"] == "videos"
