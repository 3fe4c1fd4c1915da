"""The ``ablate`` workflow: sweeps of cells x seeds x backbones as nested MLflow runs.

A sweep is one parent run (entry point ``ablate``) with one nested child run per
(cell, seed, backbone). Each child is the ordinary ``train`` run of that configuration (the
same run contract), so ``aggregate`` sees no difference between a sweep and single runs.

* **Idempotent.** Before training, a child's exact configuration (cell, seed, backbone,
  recipe, prior parameters, data digest, code version: ``runner.config_key``) is hashed and
  looked up as ``pipi.config_hash`` among FINISHED runs; a match is reused, not retrained.
  A second invocation of the same sweep therefore trains nothing.
* **Retry once.** A child that fails is retried once; a child that fails twice is reported
  in the summary (status ``failed``, with the reason) and the sweep goes on with the others.
* **Bases first.** A sequence cell builds on a per-frame run of its ``base_cell``; the plan
  adds those per-frame configurations (role ``base``) ahead of the sequence cells, so they
  are trained once as children of the sweep and found by every sequence child.
* **Executors.** ``local`` trains the children one after the other in this process;
  ``slurm`` submits one SLURM array task per child (``pipi.slurm``), each running
  ``mlflow run . -e train --run-id <child>`` against the same tracking server; per-frame
  children go in a first array, sequence children in a second one that starts after it.

Studies (``STUDIES``): ``eight_cell``, ``per_frame``, ``cross_backbone``, ``channel_train``
train cells; ``channel_infer`` evaluates each FINISHED ``pi`` run of the sweep's seeds and
backbones with Phi zeroed, P_blood zeroed, and both zeroed (strip-and-serve) at inference,
logging each evaluation as a child run with the prediction artifact of the run contract
(tags ``pipi.cell = pi@<variant>``, ``pipi.variant``, ``pipi.base_run_id``). ``pi_tta``
evaluates the PI-TTA probes (``pipi.tta``) on each FINISHED ``a`` run the same way (tags
``pipi.cell = a@tta_<variant>``): the three paper probes leave the class predictions equal to
the baseline by construction (frozen backbone and classifier), the non-paper ``bn_tent`` does
not.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from pipi import tracking
from pipi.cells import TrainConfig, get_cell, make_config
from pipi.classes import CLASSES
from pipi.errors import ConfigError
from pipi.models import ARCHS

log = logging.getLogger(__name__)

DEFAULT_BACKBONES = ("efficientnet_b0",)
EXECUTORS = ("local", "slurm")


# --------------------------------------------------------------------------- studies
@dataclass(frozen=True)
class Study:
    """A named sweep: which cells (and, for cross_backbone, which backbones) it trains."""

    name: str
    description: str
    cells: tuple[str, ...] = ()
    backbones: tuple[str, ...] | None = None   # None: the user's --backbones
    kind: str = "train"                        # train | channel_infer | pi_tta


STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("eight_cell", "per-frame baseline a and the nine sequence cells (paper Table 8-cell)",
          ("a", "b", "c", "c_prime", "c_dprime", "d", "e", "b_plus", "e_plus", "e_dagger")),
    Study("per_frame", "the per-frame arms: RGB, +PI input fusion, distillation",
          ("a", "pi", "distill")),
    Study("cross_backbone", "a and pi on EfficientNet-B0, ResNet-18 and ConvNeXt-Tiny",
          ("a", "pi"), backbones=ARCHS),
    Study("channel_train", "training-time channel ablation: both, P_blood only, Phi only",
          ("pi", "pblood_only", "phi_only")),
    Study("channel_infer", "inference-time channel ablation of finished pi runs",
          ("pi",), kind="channel_infer"),
    Study("pi_tta", "PI test-time adaptation probes (paper null result) of finished a runs",
          ("a",), kind="pi_tta"),
)}

#: Inference-time channel ablations: variant -> zeroed input channels (3 = P_blood, 4 = Phi).
CHANNEL_VARIANTS: dict[str, tuple[int, ...]] = {
    "zero_phi": (4,), "zero_pblood": (3,), "zero_both": (3, 4),
}


def get_study(name: str) -> Study:
    try:
        return STUDIES[name]
    except KeyError:
        raise ConfigError(f"Unknown study {name!r}. Available: {list(STUDIES)}") from None


# --------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class Child:
    """One planned child run."""

    cfg: TrainConfig
    config_hash: str
    role: str = "study"              # study | base (a per-frame run a sequence cell needs)
    variant: str = ""                # channel_infer: zero_phi | ...; pi_tta: tta_aux_sgd | ...

    @property
    def label(self) -> str:
        cell = f"{self.cfg.cell}@{self.variant}" if self.variant else self.cfg.cell
        return f"{cell}-{self.cfg.backbone}-s{self.cfg.seed}"


@dataclass(frozen=True)
class ChildResult:
    """What happened to one child (a row of the summary table)."""

    cell: str
    backbone: str
    seed: int
    role: str
    status: str                      # reused | trained | retried | failed
    run_id: str | None
    attempts: int
    val_macro_auc: float = math.nan
    test_macro_auc: float = math.nan
    base_run_id: str = ""
    error: str = ""


@dataclass(frozen=True)
class SweepResult:
    parent_run_id: str
    study: str
    children: tuple[ChildResult, ...]
    table: str = field(repr=False, default="")

    @property
    def failed(self) -> tuple[ChildResult, ...]:
        return tuple(c for c in self.children if c.status == "failed")

    @property
    def trained(self) -> tuple[ChildResult, ...]:
        return tuple(c for c in self.children if c.status in ("trained", "retried"))


def parse_list(text: str | Sequence | None, *, cast=str) -> tuple:
    """'41,42' -> (41, 42); empty -> ()."""
    if text is None:
        return ()
    if isinstance(text, str):
        text = [t for t in (s.strip() for s in text.split(",")) if t]
    return tuple(cast(t) for t in text)


def child_config(cell: str, *, backbone: str, seed: int, profile: str, weights: str
                 ) -> TrainConfig:
    """The configuration ``mlflow run . -e train -P cell=... -P weights=...`` builds."""
    return make_config(cell=cell, backbone=backbone, seed=seed, profile=profile,
                       weights=weights, alpha=4.0, lambda_eff=0.0)


def plan(study: Study, *, seeds: Sequence[int], backbones: Sequence[str],
         cells: Sequence[str] = (), profile: str, weights: str, digest: str) -> list[Child]:
    """Children of a sweep: per-frame (and implied base) runs first, then sequence runs."""
    from pipi.runner import config_key

    chosen = tuple(cells) or study.cells
    for c in chosen:
        get_cell(c)
    if study.kind == "channel_infer" and set(chosen) != {"pi"}:
        raise ConfigError("channel_infer evaluates pi runs; leave cells empty or pass cells=pi")
    if study.kind == "pi_tta" and set(chosen) != {"a"}:
        raise ConfigError("pi_tta evaluates a runs; leave cells empty or pass cells=a")
    frame_cells = [c for c in chosen if not get_cell(c).is_sequence]
    seq_cells = [c for c in chosen if get_cell(c).is_sequence]
    bases = [b for b in dict.fromkeys(get_cell(c).base_cell for c in seq_cells)
             if b not in frame_cells]
    out: list[Child] = []
    for group, role in ((frame_cells, "study"), (bases, "base"), (seq_cells, "study")):
        for cell in group:
            for backbone in backbones:
                for seed in seeds:
                    cfg = child_config(cell, backbone=backbone, seed=seed, profile=profile,
                                       weights=weights)
                    key = tracking.config_hash(config_key(cfg, digest))
                    out.append(Child(cfg, key, role))
    return out


def infer_key(pi_run_id: str, variant: str) -> str:
    """Idempotency key of an inference-time channel ablation of one pi run."""
    return tracking.config_hash({"study": "channel_infer", "variant": variant,
                                 "channels": list(CHANNEL_VARIANTS[variant]),
                                 "base_run_id": pi_run_id, "code": tracking.code_version()})


# --------------------------------------------------------------------------- summary
def _result(child: Child, run, status: str, attempts: int, error: str = "") -> ChildResult:
    m = run.data.metrics if run is not None else {}
    return ChildResult(
        cell=f"{child.cfg.cell}@{child.variant}" if child.variant else child.cfg.cell,
        backbone=child.cfg.backbone, seed=child.cfg.seed, role=child.role, status=status,
        run_id=run.info.run_id if run is not None else None, attempts=attempts,
        val_macro_auc=float(m.get("val/best_macro_auc", m.get("val/macro_auc", math.nan))),
        test_macro_auc=float(m.get("test/macro_auc", math.nan)),
        base_run_id=(run.data.tags.get(tracking.TAG_BASE_RUN, "") if run is not None else ""),
        error=error)


def summary_frames(children: Sequence[ChildResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per child, one row per cell x backbone with cross-seed mean and sd)."""
    rows = pd.DataFrame([asdict(c) for c in children])
    if rows.empty:
        return rows, rows
    ok = rows[rows["status"] != "failed"]
    agg = (ok.groupby(["cell", "backbone"], sort=False)["test_macro_auc"]
           .agg(seeds="count", mean="mean", sd="std").reset_index())
    return rows, agg


