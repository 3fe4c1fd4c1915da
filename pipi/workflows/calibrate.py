"""The ``calibrate`` workflow: Optuna fits the prior's alpha and lambda_eff, as one parent
MLflow run (entry point ``calibrate``).

The parent drives an Optuna study in an RDB storage (SQLite by default, PostgreSQL for many
machines) with ``workers`` workers; what a trial is depends on the mode
(:mod:`pipi.calibration.trials`, the runs it logs or trains :mod:`pipi.runs.calibrate`):

* **mode=frozen**: each trial recomputes the prior of a trained run's frozen model
  (:mod:`pipi.calibration.objective`) and becomes a nested run (params ``alpha``,
  ``lambda_eff``, ``lambda_eff_fraction``; metric ``calibration/macro_auc``; pruned trials
  tagged ``pipi.trial_state = PRUNED``).
* **mode=train**: each trial trains a ``pi`` run with its alpha and lambda_eff (the paper
  fixes the prior before training), or reuses a FINISHED one; ``target=galar:<system>``
  trains on ``data`` (Kvasir) and scores on the calibration fold of the staged Galar folder
  ``target_data``. ``executor=slurm`` runs the workers as one SLURM job array
  (:func:`pipi.sweeps.slurm.run_calibrate_workers`).
* **Continuing.** The study name defaults to a hash of (source run or recipe, target, data
  digest, search) and the study is opened with ``load_if_exists``: a later call, or a call
  on another machine with the same PostgreSQL storage, adds its ``trials`` to the same
  study, and the sampler learns from every earlier trial. ``trials`` is exactly the number
  of trials this call runs (split over its workers), unless a grid is exhausted first.
* **Baseline.** A new study's first trial is the run's own (frozen) or the recipe's default
  (train) prior (when inside the search space), so the best value is never below it.
* **Result.** The study's best trial is logged on the parent as params (``alpha``,
  ``lambda_eff``, ``lambda_eff_fraction``) and as ``prior_params.json`` (with its ``mode``),
  with Optuna's own optimisation history, alpha x lambda_eff contour and importance plots
  (``optuna/plots.html``, self-contained) and the trials table (``optuna/trials.csv``).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipi import tracking
from pipi.calibration.objective import (
    SEARCHES,
    CalibrationObjective,
    Fold,
    SearchSpace,
    calibration_fold,
    check_galar_classes,
    parse_search,
    parse_target,
)
from pipi.calibration.study import (
    PRUNERS,
    SAMPLERS,
    check_storage_url,
    create_study,
    default_storage,
    make_pruner,
    make_sampler,
    open_storage,
    parse_epochs,
    redact,
)
from pipi.calibration.trials import MODES, CalibrationResult, TrialSpec, split
from pipi.classes import class_set_of
from pipi.config import TrainConfig, make_config, resolve_profile, run_params, synthetic_preset
from pipi.data.cache import build_cache
from pipi.errors import ConfigError
from pipi.paths import pipi_home
from pipi.report.run_figures import cell_prior_figure, first_per_class
from pipi.runs import training
from pipi.runs.calibrate import end_lost_trial_runs, finish, optimize, run_workers
from pipi.runs.data import StagedData, galar_target_data, load_data
from pipi.runs.evaluate import device_for, load_run_model
from pipi.sweeps import slurm
from pipi.sweeps.plan import EXECUTORS
from pipi.training.frames import tmpdir

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- study names
def _search_key(search) -> dict:
    """The search space's part of a study name: none for alpha and lambda_eff (the names of
    the studies made before search was an option)."""
    return {} if tuple(search) == SEARCHES["alpha,lambda_eff"] else {"search": ",".join(search)}


def default_study_name(run_id: str, target: str, data_digest: str,
                       search=SEARCHES["alpha,lambda_eff"]) -> str:
    """Hash of (run, target, data digest, search): re-running continues the same study."""
    key = tracking.config_hash({"run": run_id, "target": target, "data_digest": data_digest,
                                **_search_key(search)})
    return f"calibrate-{key}"


def train_study_name(cfg, *, target: str, data_digest: str, target_digest: str = "",
                     search=SEARCHES["alpha,lambda_eff"]) -> str:
    """Hash of the recipe without its prior, target, data (and a Galar target's data), and the
    search space: a re-run continues the study."""
    recipe = {k: v for k, v in cfg.to_dict().items() if k != "prior"}
    key = tracking.config_hash({"mode": "train", "recipe": recipe, "target": target,
                                "data_digest": data_digest, **_search_key(search),
                                **({"target_digest": target_digest} if target_digest else {})})
    return f"calibrate-train-{key}"


# --------------------------------------------------------------------------- what to calibrate
@dataclass
class _Plan:
    """What one call calibrates, checked before the calibrate run starts: the mode's
    configuration, data, fold and study, and its own params, tags and spec fields."""

    mode: str
    storage_url: str
    rdb: object
    cfg: TrainConfig
    root: Path
    manifest: dict
    fold: Fold
    name: str                          # the study
    binding: dict                      # what the study belongs to
    tags: dict                         # data, target, code version (also the trials' runs)
    run_name: str
    params: dict                       # the mode's own params of the calibrate run
    spec: dict = field(default_factory=dict)   # the mode's own fields of the worker specs
    source_run_id: str | None = None
    target_digest: str = ""
    executor: str = "local"
    progress: bool = False
    objective: CalibrationObjective | None = None  # frozen: the model, loaded here
    frames: pd.DataFrame | None = None             # frozen: for the best prior's figure
    images: np.ndarray | None = None


def calibration_data(data: str | None, *, target: str, run: tracking.RunRecord
                     ) -> StagedData:
    """The staged data: ``data``, else (kvasir-val) the run's own, else an error (galar)."""
    kind, _ = parse_target(target)
    if data:
        return load_data(data)
    if kind == "galar":
        raise ConfigError(f"target={target}: pass data=<a staged Galar folder> "
                          "(`pipi synthesize galar` then `pipi stage galar`)")
    own = run.data_dir
    if own and (Path(own) / "manifest.json").is_file():
        return load_data(own)
    return load_data("synthetic")


def _frozen_plan(*, run, target, storage, study, data, search, progress,
                 train_options) -> _Plan:
    if not run:
        raise ConfigError("mode=frozen needs run=<a finished pi run id or models:/ URI>; "
                          "mode=train trains its own")
    if train_options:
        raise ConfigError(f"{sorted(train_options)}: only for mode=train")
    parse_target(target)
    storage_url = check_storage_url(storage)
    rdb = open_storage(storage_url)                       # unreachable storage: fail first
    run_id = tracking.model_run_id(run)
    source = tracking.usable_run(run_id, what=f"run={run}", finished=True)
    model, cfg = load_run_model(run_id)
    check_galar_classes(target, cfg.class_set.names, f"run {run_id}")
    staged = calibration_data(data, target=target, run=source)
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    images = build_cache(root, frames, size=cfg.image_size, digest=manifest["data_digest"],
                         cache_dir=pipi_home() / "cache", progress=progress)
    fold = calibration_fold(frames, manifest, target)
    objective = CalibrationObjective(model, cfg, images, fold, device_for())  # 5-channel check
    binding = {tracking.tags.TAG_SOURCE_RUN: run_id, tracking.tags.TAG_TARGET: target,
               tracking.tags.TAG_DATA_DIGEST: manifest["data_digest"]}
    tags = {**tracking.data_tags(manifest), tracking.tags.TAG_SOURCE_RUN: run_id,
            tracking.tags.TAG_TARGET: target,
            tracking.tags.TAG_CODE_VERSION: tracking.code_version()}
    prior = run_params(cfg)
    params = {"source_run_id": run_id, "source_cell": cfg.cell,
              "source_backbone": cfg.backbone, "source_alpha": prior["alpha"],
              "source_lambda_eff": prior["lambda_eff"]}
    return _Plan("frozen", storage_url, rdb, cfg, root, manifest, fold,
                 study or default_study_name(run_id, target, manifest["data_digest"], search),
                 binding, tags, f"calibrate-{cfg.cell}-{target}", params,
                 spec={"run_id": run_id}, source_run_id=run_id, progress=progress,
                 objective=objective, frames=frames, images=images)


def _train_plan(*, target, storage, study, data, search, train_fn, epochs="auto",
                backbone="efficientnet_b0", seed=42, executor="local", profile="auto",
                weights="imagenet", target_data="") -> _Plan:
    parse_target(target)
    if executor not in EXECUTORS:
        raise ConfigError(f"executor={executor!r} is unknown. Available: {list(EXECUTORS)}")
    train_fn = train_fn or training.train
    n_epochs = parse_epochs(epochs)
    galar = galar_target_data(target, target_data)  # None for kvasir-val
    storage_url = check_storage_url(storage)
    rdb = open_storage(storage_url)
    staged = load_data(data, preset=synthetic_preset(profile))
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    if manifest.get("dataset") == "galar":
        raise ConfigError(f"data={data}: a staged Galar folder is test data only; mode=train "
                          "trains on a staged Kvasir-Capsule release")
    check_galar_classes(target, class_set_of(manifest).names, f"data={root}")
    profile = resolve_profile(profile, manifest.get("dataset", ""))
    cfg = make_config(cell="pi", backbone=backbone, seed=int(seed), profile=profile,
                      weights=weights, epochs=n_epochs)
    digest = manifest["data_digest"]
    if galar is None:
        fold, tdigest, troot = calibration_fold(frames, manifest, target), "", ""
    else:
        troot, tdigest = str(galar.root), galar.digest
        fold = calibration_fold(galar.frames, galar.manifest, target)
    recipe_key = train_study_name(cfg, target=target, data_digest=digest, target_digest=tdigest,
                                  search=search)
    binding = {tracking.tags.TAG_SOURCE_RUN: "", tracking.tags.TAG_TARGET: target,
               tracking.tags.TAG_DATA_DIGEST: digest, tracking.tags.TAG_CALIBRATE_MODE: "train",
               tracking.tags.TAG_RECIPE: recipe_key,
               tracking.tags.TAG_TARGET_DATA_DIGEST: tdigest or digest}
    tags = {**tracking.data_tags(manifest), tracking.tags.TAG_TARGET: target,
            tracking.tags.TAG_CALIBRATE_MODE: "train",
            tracking.tags.TAG_CODE_VERSION: tracking.code_version(),
            tracking.tags.TAG_TARGET_DATA_DIGEST: tdigest or digest}
    params = {"executor": executor, "epochs": cfg.epochs, "backbone": cfg.backbone,
              "seed": cfg.seed, "profile": profile, "weights": cfg.weights,
              **({"target_data": troot, "target_data_digest": tdigest} if troot else {})}
    return _Plan("train", storage_url, rdb, cfg, root, manifest, fold, study or recipe_key,
                 binding, tags, f"calibrate-train-pi-{target}", params,
                 spec={"train_fn": train_fn, "target_data": troot, "target_digest": tdigest},
                 target_digest=tdigest, executor=executor)


# --------------------------------------------------------------------------- the parent run
def run_calibration(*, run: str = "", target: str, trials: int = 40, sampler: str = "tpe",
                    pruner: str = "median", storage: str = "", study: str = "",
                    workers: int = 1, data: str | None = None, experiment: str | None = None,
                    progress: bool = True, mode: str = "frozen", train_fn=None,
                    search: str = "auto", **train_options) -> CalibrationResult:
    """Fit alpha and lambda_eff of a prior on ``target`` (see the module docstring).

    ``search``: ``alpha`` (lambda_eff fixed at the configuration's own), ``alpha,lambda_eff``
    or ``auto`` (mode=train: alpha, as the paper; mode=frozen: both). ``mode=frozen`` needs
    ``run``; ``mode=train`` takes ``train_options`` (epochs, backbone, seed, executor,
    profile, weights, target_data). Each trial of mode=train is one run of the library's
    training service (:func:`pipi.runs.training.train`); ``train_fn`` replaces it (a test's
    seam: a trial that dies)."""
    if trials < 1 or workers < 1:
        raise ConfigError(f"trials={trials} and workers={workers} must be >= 1")
    make_sampler(sampler, seed=0, trials=trials)
    make_pruner(pruner)
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is unknown. Available: {list(MODES)}")
    params = parse_search(search, mode=mode)
    if mode == "train":
        plan = _train_plan(target=target, storage=storage, study=study, data=data,
                           search=params, train_fn=train_fn, **train_options)
    else:
        plan = _frozen_plan(run=run, target=target, storage=storage, study=study, data=data,
                            search=params, progress=progress, train_options=train_options)
    st = create_study(plan.name, plan.rdb, plan.storage_url, plan.binding)
    for rid in end_lost_trial_runs(st):  # a restart after a worker was killed
        log.warning("run %s of a FAILed trial was still RUNNING: ended FAILED", rid)
    existing = len(st.trials)
    space = SearchSpace.of(plan.cfg, params)
    base = space.baseline() if sampler != "grid" else None
    if existing == 0 and base is not None:  # the model's, or the recipe's, own prior first
        st.enqueue_trial(base, user_attrs={"baseline": True})
    seed = int(tracking.config_hash({"study": plan.name, "existing": existing}), 16) % (2**31)
    threads = max(1, (os.cpu_count() or 1) // workers)
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="calibrate", experiment=experiment,
                               run_name=plan.run_name,
                               tags={**plan.tags, tracking.tags.TAG_OPTUNA_STUDY: plan.name,
                                     tracking.tags.TAG_CALIBRATE_MODE: mode,
                                     tracking.tags.TAG_OPTUNA_STORAGE: redact(plan.storage_url)}
                               ) as prun:
            parent = prun.run_id
            prun.log_params({
                "mode": mode, "target": target, "optuna_study": plan.name,
                "optuna_storage": redact(plan.storage_url), "trials": trials,
                "sampler": sampler, "pruner": pruner, "workers": workers,
                "data_dir": str(plan.root), "image_size": plan.cfg.image_size,
                "fold_frames": len(plan.fold.rows),
                "fold_classes": ",".join(plan.fold.class_names), "search": space.key,
                **plan.params})
            specs = [TrialSpec(
                mode=mode, index=i, n_trials=n, study=plan.name, storage=plan.storage_url,
                sampler=sampler, pruner=pruner, seed=seed + i, parent_run_id=parent,
                tracking_uri=tracking.current_tracking_uri(), data=str(plan.root),
                base_config=plan.cfg.to_dict(), target=target, search=params,
                grid_trials=trials, threads=threads, progress=plan.progress and workers == 1,
                code_version=tracking.code_version(), tags=plan.tags,
                data_digest=plan.manifest["data_digest"], fold_classes=plan.fold.classes,
                **plan.spec)
                for i, n in enumerate(split(trials, workers)) if n > 0]
            results = _run(plan, specs, storage)
            result = finish(prun, specs[0], results, work, storage=plan.rdb,
                            source_run_id=plan.source_run_id, target_digest=plan.target_digest)
            if plan.frames is not None:  # the best trial's prior on the target's frames
                rows = first_per_class(plan.frames, plan.fold.rows)
                prun.log_figures({"best_prior_examples": cell_prior_figure(
                    result.best.apply(plan.cfg), plan.images[rows],
                    list(plan.frames["class"].to_numpy()[rows]),
                    label=f"{plan.cfg.cell}, best trial", source=target)})
            return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(plan: _Plan, specs: list[TrialSpec], storage: str) -> list:
    """The workers: one in this process (mode=frozen, its model loaded here), spawned
    processes, or one SLURM job array (their spec files hold no password from the
    environment: the storage as given)."""
    if plan.executor == "slurm":
        return slurm.run_calibrate_workers(
            [replace(sp, storage=(storage or "").strip()) for sp in specs], storage=plan.rdb)
    if plan.objective is not None and len(specs) == 1:
        return [optimize(specs[0], objective=plan.objective, storage=plan.rdb)]
    plan.objective = None                  # each worker loads its own
    return run_workers(specs, storage=plan.rdb)


__all__ = ["MODES", "PRUNERS", "SAMPLERS", "CalibrationResult", "check_storage_url",
           "default_storage", "default_study_name", "make_pruner", "make_sampler",
           "open_storage", "parse_epochs", "redact", "run_calibration", "train_study_name"]
