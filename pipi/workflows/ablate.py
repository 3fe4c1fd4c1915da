"""The ``ablate`` workflow: sweeps of cells x seeds x backbones as nested MLflow runs.

A sweep is one parent run (entry point ``ablate``) with one nested child run per
(cell, seed, backbone). Each child is the ordinary ``train`` run of that configuration (the
same run contract, every recipe and prior option of the sweep passed through), so
``aggregate`` sees no difference between a sweep and single runs.

* **Idempotent.** A child whose exact configuration (recipe, prior, data digest, code
  version: ``tracking.config_key``) already FINISHED is reused (``pipi.sweeps.plan``).
* **Retry once.** A child that fails is retried once; one that fails twice is reported.
* **Bases first.** Sequence cells' per-frame bases are planned (role ``base``) ahead of them.
* **Executors.** ``local`` (this process) or ``slurm`` (one array task per child).

``channel_infer`` scores each FINISHED ``pi`` run with Phi, P_blood or both zeroed, and
``pi_tta`` each FINISHED ``a`` run with the PI-TTA probes, as ``evaluate_run`` children.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from pipi import tracking
from pipi.classes import class_set_of
from pipi.config import PAPER_SEEDS, make_config, resolve_profile, synthetic_preset
from pipi.errors import ConfigError
from pipi.models.backbones import ARCHS
from pipi.models.timm_backbones import FOUNDATION, is_timm_arch
from pipi.predictions import prob_columns_of, read_predictions
from pipi.probes.tta import (
    BN_TENT_NOTE,
    NULL_NOTE,
    PAPER_VARIANTS,
    TTAConfig,
    adapt_predict,
    check_variant,
    fit_probe,
    variants_for,
)
from pipi.runs.checks import check_sources
from pipi.runs.data import load_data
from pipi.runs.evaluate import (
    CHANNEL_VARIANTS,
    EvalContext,
    Evaluation,
    channel_evaluation,
    evaluate_run,
    find_evaluation,
)
from pipi.runs.prior_params import check_prior_params, resolve_prior
from pipi.sweeps.local import run_local
from pipi.sweeps.plan import (
    EXECUTORS,
    Child,
    ChildResult,
    SweepResult,
    format_table,
    get_study,
    parse_list,
    plan,
    result_of,
    run_with_retry,
    summary_frames,
)
from pipi.sweeps.slurm import run_slurm

log = logging.getLogger(__name__)

DEFAULT_BACKBONES = ("efficientnet_b0",)


# --------------------------------------------------------------------------- evaluation studies
def _evaluate_children(results: Sequence[ChildResult], evaluations, *, cell: str, data: Path,
                       digest: str, parent_run_id: str, progress: bool,
                       retries: int) -> list[ChildResult]:
    """One ``evaluate_run`` child per (finished run of ``cell``, evaluation), reused if done."""
    out = []
    for res in results:
        if res.run_id is None or res.cell != cell:
            continue
        for ev in evaluations(res.backbone):
            child = Child(make_config(cell=cell, backbone=res.backbone, seed=res.seed), "",
                          "study", ev.variant)
            found = find_evaluation(res.run_id, ev, data_digest=digest)
            if found is not None:
                out.append(result_of(child, found, "reused", 0))
                continue
            out.append(run_with_retry(child, lambda r=res, e=ev: evaluate_run(
                r.run_id, e, data=data, parent_run_id=parent_run_id, progress=progress),
                retries=retries))
    return out


def tta_evaluation(variant: str, tta: TTAConfig = TTAConfig()) -> Evaluation:
    """A PI-TTA probe on an ``a`` run, scored on test (paper: "scored on the test split")."""
    check_variant(variant)
    paper = variant in PAPER_VARIANTS

    def check(cfg) -> None:
        if cfg.cell_config.input_channels != 3 or cfg.cell_config.distill:
            raise ConfigError(f"cell {cfg.cell}: PI-TTA adapts RGB-only per-frame runs (cell a)")
        if variant not in variants_for(cfg.backbone):
            raise ConfigError(f"{variant} needs BatchNorm layers; {cfg.backbone} has none")

    def scorer(ctx: EvalContext, rows: np.ndarray, split: str):
        train_rows = np.flatnonzero(ctx.frames["split"].to_numpy() == "train")
        fitted = fit_probe(ctx.model, variant, ctx.images, rows=train_rows, cfg=ctx.cfg,
                           tta=tta, device=ctx.device)
        out = adapt_predict(ctx.model, fitted, ctx.images, rows=rows, cfg=ctx.cfg, tta=tta,
                            device=ctx.device)
        m = {"tta/loss_before": float(np.mean(out.loss_before)),
             "tta/loss_after": float(np.mean(out.loss_after)),
             "tta/loss_decreased_fraction": float(np.mean(out.loss_after < out.loss_before)),
             "tta/param_change": float(np.mean(out.param_change)),
             "tta/fit_loss": fitted.fit_losses[-1] if fitted.fit_losses else math.nan,
             "tta/fit_frames": float(fitted.fit_frames)}
        base = tracking.get_run(ctx.source_run_id).metrics.get("test/macro_auc", math.nan)
        m["tta/baseline_test_macro_auc"] = base
        base_pred = read_predictions(tracking.download_artifact(
            ctx.source_run_id, "predictions", ctx.work / "base"), "test")
        paths = ctx.frames.iloc[rows]["path"].astype(str).tolist()
        if list(base_pred["path"].astype(str)) == paths:
            theirs = base_pred[list(prob_columns_of(base_pred))].to_numpy(np.float64)
            ours = out.probs.astype(np.float64)
            m["tta/max_abs_prob_diff"] = float(np.abs(ours - theirs).max(initial=0.0))
            m["tta/argmax_changed_fraction"] = (float(np.mean(ours.argmax(1) != theirs.argmax(1)))
                                                if len(ours) else 0.0)
        return out.probs, m

    return Evaluation(study="pi_tta", variant=f"tta_{variant}", scorer=scorer, splits=("test",),
                      options={"tta_variant": variant, **asdict(tta)}, check=check,
                      finalize=lambda m: {"tta/delta_test_macro_auc": m["test/macro_auc"]
                                          - m["tta/baseline_test_macro_auc"]},
                      tags={tracking.tags.TAG_PAPER_VARIANT: str(paper).lower(),
                            tracking.tags.TAG_TTA_NOTE: NULL_NOTE if paper else BN_TENT_NOTE,
                            tracking.tags.TAG_ON_CLASSIFIER_PATH: str(not paper).lower()})


# --------------------------------------------------------------------------- the workflow
def run_ablation(*, study: str = "eight_cell", seeds: Sequence[int] | str = PAPER_SEEDS,
                 backbones: Sequence[str] | str = DEFAULT_BACKBONES,
                 cells: Sequence[str] | str = (), profile: str = "auto",
                 executor: str = "local", parallel: int = 1, data: str | None = "synthetic",
                 weights: str = "imagenet", overrides: dict | None = None,
                 experiment: str | None = None, progress: bool = True,
                 retries: int = 1, prior_params: str = "") -> SweepResult:
    """Run a sweep (see the module docstring); returns the per-child results and the table.

    ``backbones`` equal to the default (EfficientNet-B0 only) means the study's own backbones
    where it has some (``cross_backbone``: all three). ``overrides`` are the train options
    (``config.TRAIN_OVERRIDES``) every child gets. ``prior_params`` (a ``prior_params.json``
    or a calibrate run id, as ``train`` takes it) sets alpha and lambda_eff of every child
    whose cell uses the prior (``CellConfig.takes_prior_params``).
    """
    st = get_study(study)
    seeds = parse_list(seeds, cast=int, name="seeds")
    backbones = parse_list(backbones, name="backbones") or DEFAULT_BACKBONES
    if st.backbones and tuple(backbones) == DEFAULT_BACKBONES:
        backbones = st.backbones
    for b in backbones:
        if b not in ARCHS and not is_timm_arch(b):
            raise ConfigError(f"backbones: {b!r} is unknown. Available: {list(ARCHS)}, "
                              f"{list(FOUNDATION)} or timm:<name>")
    cells = parse_list(cells, name="cells")
    check_prior_params(prior_params, overrides)
    if not seeds:
        raise ConfigError("seeds is empty; pass e.g. seeds=41,42")
    if executor not in EXECUTORS:
        raise ConfigError(f"executor={executor!r}; use one of {list(EXECUTORS)}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"parallel={parallel!r}: must be an integer >= 1")
    if parallel > 1 and executor != "local":
        raise ConfigError(f"parallel={parallel} is for executor=local (SLURM runs its array "
                          "tasks side by side already)")
    staged = load_data(data, preset=synthetic_preset(profile))
    root, manifest, digest = staged.root, staged.manifest, staged.digest
    profile = resolve_profile(profile, manifest.get("dataset", ""))
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    prior = resolve_prior(prior_params) if prior_params else None
    children = plan(st, seeds=seeds, backbones=backbones, cells=cells, profile=profile,
                    weights=weights, digest=digest, overrides=overrides,
                    prior=prior.params if prior is not None else None,
                    class_set=class_set_of(manifest))
    if children:  # train_sources / test_sources name the data's sources: once, not per child
        check_sources(children[0].cfg, staged)
    if prior is not None and not any(c.cfg.cell_config.takes_prior_params for c in children):
        raise ConfigError(f"prior_params={prior_params}: no cell of this sweep uses the optical "
                          f"prior ({sorted({c.cfg.cell for c in children})}); it applies to "
                          "pi, pblood_only, phi_only, distill and the sequence cells")
    tags = {tracking.tags.TAG_STUDY: st.name, tracking.tags.TAG_DATA_DIGEST: digest,
            tracking.tags.TAG_DATASET: manifest.get("dataset", "kvasir-capsule"),
            **(dict(prior.tags) if prior is not None else {})}
    with tracking.pipi_run(entry_point="ablate", experiment=experiment, tags=tags,
                           run_name=f"ablate-{st.name}") as parent:
        pid = parent.run_id
        parent.log_params({"study": st.name, "seeds": ",".join(map(str, seeds)),
                             "backbones": ",".join(backbones), "cells": ",".join(cells),
                             "profile": profile, "executor": executor, "parallel": parallel,
                             "data": data or "",
                             "data_dir": str(root), "weights": weights,
                             "overrides": json.dumps(overrides, sort_keys=True),
                             "prior_params": prior_params, "children": len(children)})
        if executor == "slurm":
            results = run_slurm(children, data=root, parent_run_id=pid, retries=retries)
        else:
            results = run_local(children, data=root, parent_run_id=pid, retries=retries,
                                parallel=parallel, progress=progress)
        kw = {"data": root, "digest": digest, "parent_run_id": pid, "progress": progress,
              "retries": retries}
        if st.kind == "channel_infer":
            results += _evaluate_children(
                results, lambda b: [channel_evaluation(v) for v in CHANNEL_VARIANTS],
                cell="pi", **kw)
        elif st.kind == "pi_tta":
            results += _evaluate_children(
                results, lambda b: [tta_evaluation(v) for v in variants_for(b)], cell="a", **kw)
        table = format_table(results, study=st.name, parent_run_id=pid)
        rows, agg = summary_frames(results)
        parent.log_text(table, "summary/summary.md")
        if not rows.empty:
            parent.log_text(rows.to_csv(index=False), "summary/children.csv")
            parent.log_text(agg.to_csv(index=False), "summary/cells.csv")
        counts = {s: sum(r.status == s for r in results)
                  for s in ("reused", "trained", "retried", "failed")}
        parent.log_metrics({f"children_{k}": v for k, v in counts.items()})
        parent.set_tags({tracking.tags.TAG_FAILED_CHILDREN: counts["failed"]})
    return SweepResult(parent_run_id=pid, study=st.name, children=tuple(results), table=table)
