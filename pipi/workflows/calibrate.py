"""The ``calibrate`` workflow: Optuna fits the prior's alpha and lambda_eff of a frozen model.

One call is one parent MLflow run (entry point ``calibrate``) that drives an Optuna study in
an RDB storage (SQLite by default, PostgreSQL for many machines) with ``workers`` local
processes; each finished trial becomes a nested run (params ``alpha``, ``lambda_eff``,
``lambda_eff_fraction``; metric ``calibration/macro_auc``; pruned trials tagged
``pipi.trial_state = PRUNED``). The objective is :mod:`pipi.calibration.objective`'s.

* **Continuing.** The study name defaults to a hash of (source run, target, data digest) and
  the study is opened with ``load_if_exists``: a later call, or a call on another machine
  with the same PostgreSQL storage, adds its ``trials`` to the same study, and the sampler
  learns from every earlier trial. ``trials`` is exactly the number of trials this call runs
  (split over its workers), unless a grid is exhausted first.
* **Baseline.** A new study's first trial is the run's own trained prior (when inside the
  search space), so the best value is never below the model as trained.
* **Result.** The study's best trial is logged on the parent as params (``alpha``,
  ``lambda_eff``, ``lambda_eff_fraction``) and as ``prior_params.json``, with Optuna's own
  optimisation history, alpha x lambda_eff contour and importance plots
  (``optuna/plots.html``, self-contained) and the trials table (``optuna/trials.csv``).

* **mode=train.** Each trial trains a ``pi`` run with its alpha and lambda_eff instead (the
  paper fixes the prior before training): see :mod:`pipi.sweeps.calibrate_trials`. The parent
  logs the same ``prior_params.json`` (``mode: train``), the plots and ``optuna/trials.csv``
  (params, objective, run id, reused). ``target=galar:<system>`` trains on ``data`` (Kvasir)
  and scores on the calibration fold of the staged Galar folder ``target_data``.

Optuna's ``optuna_integration.MLflowCallback`` is not used (deprecated, and it logs flat
runs named after the study); :func:`_trial_logger` logs nested runs through
``pipi.tracking``.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import optuna
import torch

from pipi import tracking
from pipi.calibration.objective import (
    SEARCHES,
    CalibrationObjective,
    PriorParams,
    SearchSpace,
    calibration_fold,
    diagonal,
    parse_search,
    parse_target,
    prior_params_document,
)
from pipi.calibration.study import (
    PRUNERS,
    SAMPLERS,
    check_storage_url,
    default_storage,
    make_pruner,
    make_sampler,
    open_storage,
    parse_epochs,
    redact,
)
from pipi.config import make_config, resolve_profile, run_params, synthetic_preset
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError, PipiError
from pipi.paths import pipi_home
from pipi.report.run_figures import cell_prior_figure, first_per_class
from pipi.report.study_plots import write_study_plots
from pipi.runs.data import StagedData, galar_target_data, load_data
from pipi.runs.evaluate import device_for, load_run_model
from pipi.sweeps.calibrate_trials import (
    TrainTrialSpec,
    end_lost_trial_runs,
    run_slurm_workers,
    run_workers,
    train_worker_main,
    trials_table,
    worker_id,
)
from pipi.sweeps.plan import EXECUTORS
from pipi.training.frames import tmpdir

log = logging.getLogger(__name__)

MODES = ("frozen", "train")

def _bind_study(st: optuna.Study, name: str, binding: dict) -> None:
    """A study belongs to one (source run, target, data digest): its first call records them
    as study user attributes, and a later call with another binding is refused."""
    have = {k: st.user_attrs[k] for k in binding if k in st.user_attrs}
    if not have:
        if st.trials:  # made before studies were bound: keep it open, bind it now
            log.warning("study %s has trials but no recorded source run; binding it to %s",
                        name, binding)
        for k, v in binding.items():
            st.set_user_attr(k, v)
        return
    diff = [f"{k.removeprefix('pipi.')} {have[k]} (this call: {binding[k]})"
            for k in binding if k in have and have[k] != binding[k]]
    if diff:
        raise ConfigError(f"study={name}: belongs to another calibration: " + "; ".join(diff)
                          + "; choose another study name, or leave study empty for the default")


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


# --------------------------------------------------------------------------- one worker
@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs (picklable)."""

    index: int
    n_trials: int
    run_id: str
    data: str
    target: str
    storage: str
    study: str
    sampler: str
    pruner: str
    seed: int
    parent_run_id: str
    tracking_uri: str
    tags: dict = field(default_factory=dict)
    threads: int = 0
    grid_trials: int = 1
    progress: bool = False
    search: tuple[str, ...] = SEARCHES["alpha,lambda_eff"]