def format_table(children: Sequence[ChildResult], *, study: str, parent_run_id: str) -> str:
    """The sweep's summary as Markdown (children, then cross-seed means)."""
    rows, agg = summary_frames(children)
    lines = [f"# ablate: {study} (parent run {parent_run_id})", ""]
    if rows.empty:
        return "\n".join([*lines, "no children"]) + "\n"
    counts = rows["status"].value_counts().to_dict()
    lines += [", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), "",
              ("| cell | backbone | seed | role | status | attempts | val macro-AUC | "
               "test macro-AUC | run | note |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples(index=False):
        note = r.error[:120].replace("|", "/").replace("\n", " ")
        lines.append(f"| {r.cell} | {r.backbone} | {r.seed} | {r.role} | {r.status} | "
                     f"{r.attempts} | {_fmt(r.val_macro_auc)} | {_fmt(r.test_macro_auc)} | "
                     f"{r.run_id or '-'} | {note} |")
    lines += ["", "| cell | backbone | seeds | test macro-AUC mean | sd |", "|---|---|---|---|---|"]
    for r in agg.itertuples(index=False):
        lines.append(f"| {r.cell} | {r.backbone} | {r.seeds} | {_fmt(r.mean)} | {_fmt(r.sd)} |")
    return "\n".join(lines) + "\n"


def _fmt(v: float) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.4f}"


# --------------------------------------------------------------------------- local executor
def _train_child(child: Child, *, data: Path, progress: bool, parent_run_id: str):
    from pipi.runner import train

    summary = train(child.cfg, data=str(data), nested=True, progress=progress)
    tracking.set_run_tags(summary["run_id"], {tracking.TAG_PARENT_RUN: parent_run_id,
                                              "pipi.sweep_role": child.role})
    return tracking.get_run(summary["run_id"])


def _with_retry(child: Child, fn, *, retries: int = 1) -> ChildResult:
    errors = []
    for attempt in range(1, retries + 2):
        try:
            run = fn()
        except Exception as exc:  # noqa: BLE001  (recorded in the summary and retried)
            errors.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
            log.error("child %s failed (attempt %d): %s\n%s", child.label, attempt, exc,
                      traceback.format_exc())
            continue
        return _result(child, run, "trained" if attempt == 1 else "retried", attempt,
                       "; ".join(errors))
    return _result(child, None, "failed", retries + 1, "; ".join(errors))


def run_local(children: Sequence[Child], *, data: Path, parent_run_id: str, progress: bool,
              retries: int = 1) -> list[ChildResult]:
    results = []
    for child in children:
        found = tracking.find_finished_run(child.config_hash,
                                           **{tracking.TAG_ENTRY_POINT: "train"})
        if found is not None:
            log.info("child %s: reusing FINISHED run %s", child.label, found.info.run_id)
            results.append(_result(child, found, "reused", 0))
            continue
        log.info("child %s: training", child.label)
        results.append(_with_retry(child, lambda c=child: _train_child(
            c, data=data, progress=progress, parent_run_id=parent_run_id), retries=retries))
    return results


# --------------------------------------------------------------------------- channel_infer
class _ZeroChannels(nn.Module):
    """Feeds a 5-channel model its input with some channels set to zero."""

    def __init__(self, model: nn.Module, channels: Sequence[int]):
        super().__init__()
        self.model, self.channels = model, tuple(channels)

    def forward(self, x):
        x = x.clone()
        x[:, list(self.channels)] = 0
        return self.model(x)


def evaluate_zeroed(pi_run_id: str, variant: str, *, data: Path, parent_run_id: str,
                    progress: bool = False) -> str:
    """Evaluate a FINISHED pi run with ``CHANNEL_VARIANTS[variant]`` zeroed; returns run id."""
    from pipi.data.cache import build_cache
    from pipi.data.kvasir import load_staged
    from pipi.runner import run_params
    from pipi.sequence import load_run_model
    from pipi.paths import pipi_home
    from pipi.training import (
        FrameInputs,
        evaluable_classes,
        predict_probs,
        predictions_frame,
        split_metrics,
        tmpdir,
        write_predictions,
    )

    frames, manifest = load_staged(data)
    digest = manifest["data_digest"]
    model, cfg = load_run_model(pi_run_id)
    if cfg.cell_config.input_channels != 5:
        raise ConfigError(f"run {pi_run_id} is cell {cfg.cell}, not a 5-channel cell")
    wrapped = _ZeroChannels(model, CHANNEL_VARIANTS[variant])
    images = build_cache(data, frames, size=cfg.image_size, digest=digest,
                         cache_dir=pipi_home() / "cache", progress=progress)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    classes = evaluable_classes(frames)
    tags = {tracking.TAG_DATASET: manifest.get("dataset", "kvasir-capsule"),
            tracking.TAG_DATA_DIGEST: digest, tracking.TAG_SPLIT_SHA: manifest["content_sha256"],
            tracking.TAG_CELL: f"{cfg.cell}@{variant}", tracking.TAG_BACKBONE: cfg.backbone,
            tracking.TAG_SEED: str(cfg.seed), tracking.TAG_CONFIG_HASH: infer_key(pi_run_id, variant),
            tracking.TAG_BASE_RUN: pi_run_id, tracking.TAG_STUDY: "channel_infer",
            tracking.TAG_VARIANT: variant, tracking.TAG_PARENT_RUN: parent_run_id}
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="ablate", nested=True, tags=tags,
                               run_name=f"{cfg.cell}@{variant}-{cfg.backbone}-s{cfg.seed}") as run:
            tracking.log_params({**run_params(cfg), "data_dir": str(data), "variant": variant,
                                 "zeroed_channels": ",".join(map(str, CHANNEL_VARIANTS[variant])),
                                 "base_run_id": pi_run_id})
            preds = {}
            split = frames["split"].to_numpy()
            for s in ("val", "test"):
                idx = np.flatnonzero(split == s)
                probs = predict_probs(wrapped, images[idx] if len(idx) else images[:0],
                                      FrameInputs(cfg), device=dev)
                preds[s] = predictions_frame(frames.iloc[idx], probs)
            metrics = {**split_metrics(preds["val"], classes, "val"),
                       **split_metrics(preds["test"], classes, "test")}
            tracking.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
            tracking.set_tags({"pipi.evaluable_classes": json.dumps([CLASSES[k] for k in classes])})
            tracking.log_artifacts(write_predictions(preds, work / "predictions"), "predictions")
            return run.info.run_id
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_channel_infer(pi_results: Sequence[ChildResult], *, data: Path, parent_run_id: str,
                      progress: bool, retries: int = 1) -> list[ChildResult]:
    out = []
    for pr in pi_results:
        if pr.run_id is None:
            continue
        for variant in CHANNEL_VARIANTS:
            cfg = make_config(cell="pi", backbone=pr.backbone, seed=pr.seed)
            child = Child(cfg, infer_key(pr.run_id, variant), "study", variant)
            found = tracking.find_finished_run(child.config_hash,
                                               **{tracking.TAG_ENTRY_POINT: "ablate"})
            if found is not None:
                out.append(_result(child, found, "reused", 0))
                continue
            out.append(_with_retry(child, lambda r=pr, v=variant: tracking.get_run(
                evaluate_zeroed(r.run_id, v, data=data, parent_run_id=parent_run_id,
                                progress=progress)), retries=retries))
    return out


