"""What a sweep is made of: studies, planned children, their results and the summary table.

A child of a training study is the configuration ``mlflow run . -e train`` would build from
the sweep's options (every recipe and prior option passed through, ``config.make_config``);
its idempotency key is the hash of ``tracking.config_key`` (recipe, data digest, code).
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from pipi import tracking
from pipi.calibration.objective import PriorParams
from pipi.cells import Arm, get_cell
from pipi.classes import ClassSet
from pipi.config import TrainConfig, make_config
from pipi.errors import ConfigError
from pipi.sweeps.studies import (  # noqa: F401 (re-exported)
    EXECUTORS,
    STUDIES,
    Study,
    get_study,
    parse_list,
)

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Child:
    """One planned child run."""

    cfg: TrainConfig
    config_hash: str
    role: str = "study"              # study | base (a per-frame run a sequence cell needs)
    variant: str = ""                # channel_infer: zero_phi | ...; pi_tta: tta_aux_sgd | ...

    @property
    def label(self) -> str:
        return f"{Arm(self.cfg.cell, variant=self.variant)}-{self.cfg.backbone}-s{self.cfg.seed}"


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


def child_config(cell: str, *, backbone: str, seed: int, profile: str, weights: str,
                 overrides: dict | None = None) -> TrainConfig:
    """The configuration ``mlflow run . -e train -P cell=... <overrides>`` builds."""
    return make_config(cell=cell, backbone=backbone, seed=seed, profile=profile,
                       weights=weights, **(overrides or {}))


def plan(study: Study, *, seeds: Sequence[int], backbones: Sequence[str],
         cells: Sequence[str] = (), profile: str, weights: str, digest: str,
         overrides: dict | None = None, prior: PriorParams | None = None,
         class_set: ClassSet | None = None) -> list[Child]:
    """Children of a sweep: per-frame (and implied base) runs first, then sequence runs.

    ``prior`` (a calibrated prior, ``ablate -P prior_params=``) is applied to the children
    whose cell takes one (``CellConfig.takes_prior_params``), lambda_eff at each child's
    image size; the RGB-only per-frame children keep their configuration. ``class_set``:
    the staged data's classes (``classes.class_set_of`` its manifest), as ``train`` sets
    them, so that a child's key is the one its run is tagged with (a finished child is
    found again on another class set than Kvasir's)."""
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
                                       weights=weights, overrides=overrides)
                    if prior is not None and cfg.cell_config.takes_prior_params:
                        cfg = prior.apply(cfg)
                    if class_set is not None:
                        cfg = cfg.with_classes(class_set)
                    key = tracking.config_hash(tracking.config_key(cfg, digest))
                    out.append(Child(cfg, key, role))
    return out


# --------------------------------------------------------------------------- results
def result_of(child: Child, run, status: str, attempts: int, error: str = "") -> ChildResult:
    """A summary row from a child and its MLflow run (None when it failed)."""
    m = run.metrics if run is not None else {}
    return ChildResult(
        cell=f"{child.cfg.cell}@{child.variant}" if child.variant else child.cfg.cell,
        backbone=child.cfg.backbone, seed=child.cfg.seed, role=child.role, status=status,
        run_id=run.run_id if run is not None else None, attempts=attempts,
        val_macro_auc=float(m.get("val/best_macro_auc", m.get("val/macro_auc", math.nan))),
        test_macro_auc=float(m.get("test/macro_auc", math.nan)),
        base_run_id=(run.tags.get(tracking.tags.TAG_BASE_RUN, "") if run is not None else ""),
        error=error)


def find_done(child: Child, *, entry_point: str) -> ChildResult | None:
    """The child's FINISHED run with the same config hash, as a ``reused`` result."""
    found = tracking.find_finished_run(child.config_hash,
                                       **{tracking.tags.TAG_ENTRY_POINT: entry_point})
    if found is None:
        return None
    log.info("child %s: reusing FINISHED run %s", child.label, found.run_id)
    return result_of(child, found, "reused", 0)


def run_with_retry(child: Child, fn: Callable[[], str], *, retries: int = 1) -> ChildResult:
    """Run ``fn`` (returns a run id); retry on failure; a child that fails twice is reported."""
    errors = []
    for attempt in range(1, retries + 2):
        try:
            run = tracking.get_run(fn())
        except Exception as exc:  # noqa: BLE001  (recorded in the summary and retried)
            errors.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
            log.error("child %s failed (attempt %d): %s\n%s", child.label, attempt, exc,
                      traceback.format_exc())
            continue
        return result_of(child, run, "trained" if attempt == 1 else "retried", attempt,
                         "; ".join(errors))
    return result_of(child, None, "failed", retries + 1, "; ".join(errors))


def find_or_run(child: Child, fn: Callable[[], str], *, entry_point: str,
                retries: int = 1) -> ChildResult:
    """Reuse the child's FINISHED run (same config hash) or run it, retrying once."""
    return find_done(child, entry_point=entry_point) or run_with_retry(child, fn, retries=retries)


# --------------------------------------------------------------------------- summary
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