@dataclass
class WorkerResult:
    index: int
    worker: str
    trials: list[int] = field(default_factory=list)
    costs: dict[int, dict] = field(default_factory=dict)       # trial -> TrialCost fields
    logging_s: dict[int, float] = field(default_factory=dict)  # trial -> nested-run seconds
    wall_s: float = 0.0


def _trial_logger(spec: WorkerSpec, image_size: int, result: WorkerResult, space: SearchSpace):
    """Optuna callback: one nested MLflow run per finished trial (COMPLETE, PRUNED, FAIL)."""

    def log_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        t0 = time.perf_counter()
        p = space.values(trial.params)
        state = trial.state.name
        params = {**p, "trial_number": trial.number}
        if p["lambda_eff_fraction"] is not None:
            params["lambda_eff"] = p["lambda_eff_fraction"] * diagonal(image_size)
        cost = result.costs.get(trial.number, {})
        metrics = {f"calibration/{k}_seconds": v for k, v in cost.items()}
        if trial.value is not None:
            metrics["calibration/macro_auc"] = trial.value
        tags = {**spec.tags, tracking.TAG_ENTRY_POINT: "calibrate",
                tracking.TAG_OPTUNA_STUDY: study.study_name, tracking.TAG_TRIAL_NUMBER: trial.number,
                tracking.TAG_TRIAL_STATE: state, tracking.TAG_PRUNED: str(state == "PRUNED").lower(),
                tracking.TAG_WORKER: result.worker,
                tracking.TAG_BASELINE_TRIAL: str(bool(trial.user_attrs.get("baseline"))).lower()}
        tracking.log_finished_child(
            spec.parent_run_id, run_name=f"trial-{trial.number}", params=params,
            metrics=metrics, tags=tags,
            series={"calibration/running_macro_auc": sorted(trial.intermediate_values.items())},
            status="FAILED" if state == "FAIL" else "FINISHED")
        result.logging_s[trial.number] = time.perf_counter() - t0

    return log_trial


def optimize(objective: CalibrationObjective, spec: WorkerSpec, *,
             storage: optuna.storages.BaseStorage | None = None) -> WorkerResult:
    """Run ``spec.n_trials`` trials of the study in this process, logging each as a child run."""
    storage = storage if storage is not None else open_storage(spec.storage)
    study = optuna.load_study(study_name=spec.study, storage=storage,
                              sampler=make_sampler(spec.sampler, seed=spec.seed,
                                                   trials=spec.grid_trials, params=spec.search),
                              pruner=make_pruner(spec.pruner))
    result = WorkerResult(spec.index, worker_id(spec.index))
    space = SearchSpace.of(objective.cfg, spec.search)

    def run_trial(trial: optuna.Trial) -> float:
        alpha, frac = space.suggest(trial)
        trial.set_user_attr("worker", result.worker)
        result.trials.append(trial.number)

        def report(step: int, value: float) -> None:
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"running macro-AUC {value:.4f} at step {step}")

        try:
            return objective.score(alpha, frac, report)
        finally:
            result.costs[trial.number] = asdict(objective.last_cost)

    t0 = time.perf_counter()
    tracking.optimize_study(study, run_trial, n_trials=spec.n_trials, catch=(),
                            callbacks=[_trial_logger(spec, objective.cfg.image_size, result,
                                                     space)],
                            show_progress_bar=spec.progress)
    result.wall_s = time.perf_counter() - t0
    return result


def _load_objective(spec: WorkerSpec) -> CalibrationObjective:
    model, cfg = load_run_model(spec.run_id)
    frames, manifest = load_staged(Path(spec.data))
    images = build_cache(Path(spec.data), frames, size=cfg.image_size,
                         digest=manifest["data_digest"], cache_dir=pipi_home() / "cache",
                         progress=False)
    fold = calibration_fold(frames, manifest, spec.target)
    return CalibrationObjective(model, cfg, images, fold, device_for())


