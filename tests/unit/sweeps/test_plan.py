"""`ablate`: study plans, idempotent nested sweeps, retries, channel_infer, the SLURM executor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipi.cells import SEQUENCE_CELLS
from pipi.errors import ConfigError
from pipi.models import ARCHS
from pipi.sweeps import plan as ablate
from pipi.sweeps.plan import ChildResult, plan


def test_eight_cell_plan_puts_bases_first():
    kids = plan(ablate.get_study("eight_cell"), seeds=(41, 42), backbones=("efficientnet_b0",),
                profile="smoke", weights="none", digest="d" * 64)
    cells = [k.cfg.cell for k in kids]
    assert cells[:2] == ["a", "a"] and set(cells[2:6]) == {"pi", "distill"}
    assert [k.role for k in kids[2:6]] == ["base"] * 4
    assert set(cells[6:]) == set(SEQUENCE_CELLS) and len(kids) == 2 * (1 + 2 + 9)
    assert len({k.config_hash for k in kids}) == len(kids)
    # the hash is the one `train` tags its run with (config + data digest + code version)
    from pipi import tracking

    k = kids[0]
    assert k.config_hash == tracking.config_hash(tracking.config_key(k.cfg, "d" * 64))


def test_study_backbones_and_validation():
    kids = plan(ablate.get_study("cross_backbone"), seeds=(1,), backbones=ARCHS,
                profile="smoke", weights="none", digest="x")
    assert {(k.cfg.cell, k.cfg.backbone) for k in kids} == {(c, b) for c in ("a", "pi")
                                                           for b in ARCHS}
    with pytest.raises(ConfigError, match="is unknown"):
        ablate.get_study("nine_cell")
    with pytest.raises(ConfigError, match="channel_infer"):
        plan(ablate.get_study("channel_infer"), seeds=(1,), backbones=("resnet18",),
             cells=("a",), profile="smoke", weights="none", digest="x")
    assert [k.cfg.cell for k in plan(ablate.get_study("channel_train"), seeds=(1,),
                                     backbones=("resnet18",), profile="smoke",
                                     weights="none", digest="x")] == \
        ["pi", "pblood_only", "phi_only"]


def test_summary_table_means_over_seeds():
    kids = [ChildResult("a", "efficientnet_b0", s, "study", "trained", f"r{s}", 1,
                        test_macro_auc=v) for s, v in ((1, 0.6), (2, 0.7), (3, 0.8))]
    kids.append(ChildResult("b", "efficientnet_b0", 1, "study", "failed", None, 2,
                            error="attempt 1: boom"))
    _, agg = ablate.summary_frames(kids)
    a = agg.set_index("cell").loc["a"]
    assert a["seeds"] == 3 and math.isclose(a["mean"], 0.7)
    assert math.isclose(a["sd"], np.std([0.6, 0.7, 0.8], ddof=1))
    assert "b" not in set(agg["cell"])
    table = ablate.format_table(kids, study="eight_cell", parent_run_id="p")
    assert "failed: 1, trained: 3" in table and "attempt 1: boom" in table
    assert "| a | efficientnet_b0 | 3 | 0.7000 | 0.1000 |" in table


# --------------------------------------------------------------------------- sweeps