# --------------------------------------------------------------------------- pi_tta
def run_pi_tta(a_results: Sequence[ChildResult], *, data: Path, parent_run_id: str,
               progress: bool, retries: int = 1) -> list[ChildResult]:
    """PI-TTA children of each ``a`` run: every variant its backbone supports, reused if done."""
    from pipi.tta import TTAConfig, evaluate_tta, tta_key, variants_for

    tta = TTAConfig()
    out = []
    for ar in a_results:
        if ar.run_id is None:
            continue
        for variant in variants_for(ar.backbone):
            cfg = make_config(cell="a", backbone=ar.backbone, seed=ar.seed)
            child = Child(cfg, tta_key(ar.run_id, variant, tta), "study", f"tta_{variant}")
            found = tracking.find_finished_run(child.config_hash,
                                               **{tracking.TAG_ENTRY_POINT: "ablate"})
            if found is not None:
                out.append(_result(child, found, "reused", 0))
                continue
            out.append(_with_retry(child, lambda r=ar, v=variant: tracking.get_run(
                evaluate_tta(r.run_id, v, data=data, parent_run_id=parent_run_id, tta=tta,
                             progress=progress)), retries=retries))
    return out


# --------------------------------------------------------------------------- entry point
def run_ablation(*, study: str = "eight_cell", seeds: Sequence[int] | str = (41, 42),
                 backbones: Sequence[str] | str = DEFAULT_BACKBONES,
                 cells: Sequence[str] | str = (), profile: str = "demo",
                 executor: str = "local", data: str | None = "synthetic",
                 weights: str = "imagenet", experiment: str | None = None,
                 progress: bool = True, retries: int = 1) -> SweepResult:
    """Run a sweep (see the module docstring); returns the per-child results and the table.

    ``backbones`` equal to the default (EfficientNet-B0 only) means the study's own backbones
    where it has some (``cross_backbone``: all three).
    """
    from pipi.data.kvasir import load_staged
    from pipi.staging import resolve_data

    st = get_study(study)
    seeds = parse_list(seeds, cast=int)
    backbones = parse_list(backbones) or DEFAULT_BACKBONES
    if st.backbones and tuple(backbones) == DEFAULT_BACKBONES:
        backbones = st.backbones
    for b in backbones:
        if b not in ARCHS:
            raise ConfigError(f"Unknown backbone {b!r}. Available: {list(ARCHS)}")
    cells = parse_list(cells)
    if not seeds:
        raise ConfigError("seeds is empty; pass e.g. seeds=41,42")
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    root = resolve_data(data, preset="tiny" if profile == "smoke" else "demo")
    _, manifest = load_staged(root)
    digest = manifest["data_digest"]
    children = plan(st, seeds=seeds, backbones=backbones, cells=cells, profile=profile,
                    weights=weights, digest=digest)
    tags = {tracking.TAG_STUDY: st.name, tracking.TAG_DATA_DIGEST: digest,
            tracking.TAG_DATASET: manifest.get("dataset", "kvasir-capsule")}
    with tracking.pipi_run(entry_point="ablate", experiment=experiment, tags=tags,
                           run_name=f"ablate-{st.name}") as parent:
        pid = parent.info.run_id
        tracking.log_params({"study": st.name, "seeds": ",".join(map(str, seeds)),
                             "backbones": ",".join(backbones), "cells": ",".join(cells),
                             "profile": profile, "executor": executor, "data": data or "",
                             "data_dir": str(root),
                             "weights": weights, "children": len(children)})
        if executor == "slurm":
            from pipi.slurm import run_slurm

            results = run_slurm(children, data=root, parent_run_id=pid, retries=retries)
        else:
            results = run_local(children, data=root, parent_run_id=pid, progress=progress,
                                retries=retries)
        if st.kind == "channel_infer":
            results += run_channel_infer([r for r in results if r.cell == "pi"], data=root,
                                         parent_run_id=pid, progress=progress, retries=retries)
        elif st.kind == "pi_tta":
            results += run_pi_tta([r for r in results if r.cell == "a"], data=root,
                                  parent_run_id=pid, progress=progress, retries=retries)
        table = format_table(results, study=st.name, parent_run_id=pid)
        rows, agg = summary_frames(results)
        tracking.log_text(table, "summary/summary.md")
        if not rows.empty:
            tracking.log_text(rows.to_csv(index=False), "summary/children.csv")
            tracking.log_text(agg.to_csv(index=False), "summary/cells.csv")
        counts = {s: sum(r.status == s for r in results)
                  for s in ("reused", "trained", "retried", "failed")}
        tracking.log_metrics({f"children_{k}": v for k, v in counts.items()})
        tracking.set_tags({"pipi.failed_children": counts["failed"]})
    return SweepResult(parent_run_id=pid, study=st.name, children=tuple(results), table=table)


__all__ = ["CHANNEL_VARIANTS", "STUDIES", "Child", "ChildResult", "Study", "SweepResult",
           "evaluate_zeroed", "format_table", "get_study", "plan", "run_ablation", "run_pi_tta"]