def _worker_main(spec: WorkerSpec, out) -> None:
    """Entry of a spawned worker process: report ``("ok", result)`` or ``("error", line)``."""
    tracking.install_signal_handlers()  # SIGTERM/Ctrl-C: the trial FAILs, no child RUNNING
    try:
        if spec.threads:
            torch.set_num_threads(spec.threads)
        tracking.configure(spec.tracking_uri)
        out.put(("ok", spec.index, optimize(_load_objective(spec), spec)))
    except PipiError as exc:
        out.put(("error", spec.index, str(exc)))
    except BaseException as exc:  # report, then die with the traceback on stderr
        out.put(("error", spec.index, f"{type(exc).__name__}: {exc}"))
        raise


# --------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class CalibrationResult:
    run_id: str
    study: str
    storage: str
    best: PriorParams
    best_value: float
    baseline_value: float | None
    trials_run: list[int]
    n_complete: int
    n_pruned: int
    n_total: int
    workers: list
    mode: str = "frozen"
    trained: list[int] = field(default_factory=list)   # mode=train: trials that trained
    reused: list[int] = field(default_factory=list)    # mode=train: trials that reused a run


def _split(trials: int, workers: int) -> list[int]:
    return [trials // workers + (i < trials % workers) for i in range(workers)]


def calibration_data(data: str | None, *, target: str, run) -> StagedData:
    """The staged data: ``data``, else (kvasir-val) the run's own, else an error (galar)."""
    kind, _ = parse_target(target)
    if data:
        return load_data(data)
    if kind == "galar":
        raise ConfigError(f"target={target}: pass data=<a staged Galar folder> "
                          "(`pipi synthesize galar` then `pipi stage galar`)")
    own = run.data.params.get("data_dir")
    if own and (Path(own) / "manifest.json").is_file():
        return load_data(own)
    return load_data("synthetic")


def run_calibration(*, run: str = "", target: str, trials: int = 40, sampler: str = "tpe",
                    pruner: str = "median", storage: str = "", study: str = "",
                    workers: int = 1, data: str | None = None, experiment: str | None = None,
                    progress: bool = True, mode: str = "frozen", train_fn=None,
                    search: str = "auto", **train_options) -> CalibrationResult:
    """Fit alpha and lambda_eff of ``run``'s prior on ``target`` (see the module docstring).

    ``search``: ``alpha`` (lambda_eff fixed at the configuration's own), ``alpha,lambda_eff``
    or ``auto`` (mode=train: alpha, as the paper; mode=frozen: both).
    ``mode=train`` trains one ``pi`` run per trial instead (:func:`_calibrate_by_training`;
    ``train_options``: epochs, backbone, seed, executor, profile, weights). ``train_fn`` is
    the ``train`` workflow's function, passed in by the caller (the CLI): a workflow does not
    import another."""
    if trials < 1 or workers < 1:
        raise ConfigError(f"trials={trials} and workers={workers} must be >= 1")
    make_sampler(sampler, seed=0, trials=trials)
    make_pruner(pruner)
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is unknown. Available: {list(MODES)}")
    params = parse_search(search, mode=mode)
    if mode == "train":
        return _calibrate_by_training(
            target=target, trials=trials, sampler=sampler, pruner=pruner, storage=storage,
            study=study, workers=workers, data=data, experiment=experiment, train_fn=train_fn,
            search=params, **train_options)
    if not run:
        raise ConfigError("mode=frozen needs run=<a finished pi run id or models:/ URI>; "
                          "mode=train trains its own")
    if train_options:
        raise ConfigError(f"{sorted(train_options)}: only for mode=train")
    parse_target(target)
    storage_url = check_storage_url(storage)
    rdb = open_storage(storage_url)                       # unreachable storage: fail first
    run_id = tracking.model_run_id(run)
    tracking.usable_run(run_id, what=f"run={run}", finished=True)
    model, cfg = load_run_model(run_id)
    staged = calibration_data(data, target=target, run=tracking.get_run(run_id))
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    images = build_cache(root, frames, size=cfg.image_size, digest=manifest["data_digest"],
                         cache_dir=pipi_home() / "cache", progress=progress)
    fold = calibration_fold(frames, manifest, target)
    objective = CalibrationObjective(model, cfg, images, fold, device_for())  # 5-channel check
    name = study or default_study_name(run_id, target, manifest["data_digest"], params)
    space = SearchSpace.of(cfg, params)
    st = optuna.create_study(study_name=name, storage=rdb, direction="maximize",
                             load_if_exists=True)
    if st.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(f"study={name}: exists in {redact(storage_url)} but minimises")
    _bind_study(st, name, {tracking.TAG_SOURCE_RUN: run_id, tracking.TAG_TARGET: target,
                           tracking.TAG_DATA_DIGEST: manifest["data_digest"]})
    existing = len(st.trials)
    base = space.baseline() if sampler != "grid" else None
    if existing == 0 and base is not None:
        st.enqueue_trial(base, user_attrs={"baseline": True})
    tags = {**tracking.data_tags(manifest), tracking.TAG_SOURCE_RUN: run_id,
            tracking.TAG_TARGET: target, tracking.TAG_CODE_VERSION: tracking.code_version()}
    seed = int(tracking.config_hash({"study": name, "existing": existing}), 16) % (2**31)
    threads = max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="calibrate", experiment=experiment,
                               run_name=f"calibrate-{cfg.cell}-{target}",
                               tags={**tags, tracking.TAG_OPTUNA_STUDY: name,
                                     tracking.TAG_CALIBRATE_MODE: "frozen",
                                     tracking.TAG_OPTUNA_STORAGE: redact(storage_url)}) as prun:
            parent = prun.info.run_id
            tracking.log_params({
                "mode": "frozen", "source_run_id": run_id, "target": target,
                "optuna_study": name,
                "optuna_storage": redact(storage_url), "trials": trials, "sampler": sampler,
                "pruner": pruner, "workers": workers, "data_dir": str(root),
                "source_cell": cfg.cell, "source_backbone": cfg.backbone,
                "image_size": cfg.image_size, "fold_frames": len(fold.rows),
                "fold_classes": ",".join(fold.class_names),
                "source_alpha": run_params(cfg)["alpha"],
                "source_lambda_eff": run_params(cfg)["lambda_eff"], "search": space.key})
            specs = [WorkerSpec(index=i, n_trials=n, run_id=run_id, data=str(root),
                                target=target, storage=storage_url, study=name,
                                sampler=sampler, pruner=pruner, seed=seed + i,
                                parent_run_id=parent,
                                tracking_uri=tracking.current_tracking_uri(), tags=tags,
                                threads=threads, grid_trials=trials, search=params,
                                progress=progress and workers == 1)
                     for i, n in enumerate(_split(trials, workers)) if n > 0]
            if len(specs) == 1:
                results = [optimize(objective, specs[0], storage=rdb)]
            else:
                del objective, model                   # each worker loads its own
                results = run_workers(specs, storage=rdb, target=_worker_main)
            result = _finish(name, rdb, storage_url, results, cfg, work, target=target,
                             run_id=run_id, parent=parent, manifest=manifest, space=space)
            # what the best trial's prior looks like on the target's frames
            rows = first_per_class(frames, fold.rows)
            tracking.log_figures({"best_prior_examples": cell_prior_figure(
                result.best.apply(cfg), images[rows], list(frames["class"].to_numpy()[rows]),
                label=f"{cfg.cell}, best trial", source=target)})
            return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _outcome(name, rdb, parent, space: SearchSpace):
    """The finished study of either mode: (study, complete trials, best trial, its prior
    (fixed parameters from ``space``), the baseline trial's value or None, number pruned);
    no completed trial is an error."""
    st = optuna.load_study(study_name=name, storage=rdb)
    complete = [t for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise PipiError(f"study {name}: no trial completed (all pruned or failed); run more "
                        "trials or pass pruner=none")
    best_trial = st.best_trial
    v = space.values(best_trial.params)
    best = PriorParams(v["alpha"], v["lambda_eff_fraction"], f"run {parent}")
    baseline = next((t.value for t in complete if t.user_attrs.get("baseline")), None)
    n_pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in st.trials)
    return st, complete, best_trial, best, baseline, n_pruned


