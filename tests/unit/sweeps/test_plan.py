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
    eight = set(SEQUENCE_CELLS) - {"b_frozen", "c1_frozen"}   # the limitation study's
    assert set(cells[6:]) == eight and len(kids) == 2 * (1 + 2 + 9)
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


def test_a_calibrated_prior_reaches_the_children_that_use_one():
    """Issue 28: `ablate -P prior_params=`: alpha and lambda_eff (fraction x the child's own
    image diagonal, by hand) on pi/distill/sequence children; the RGB children unchanged."""
    from pipi.calibration.objective import PriorParams

    st = ablate.get_study("per_frame")
    kw = {"seeds": (41,), "backbones": ("resnet18",), "profile": "smoke", "weights": "none",
          "digest": "d" * 64}
    plain = {k.cfg.cell: k for k in plan(st, **kw)}
    tuned = {k.cfg.cell: k for k in plan(st, prior=PriorParams(6.5, 0.4), **kw)}
    assert set(tuned) == {"a", "pi", "distill"}
    assert tuned["a"].cfg == plain["a"].cfg and tuned["a"].config_hash == plain["a"].config_hash
    for cell in ("pi", "distill"):
        cfg = tuned[cell].cfg
        assert cfg.prior.alpha == 6.5
        assert cfg.prior.lambda_eff == pytest.approx(0.4 * math.hypot(cfg.image_size,
                                                                      cfg.image_size))
        assert tuned[cell].config_hash != plain[cell].config_hash
    seq = {k.cfg.cell: k.cfg for k in plan(ablate.get_study("eight_cell"),
                                           prior=PriorParams(6.5, 0.4), **kw)}
    assert seq["e_plus"].prior.alpha == 6.5 and seq["a"].prior.alpha != 6.5


def test_ablate_refuses_prior_params_beside_alpha_in_one_line():
    from pipi.workflows.ablate import run_ablation

    with pytest.raises(ConfigError, match="either prior_params or alpha"):
        run_ablation(study="per_frame", seeds="41", prior_params="x.json",
                     overrides={"alpha": 6.0})


def test_a_childs_key_on_another_class_set_is_the_one_train_tags_its_run_with():
    """`train` gives the config the staged data's classes before it tags the run; the plan
    must too, or a finished child on a 10-class dataset is never found again."""
    from pipi import tracking
    from pipi.classes import ClassSet, class_set_of
    from pipi.config import make_config

    names = ("Angioectasia", "Bleeding", "Erosion", "Normal")
    cs = class_set_of({"classes": list(names)})
    assert cs == ClassSet(names)
    kw = {"seeds": (1,), "backbones": ("resnet18",), "cells": ("a",), "profile": "smoke",
          "weights": "none", "digest": "d" * 64,
          "overrides": {"train_sources": "KID", "test_sources": "SEE-AI"}}
    (kid,) = plan(ablate.get_study("per_frame"), class_set=cs, **kw)
    trained = make_config(cell="a", backbone="resnet18", seed=1, profile="smoke",
                          weights="none", train_sources="KID",
                          test_sources="SEE-AI").with_classes(cs)
    assert kid.cfg == trained
    assert kid.config_hash == tracking.config_hash(tracking.config_key(trained, "d" * 64))
    (plain,) = plan(ablate.get_study("per_frame"), **kw)
    assert plain.config_hash != kid.config_hash  # what the plan keyed before


def test_the_limitation_plan_trains_the_frozen_probe_base_first():
    kids = plan(ablate.get_study("limitation"), seeds=(41,), backbones=("resnet50",),
                profile="smoke", weights="imagenet", digest="d" * 64)
    assert [(k.cfg.cell, k.cfg.backbone, k.role) for k in kids] == [
        ("probe", "resnet50", "base"), ("b_frozen", "resnet50", "study"),
        ("c1_frozen", "resnet50", "study")]
