"""The ``galar`` workflow: zero-shot evaluation of Kvasir-trained runs on staged Galar frames.

No retraining: each source run's logged model scores the staged Galar frames through
:func:`pipi.runs.evaluate.evaluate_run` (study ``galar``, variant ``zero_shot``), one child run
per source run under a ``galar`` parent, reused when a FINISHED child with the same key
(source run, Galar data digest, fold, code version) exists. A child follows the run
contract (``pipi.source_run_id``, ``pipi.dataset = galar``, ``pipi.data_digest``,
``pipi.galar_fold``; ``predictions/test.parquet`` with a ``capsule_system`` column) and logs,
on the scored frames:

* ``test/macro_auc`` = ``test/mapped_macro_auc``: every evaluable mapped class (classes with
  positives among the scored frames), per class ``test/auc/<class>``;
* ``test/galkva_macro_auc``: the GalKva-2026 v1.0 6-class intersection, over the frames
  whose label is in it (as the benchmark scores them);
* the same two per capsule system: ``test/capsule/<system>/{mapped,galkva}_macro_auc`` and
  ``test/capsule/<system>/n_frames`` (system names with spaces as underscores).

Folds: by default (``fold=auto``) a zero-shot run scores every staged frame of the selected
capsule systems (``all``: the paper's protocol, strictly zero-shot on the whole subset), and a
run with a calibrated prior (``prior_params=``) scores the vendor folds' ``evaluation``
videos only, since the prior may have been fitted on the ``calibration`` videos. Either can
be asked for (``fold=all`` / ``fold=evaluation``); the child and parent runs carry the fold
actually scored in the tag ``pipi.galar_fold`` and say so in their summary.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipi import tracking
from pipi.cells import CELLS, PER_FRAME_CELLS, Arm
from pipi.classes import KVASIR_MAP_HINT, class_index, class_set_of_param, not_kvasir
from pipi.data.progress import tqdm
from pipi.errors import ConfigError, DataError
from pipi.galkva import BENCHMARK_VERSION, SCORING_SETS
from pipi.runs.choices import FOLD_CHOICES, GALAR_FOLDS
from pipi.runs.data import (
    GALAR_SYNTHETIC_PRESETS,
    load_galar_data,
    synthetic_galar_staged,
)
from pipi.runs.evaluate import EvalContext, Evaluation, evaluate_run, find_evaluation, plain_scorer
from pipi.runs.prior_params import CalibratedPrior, resolve_prior
from pipi.stats import macro_auc

__all__ = ["FOLD_CHOICES", "GALAR_FOLDS", "STUDY", "TAG_FOLD", "TAG_SCOPE", "VARIANT",
           "GalarResult", "fold_scope", "galar_evaluation", "galar_metrics", "resolve_fold",
           "resolve_source_runs", "run_galar", "synthetic_galar_staged"]

log = logging.getLogger(__name__)

STUDY, VARIANT = "galar", "zero_shot"
#: ``prior_params=``: the prior that ``calibrate`` fitted, instead of the run's own.
VARIANT_CALIBRATED = "calibrated"
TAG_FOLD = tracking.tags.TAG_GALAR_FOLD
#: What the fold scored, in words (``fold_scope``): "every staged video (...)" or "the
#: evaluation fold only (12 of 24 staged videos; ...)".
TAG_SCOPE = tracking.tags.TAG_GALAR_SCOPE
SYNTHETIC_PRESETS = GALAR_SYNTHETIC_PRESETS
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


# --------------------------------------------------------------------------- data
# --------------------------------------------------------------------------- source runs
def _check_source(run_id: str) -> None:
    run = tracking.get_run(run_id)
    tags = run.tags
    cell = tags.get(tracking.tags.TAG_CELL, "")
    if run.status != "FINISHED":
        raise ConfigError(f"runs: run {run_id} is {run.status}; galar scores FINISHED runs")
    if tags.get(tracking.tags.TAG_STUDY) or tags.get(tracking.tags.TAG_DATASET) == "galar":
        raise ConfigError(f"runs: run {run_id} is an evaluation run (study "
                          f"{tags.get(tracking.tags.TAG_STUDY)!r}), not a Kvasir-trained model run")
    if cell not in CELLS:
        raise ConfigError(f"runs: run {run_id} has no pipi.cell tag; galar scores runs of "
                          "`pipi train` / `ablate`")
    if tags.get(tracking.tags.TAG_SOURCE_KIND) == "predictions":
        raise ConfigError(f"runs: run {run_id} is an imported prediction file, with no model to "
                          "score on Galar; import the released checkpoint instead (`import -P "
                          "kind=checkpoint`)")
    if CELLS[cell].is_sequence:
        raise ConfigError(f"runs: run {run_id} is the sequence cell {cell}; galar scores "
                          f"per-frame runs ({', '.join(PER_FRAME_CELLS)})")
    classes = class_set_of_param(run.params.get("classes"))
    if not classes.is_kvasir:  # Galar is mapped onto Kvasir's 14; another head cannot be scored
        raise ConfigError(f"runs: {not_kvasir(f'run {run_id}', classes)}; galar scores models "
                          f"of Kvasir-Capsule's 14 classes (Galar's labels are mapped onto "
                          f"them): {KVASIR_MAP_HINT}")


def resolve_source_runs(runs: str, *, experiment: str) -> list[str]:
    """Run ids from ``runs``: comma-separated run ids and ``models:/`` URIs, or an MLflow filter.

    A filter string selects the FINISHED per-frame model runs of ``experiment`` it matches
    (evaluation children left out). Every run is checked (FINISHED, per-frame cell, not an
    evaluation) before anything is staged or scored.
    """
    text = (runs or "").strip()
    if not text:
        raise ConfigError("runs: give comma-separated run ids, models:/ URIs (models:/NAME/1, "
                          "models:/NAME@candidate) or an MLflow filter string")
    tokens = [t.strip() for t in text.split(",") if t.strip()]
    if all(_RUN_ID.match(t) or t.startswith("models:/") for t in tokens):
        ids = [tracking.registry.model_uri_run_id(t) if t.startswith("models:/") else t for t in tokens]
    else:
        found = tracking.load_runs(experiment, text)
        found = found[(found["status"] == "FINISHED") & found["cell"].isin(PER_FRAME_CELLS)
                      & (found["study"].fillna("") == "") & (found["dataset"] != "galar")]
        if found.empty:
            raise ConfigError(f"runs={text!r}: no FINISHED per-frame model run of experiment "
                              f"{experiment!r} matches this filter")
        ids = list(found.sort_values(["cell", "seed"])["run_id"])
    ids = list(dict.fromkeys(ids))
    for rid in ids:
        _check_source(rid)
    return ids


# --------------------------------------------------------------------------- scoring
def _slug(system: str) -> str:
    return re.sub(r"[^0-9A-Za-z._-]+", "_", str(system)).strip("_") or "unknown"


def galar_metrics(frames: pd.DataFrame, probs: np.ndarray, prefix: str = "test") -> dict:
    """Mapped-class and GalKva macro-AUC of scored Galar frames, overall and per capsule system."""
    y = frames["class_index"].to_numpy(np.int64)
    systems = (frames["capsule_system"].astype(str).to_numpy() if "capsule_system" in frames
               else np.full(len(y), ""))
    galkva = [class_index(c) for c in SCORING_SETS[BENCHMARK_VERSION]]
    out: dict[str, float] = {}
    groups = [("", np.ones(len(y), bool))] + [
        (f"capsule/{_slug(s)}/", systems == s) for s in sorted(set(systems)) if s]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a class without negatives in a subset is left out
        for name, m in groups:
            ys, ps = y[m], probs[m]
            mapped = sorted(set(ys.tolist()))
            g = np.isin(ys, galkva)
            out[f"{prefix}/{name}mapped_macro_auc"] = (
                macro_auc(ys, ps, classes=mapped) if len(mapped) > 1 else float("nan"))
            present = sorted(set(ys[g].tolist()))
            out[f"{prefix}/{name}galkva_macro_auc"] = (
                macro_auc(ys[g], ps[g], classes=present) if len(present) > 1 else float("nan"))
            out[f"{prefix}/{name}n_frames"] = float(m.sum())
    return out


def galar_scorer(ctx: EvalContext, rows: np.ndarray, split: str):
    """The model as trained (no calibration), plus the Galar metrics of :func:`galar_metrics`."""
    probs, _ = plain_scorer(ctx, rows, split)
    return probs, galar_metrics(ctx.frames.iloc[rows], probs, prefix=split)


def _fold_rows(frames: pd.DataFrame, *, fold: str) -> np.ndarray:
    if fold == "all":
        return np.ones(len(frames), bool)
    if "vendor_fold" not in frames:
        raise DataError("the staged Galar frames have no vendor_fold column; restage with "
                        "`pipi stage galar` or pass fold=all")
    return (frames["vendor_fold"] == fold).to_numpy()


def _calibrated_scorer(prior: CalibratedPrior):
    def scorer(ctx: EvalContext, rows: np.ndarray, split: str):
        """The model with the calibrated prior (lambda_eff at the run's image size)."""
        return galar_scorer(replace(ctx, cfg=prior.apply(ctx.cfg)), rows, split)
    return scorer


def _five_channel(cfg) -> None:
    if cfg.cell_config.input_channels != 5:
        raise ConfigError(f"cell {cfg.cell} has no prior input channels; prior_params needs "
                          "runs of a 5-channel cell (pi, pblood_only, phi_only)")


def resolve_fold(fold: str, *, calibrated: bool) -> str:
    """``auto`` -> ``all`` (zero-shot: the paper's protocol), or ``evaluation`` with a
    calibrated prior (it may have been fitted on the calibration videos)."""
    if fold not in FOLD_CHOICES:
        raise ConfigError(f"fold={fold!r}: must be one of {list(FOLD_CHOICES)}")
    if fold == "auto":
        return "evaluation" if calibrated else "all"
    return fold


def galar_evaluation(fold: str = "auto", prior: CalibratedPrior | None = None) -> Evaluation:
    """How one Kvasir-trained run is scored on Galar (the one place that builds it):
    zero-shot, or with a calibrated prior (variant ``calibrated``)."""
    fold = resolve_fold(fold, calibrated=prior is not None)
    if prior is not None:
        return Evaluation(study=STUDY, variant=VARIANT_CALIBRATED,
                          scorer=_calibrated_scorer(prior), splits=("test",),
                          options={"fold": fold, "alpha": prior.params.alpha,
                                   "lambda_eff_fraction": prior.params.lambda_eff_fraction,
                                   # frozen (the default) stays out: the earlier key holds
                                   **({"calibrate_mode": prior.params.mode}
                                      if prior.params.mode != "frozen" else {})},
                          tags={TAG_FOLD: fold, **prior.tags},
                          check=_five_channel, select=functools.partial(_fold_rows, fold=fold))
    return Evaluation(study=STUDY, variant=VARIANT, scorer=galar_scorer, splits=("test",),
                      options={"fold": fold}, tags={TAG_FOLD: fold},
                      select=functools.partial(_fold_rows, fold=fold))


# --------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class GalarResult:
    parent_run_id: str
    table: pd.DataFrame  # one row per source run: child run, reused, metrics
    summary: str


def _row(source_id: str, child_id: str, reused: bool) -> dict:
    run = tracking.get_run(child_id)
    t, m = run.tags, run.metrics
    row = {"cell": Arm.parse(t.get(tracking.tags.TAG_CELL, "")).cell,
           "backbone": t.get(tracking.tags.TAG_BACKBONE, ""), "seed": t.get(tracking.tags.TAG_SEED,
           ""),
           "source_run_id": source_id, "galar_run_id": child_id, "reused": reused,
           "n_frames": int(m.get("test/n_frames", 0)),
           "mapped_macro_auc": m.get("test/mapped_macro_auc", float("nan")),
           "galkva_macro_auc": m.get("test/galkva_macro_auc", float("nan"))}
    for k in sorted(m):
        if k.startswith("test/capsule/") and k.endswith("galkva_macro_auc"):
            row[f"galkva {k.split('/')[2]}"] = m[k]
    return row


def fold_scope(fold: str, frames: pd.DataFrame) -> str:
    """What a fold scores, in words: "every staged video (24 videos)" or "the evaluation fold
    only (12 of 24 staged videos; the calibration videos left out)"."""
    n_all = frames["video_id"].nunique()
    if fold == "all":
        return f"every staged video ({n_all} videos, the paper's zero-shot protocol)"
    n = frames.loc[_fold_rows(frames, fold=fold), "video_id"].nunique()
    return (f"the {fold} fold only ({n} of {n_all} staged videos; the calibration videos "
            "left out, not the paper's whole-subset protocol)")


def _summary(table: pd.DataFrame, root: Path, scope: str, digest: str) -> str:
    lines = [f"galar zero-shot: {len(table)} run(s) on {root}, scored on {scope} (data digest "
             f"{digest[:12]}); macro-AUC over every evaluable mapped class | over the GalKva "
             "v1.0 6-class intersection | GalKva per capsule system"]
    for r in table.to_dict("records"):
        per = "  ".join(f"{k.removeprefix('galkva ')} {v:.4f}" for k, v in r.items()
                        if k.startswith("galkva ") and isinstance(v, float))
        lines.append(f"  {r['cell']:8s} {r['backbone']:16s} seed {r['seed']:>4s}  "
                     f"mapped {r['mapped_macro_auc']:.4f}  GalKva {r['galkva_macro_auc']:.4f}  "
                     f"[{per}]  run {r['galar_run_id']}"
                     + (" (reused)" if r["reused"] else ""))
    return "\n".join(lines)


def run_galar(*, runs: str, data: str | None = "synthetic", fold: str = "auto",
              experiment: str | None = None, progress: bool = True,
              prior_params: str = "") -> GalarResult:
    """Score every source run zero-shot on Galar under a ``galar`` parent run.

    ``prior_params`` (a ``prior_params.json`` or a calibrate run id) scores them with the
    calibrated prior instead (variant ``calibrated``). Everything the user passed is checked
    (fold, prior_params, runs) before the data is staged.
    """
    prior = resolve_prior(prior_params) if prior_params else None
    fold = resolve_fold(fold, calibrated=prior is not None)
    ev = galar_evaluation(fold, prior)
    experiment = experiment or tracking.default_experiment()
    sources = resolve_source_runs(runs, experiment=experiment)
    staged = load_galar_data(data)
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    digest = manifest["data_digest"]
    scope = fold_scope(fold, frames)
    ev = replace(ev, tags={**ev.tags, TAG_SCOPE: scope})
    attached = bool(tracking.launched_run_id())
    rows = []
    with tracking.pipi_run(entry_point="galar", experiment=None if attached else experiment,
                           run_name="galar", tags={**tracking.data_tags(manifest),
                                                   TAG_FOLD: fold, TAG_SCOPE: scope}) as parent:
        parent.log_params({"galar.runs": runs, "galar.fold": fold, "galar.scope": scope,
                             "galar.data": str(root),
                             "galar.n_runs": len(sources), "galar.variant": ev.variant,
                             **({"galar.prior_params": prior_params} if prior_params else {})})
        for sid in tqdm(sources, desc="galar zero-shot", unit="run", disable=not progress):
            found = find_evaluation(sid, ev, data_digest=digest, entry_point="galar")
            if found is not None:
                log.info("run %s: reusing its FINISHED galar child %s", sid, found.run_id)
                rows.append(_row(sid, found.run_id, True))
                continue
            child = evaluate_run(sid, ev, data=root, parent_run_id=parent.run_id,
                                 entry_point="galar", progress=progress)
            rows.append(_row(sid, child, False))
        table = pd.DataFrame(rows)
        summary = _summary(table, root, scope, digest)
        parent.log_text(table.to_csv(index=False), "galar_zero_shot.csv")
        parent.log_text(summary + "\n", "galar_zero_shot.txt")
        parent.log_metrics({"galar.n_runs": float(len(table)),
                              "galar.n_reused": float(table["reused"].sum())})
    return GalarResult(parent.run_id, table, summary)