def _finish(name, rdb, storage_url, results, cfg, work: Path, *, target, run_id, parent,
            manifest, space: SearchSpace) -> CalibrationResult:
    """Log the study's best trial, counts and plots on the parent run."""
    st, complete, best_trial, best, baseline, n_pruned = _outcome(name, rdb, parent, space)
    states = [t.state for t in st.trials]
    doc = prior_params_document(
        best, image_size=cfg.image_size, objective="macro_auc", value=best_trial.value,
        baseline_value=baseline, best_trial=best_trial.number, target=target,
        source_run_id=run_id, calibrate_run_id=parent, study=name,
        storage=redact(storage_url), data_digest=manifest["data_digest"],
        n_trials=len(st.trials), mode="frozen", search=space.key)
    tracking.log_params({"alpha": best.alpha, "lambda_eff": doc["lambda_eff"],
                         "lambda_eff_fraction": best.lambda_eff_fraction,
                         "best_trial": best_trial.number})
    metrics = {"calibration/best_macro_auc": best_trial.value,
               "calibration/trials_complete": len(complete),
               "calibration/trials_pruned": n_pruned, "calibration/trials_total": len(states)}
    if baseline is not None:
        metrics["calibration/baseline_macro_auc"] = baseline
        metrics["calibration/gain_macro_auc"] = best_trial.value - baseline
    tracking.log_metrics(metrics)
    tracking.log_dict(doc, "prior_params.json")
    write_study_plots(st, work / "optuna")
    st.trials_dataframe().to_csv(work / "optuna" / "trials.csv", index=False)
    tracking.log_artifacts(work / "optuna", "optuna")
    ran = sorted(n for r in results for n in r.trials)
    return CalibrationResult(parent, name, redact(storage_url), best, best_trial.value,
                             baseline, ran, len(complete), n_pruned, len(states), results)


# --------------------------------------------------------------------------- mode=train
def train_study_name(cfg, *, target: str, data_digest: str, target_digest: str = "",
                     search=SEARCHES["alpha,lambda_eff"]) -> str:
    """Hash of the recipe without its prior, target, data (and a Galar target's data), and the
    search space: a re-run continues the study."""
    recipe = {k: v for k, v in cfg.to_dict().items() if k != "prior"}
    key = tracking.config_hash({"mode": "train", "recipe": recipe, "target": target,
                                "data_digest": data_digest, **_search_key(search),
                                **({"target_digest": target_digest} if target_digest else {})})
    return f"calibrate-train-{key}"


def _calibrate_by_training(*, target, trials, sampler, pruner, storage, study, workers, data,
                           experiment, train_fn, epochs="auto", backbone="efficientnet_b0",
                           seed=42, executor="local", profile="auto", weights="imagenet",
                           target_data="", search=SEARCHES["alpha"]) -> CalibrationResult:
    """``mode=train``: each trial a ``pi`` training run (``pipi.sweeps.calibrate_trials``)."""
    parse_target(target)
    if executor not in EXECUTORS:
        raise ConfigError(f"executor={executor!r} is unknown. Available: {list(EXECUTORS)}")
    if train_fn is None:
        raise ConfigError("mode=train needs train_fn (the train workflow's train)")
    n_epochs = parse_epochs(epochs)
    galar = galar_target_data(target, target_data)  # None for kvasir-val
    storage_url = check_storage_url(storage)
    rdb = open_storage(storage_url)
    staged = load_data(data, preset=synthetic_preset(profile))
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    if manifest.get("dataset") == "galar":
        raise ConfigError(f"data={data}: a staged Galar folder is test data only; mode=train "
                          "trains on a staged Kvasir-Capsule release")
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
    space = SearchSpace.of(cfg, search)
    name = study or recipe_key
    st = optuna.create_study(study_name=name, storage=rdb, direction="maximize",
                             load_if_exists=True)
    if st.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(f"study={name}: exists in {redact(storage_url)} but minimises")
    _bind_study(st, name, {tracking.TAG_SOURCE_RUN: "", tracking.TAG_TARGET: target,
                           tracking.TAG_DATA_DIGEST: digest, tracking.TAG_CALIBRATE_MODE: "train",
                           tracking.TAG_RECIPE: recipe_key,
                           tracking.TAG_TARGET_DATA_DIGEST: tdigest or digest})
    for rid in end_lost_trial_runs(st):  # a restart after a worker was killed
        log.warning("run %s of a FAILed trial was still RUNNING: ended FAILED", rid)
    existing = len(st.trials)
    base = space.baseline() if sampler != "grid" else None
    if existing == 0 and base is not None:  # the paper's default prior, trained as trial 0
        st.enqueue_trial(base, user_attrs={"baseline": True})
    seed0 = int(tracking.config_hash({"study": name, "existing": existing}), 16) % (2**31)
    threads = max(1, (os.cpu_count() or 1) // workers)
    tags = {**tracking.data_tags(manifest), tracking.TAG_TARGET: target,
            tracking.TAG_CALIBRATE_MODE: "train", tracking.TAG_CODE_VERSION: tracking.code_version(),
            tracking.TAG_TARGET_DATA_DIGEST: tdigest or digest}
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="calibrate", experiment=experiment,
                               run_name=f"calibrate-train-pi-{target}",
                               tags={**tags, tracking.TAG_OPTUNA_STUDY: name,
                                     tracking.TAG_OPTUNA_STORAGE: redact(storage_url)}) as prun:
            parent = prun.info.run_id
            tracking.log_params({
                "mode": "train", "target": target, "optuna_study": name,
                "optuna_storage": redact(storage_url), "trials": trials, "sampler": sampler,
                "pruner": pruner, "workers": workers, "executor": executor,
                "epochs": cfg.epochs, "backbone": cfg.backbone, "seed": cfg.seed,
                "profile": profile, "weights": cfg.weights, "data_dir": str(root),
                "image_size": cfg.image_size, "fold_frames": len(fold.rows),
                "fold_classes": ",".join(fold.class_names), "search": space.key,
                **({"target_data": troot, "target_data_digest": tdigest} if troot else {})})
            specs = [TrainTrialSpec(
                index=i, n_trials=n, study=name, storage=storage_url, sampler=sampler,
                pruner=pruner, seed=seed0 + i, parent_run_id=parent,
                tracking_uri=tracking.current_tracking_uri(),
                code_version=tracking.code_version(), data=str(root), data_digest=digest,
                base_config=cfg.to_dict(), fold_classes=tuple(fold.classes), train_fn=train_fn,
                grid_trials=trials, threads=threads, target=target, target_data=troot,
                target_digest=tdigest, search=search)
                for i, n in enumerate(_split(trials, workers)) if n > 0]
            if executor == "slurm":  # the spec files hold no password from the environment
                specs = [replace(sp, storage=(storage or "").strip()) for sp in specs]
                results = run_slurm_workers(specs, storage=rdb)
            else:
                results = run_workers(specs, storage=rdb, target=train_worker_main)
            return _finish_train(name, rdb, storage_url, results, cfg, work, target=target,
                                 parent=parent, digest=digest, target_digest=tdigest,
                                 space=space)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish_train(name, rdb, storage_url, results, cfg, work: Path, *, target, parent,
                  digest, space: SearchSpace, target_digest="") -> CalibrationResult:
    """The best trial as ``prior_params.json``, counts, Optuna plots and the trials table."""
    st, complete, best_trial, best, baseline, n_pruned = _outcome(name, rdb, parent, space)
    trials = st.trials
    doc = prior_params_document(
        best, image_size=cfg.image_size, objective="macro_auc", value=best_trial.value,
        baseline_value=baseline, best_trial=best_trial.number, target=target,
        source_run_id=None, calibrate_run_id=parent, study=name,
        storage=redact(storage_url), data_digest=digest, n_trials=len(trials), mode="train",
        best_run_id=best_trial.user_attrs.get("run_id"), backbone=cfg.backbone,
        epochs=cfg.epochs, seed=cfg.seed, search=space.key,
        **({"target_data_digest": target_digest} if target_digest else {}))
    trained = sorted(n for r in results for n in r.trained)
    reused = sorted(n for r in results for n in r.reused)
    tracking.log_params({"alpha": best.alpha, "lambda_eff": doc["lambda_eff"],
                         "lambda_eff_fraction": best.lambda_eff_fraction,
                         "best_trial": best_trial.number,
                         "best_run_id": best_trial.user_attrs.get("run_id", "")})
    metrics = {"calibration/best_macro_auc": best_trial.value,
               "calibration/trials_complete": len(complete),
               "calibration/trials_pruned": n_pruned, "calibration/trials_total": len(trials),
               "calibration/trials_trained": len(trained),
               "calibration/trials_reused": len(reused)}
    if baseline is not None:
        metrics["calibration/baseline_macro_auc"] = baseline
        metrics["calibration/gain_macro_auc"] = best_trial.value - baseline
    tracking.log_metrics(metrics)
    tracking.log_dict(doc, "prior_params.json")
    write_study_plots(st, work / "optuna")
    table = trials_table(trials, image_size=cfg.image_size, space=space)
    table.to_csv(work / "optuna" / "trials.csv", index=False)
    tracking.log_artifacts(work / "optuna", "optuna")
    ran = sorted(n for r in results for n in r.trials)
    return CalibrationResult(parent, name, redact(storage_url), best, best_trial.value,
                             baseline, ran, len(complete), n_pruned, len(trials), results,
                             mode="train", trained=trained, reused=reused)


__all__ = ["MODES", "PRUNERS", "SAMPLERS", "CalibrationResult", "WorkerSpec", "check_storage_url",
           "default_storage", "default_study_name", "make_pruner", "make_sampler",
           "open_storage", "optimize", "parse_epochs", "redact", "run_calibration", "run_workers",
           "train_study_name"]
