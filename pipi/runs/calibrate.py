"""The runs of ``calibrate``'s trials: one worker of either mode (:class:`~pipi.calibration.
trials.TrialSpec`) running its share of an Optuna study, in this process, in spawned processes
or as a SLURM task, and the calibrate run's summary of the finished study.

* ``mode=frozen``: each finished trial (COMPLETE, PRUNED, FAIL) becomes a run nested under the
  calibrate run (params ``alpha``, ``lambda_eff``, ``lambda_eff_fraction``; metric
  ``calibration/macro_auc``, the running macro-AUC series and the seconds of its parts).
* ``mode=train``: each trial **reuses** the FINISHED ``train`` run with the same config hash
  (recipe incl. the prior, data digest, code version: ``tracking.config_key``, the key
  ``ablate`` reuses by), so an identical trial never trains twice; otherwise it creates a run
  nested under the calibrate parent (tags ``pipi.optuna_study``, ``pipi.trial_number``) and
  fills it with ``train`` (injected by the caller: a workflow may not import another one),
  reporting each epoch's value to Optuna so the pruner can stop it. A pruned trial's run ends
  **KILLED** with ``pipi.pruned=true`` and the reason in ``pipi.failure_reason`` (it did not
  train to the end, so it is never reused). For ``target=galar:<system>`` each epoch's model
  is scored on the Galar fold, logged on the run as ``calibration/target_macro_auc``.

Optuna's ``optuna_integration.MLflowCallback`` is not used (deprecated, and it logs flat
runs named after the study); :func:`_trial_logger` logs nested runs through ``pipi.tracking``.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import queue as queue_mod
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import optuna
import torch

from pipi import tracking
from pipi.calibration.objective import (
    CalibrationObjective,
    calibration_fold,
    diagonal,
    prior_params_document,
)
from pipi.calibration.study import make_pruner, make_sampler, open_storage, redact
from pipi.calibration.trials import (
    CalibrationResult,
    TargetFold,
    TrialSpec,
    WorkerResult,
    epoch_reporter,
    fold_macro_auc,
    load_target,
    read_worker_spec,
    study_outcome,
    trial_config,
    trials_table,
    worker_id,
    write_worker_result,
)
from pipi.config import TrainConfig
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import PipiError
from pipi.paths import pipi_home
from pipi.predictions import read_predictions
from pipi.report.study_plots import write_study_plots
from pipi.runs import training
from pipi.runs.evaluate import device_for, load_run_model

log = logging.getLogger(__name__)

PRUNED_STATUS = "KILLED"
#: per epoch, on a run trained for a Galar target: the fold's macro-AUC the pruner saw
TARGET_EPOCH_METRIC = "calibration/target_macro_auc"


# --------------------------------------------------------------------------- one worker
def optimize(spec: TrialSpec, *, objective: CalibrationObjective | None = None,
             storage: optuna.storages.BaseStorage | None = None) -> WorkerResult:
    """Run ``spec.n_trials`` trials of the study in this process (``objective``: the frozen
    model already loaded here; ``storage``: the study's storage already open here)."""
    storage = storage if storage is not None else open_storage(spec.storage)
    study = optuna.load_study(study_name=spec.study, storage=storage,
                              sampler=make_sampler(spec.sampler, seed=spec.seed,
                                                   trials=spec.grid_trials, params=spec.search),
                              pruner=make_pruner(spec.pruner))
    result = WorkerResult(spec.index, worker_id(spec.index))
    if spec.mode == "frozen":
        objective = objective if objective is not None else load_objective(spec)
        run_trial = lambda t: _frozen_trial(t, spec, objective, result)
        callbacks = [_trial_logger(spec, objective.cfg.image_size, result)]
    else:
        target = load_target(spec)
        run_trial = lambda t: _train_trial(t, spec, result, target)
        callbacks = []
    t0 = time.perf_counter()
    tracking.optimize_study(study, run_trial, n_trials=spec.n_trials, catch=(),
                            callbacks=callbacks, show_progress_bar=spec.progress)
    result.wall_s = time.perf_counter() - t0
    return result


def _worker_env(spec: TrialSpec) -> None:
    if spec.threads:
        torch.set_num_threads(spec.threads)
    tracking.use_code_version(spec.code_version)   # the parent's reuse key, as an argument
    tracking.configure(spec.tracking_uri)


def worker_main(spec: TrialSpec, out) -> None:
    """Entry of a spawned worker process: ``("ok", index, result)`` or ``("error", index,
    line)``. SIGTERM/Ctrl-C: the trial FAILs, and no run it logs or trains stays RUNNING."""
    tracking.install_signal_handlers()
    try:
        _worker_env(spec)
        out.put(("ok", spec.index, optimize(spec)))
    except PipiError as exc:
        out.put(("error", spec.index, str(exc)))
    except BaseException as exc:  # report, then die with the traceback on stderr
        out.put(("error", spec.index, f"{type(exc).__name__}: {exc}"))
        raise


def run_worker_file(path: str | Path, *, train_fn: Callable | None = None) -> WorkerResult:
    """A SLURM task: run the worker described by ``path``; write its result beside it (a
    trial of mode=train trains with :func:`pipi.runs.training.train`, or ``train_fn``)."""
    spec = read_worker_spec(Path(path), train_fn=train_fn or training.train)
    tracking.install_signal_handlers()
    _worker_env(spec)
    result = optimize(spec)
    write_worker_result(Path(path), result)
    return result


# --------------------------------------------------------------------------- mode=frozen
def load_objective(spec: TrialSpec) -> CalibrationObjective:
    """The frozen model of ``spec.run_id`` and the fold it is scored on."""
    model, cfg = load_run_model(spec.run_id)
    frames, manifest = load_staged(Path(spec.data))
    images = build_cache(Path(spec.data), frames, size=cfg.image_size,
                         digest=manifest["data_digest"], cache_dir=pipi_home() / "cache",
                         progress=False)
    fold = calibration_fold(frames, manifest, spec.target)
    return CalibrationObjective(model, cfg, images, fold, device_for())


def _frozen_trial(trial: optuna.Trial, spec: TrialSpec, objective: CalibrationObjective,
                  result: WorkerResult) -> float:
    alpha, frac = spec.space().suggest(trial)
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


def _trial_logger(spec: TrialSpec, image_size: int, result: WorkerResult):
    """Optuna callback: one nested MLflow run per finished trial (COMPLETE, PRUNED, FAIL)."""
    space = spec.space()

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
        tags = {**spec.tags, tracking.tags.TAG_ENTRY_POINT: "calibrate",
                tracking.tags.TAG_OPTUNA_STUDY: study.study_name,
                tracking.tags.TAG_TRIAL_NUMBER: trial.number,
                tracking.tags.TAG_TRIAL_STATE: state,
                tracking.tags.TAG_PRUNED: str(state == "PRUNED").lower(),
                tracking.tags.TAG_WORKER: result.worker,
                tracking.tags.TAG_BASELINE_TRIAL: str(bool(trial.user_attrs.get("baseline"))).lower()}
        tracking.log_finished_child(
            spec.parent_run_id, run_name=f"trial-{trial.number}", params=params,
            metrics=metrics, tags=tags,
            series={"calibration/running_macro_auc": sorted(trial.intermediate_values.items())},
            status="FAILED" if state == "FAIL" else "FINISHED")
        result.logging_s[trial.number] = time.perf_counter() - t0

    return log_trial


# --------------------------------------------------------------------------- mode=train
def _value(run_id: str, spec: TrialSpec, target: TargetFold | None) -> float:
    """The objective of a finished trial run: the macro-AUC of its ``val`` predictions on the
    fold's classes (downloaded into a folder removed after reading), or (a Galar fold) of its
    logged model, scored on the fold."""
    if target is None:
        with tracking.downloaded(run_id, "predictions", prefix="pipi-caltrain-") as folder:
            val = read_predictions(folder, "val")
        return fold_macro_auc(val, spec.fold_classes)
    model, cfg = load_run_model(run_id)
    return target.score(model, cfg)


def _target_scorer(target: TargetFold, cfg: TrainConfig, run: tracking.Run
                   ) -> Callable[[int, object], float]:
    """Per epoch: the model being trained, scored on the fold (and logged on ``run``, the
    trial's training run)."""
    def score(epoch: int, model) -> float:
        value = target.score(model, cfg)
        if math.isfinite(value):
            run.log_metrics({TARGET_EPOCH_METRIC: value}, step=epoch)
        return value
    return score


def _train_trial(trial: optuna.Trial, spec: TrialSpec, result: WorkerResult,
                 target: TargetFold | None = None) -> float:
    alpha, frac = spec.space().suggest(trial)
    trial.set_user_attr("worker", result.worker)
    trial.set_user_attr("calibrate_run", spec.parent_run_id)
    result.trials.append(trial.number)
    cfg = trial_config(TrainConfig.from_dict(spec.base_config), alpha, frac)
    trial.set_user_attr("lambda_eff", cfg.prior.lambda_eff)
    key = tracking.config_hash(tracking.config_key(cfg, spec.data_digest))
    trial.set_user_attr("config_hash", key)
    found = tracking.find_finished_run(key, **{tracking.tags.TAG_ENTRY_POINT: "train"})
    if found is not None:
        rid = found.run_id
        log.info("trial %d: reusing FINISHED run %s (config hash %s)", trial.number, rid, key)
        trial.set_user_attr("run_id", rid)
        trial.set_user_attr("reused", True)
        result.reused.append(trial.number)
        return _value(rid, spec, target)
    rid = tracking.create_child_run(spec.parent_run_id, run_name=f"trial-{trial.number}", tags={
        tracking.tags.TAG_PARENT_RUN: spec.parent_run_id,
        tracking.tags.TAG_OPTUNA_STUDY: spec.study,
        tracking.tags.TAG_TRIAL_NUMBER: trial.number, tracking.tags.TAG_WORKER: result.worker})
    trial.set_user_attr("run_id", rid)
    trial.set_user_attr("reused", False)
    try:   # train fills this run (handed as an argument, not through os.environ)
        spec.train_fn(cfg, data=spec.data, progress=False, register=False, run_id=rid,
                      epoch_hook=epoch_reporter(
                          trial, None if target is None
                          else _target_scorer(target, cfg, tracking.run_of(rid))))
    except optuna.TrialPruned as exc:
        tracking.terminate_run(rid, PRUNED_STATUS, f"pruned by Optuna: {exc}")
        tracking.set_run_tags(rid, {tracking.tags.TAG_PRUNED: "true"})
        raise
    except BaseException as exc:  # the trial FAILs; its run must not stay RUNNING
        if tracking.get_run(rid).live:
            reason = (tracking.interrupt_reason(exc) if isinstance(exc, KeyboardInterrupt)
                      else f"{type(exc).__name__}: {exc}")
            tracking.terminate_run(rid, "KILLED" if isinstance(exc, KeyboardInterrupt)
                                   else "FAILED", f"trial {trial.number}: {reason}")
        raise
    result.trained.append(trial.number)
    tracking.set_run_tags(rid, {tracking.tags.TAG_PRUNED: "false"})
    return _value(rid, spec, target)


# --------------------------------------------------------------------------- local workers
def fail_running_trials(storage, study_name: str, *, worker: set[str] | None = None,
                        calibrate_run: str | None = None) -> None:
    """Mark FAIL the RUNNING trials of the stopped ``worker``s, or of one calibrate run's
    workers (``calibrate_run``): nothing is left running."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if ((worker is not None and t.user_attrs.get("worker") in worker)
                or (calibrate_run is not None
                    and t.user_attrs.get("calibrate_run") == calibrate_run)):
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)


def run_workers(specs: Sequence[TrialSpec], *, storage) -> list[WorkerResult]:
    """One spawned process per spec running :func:`worker_main`; on the first failure stop
    them all, FAIL their RUNNING trials and raise."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = {s.index: ctx.Process(target=worker_main, args=(s, out), daemon=False,
                                  name=f"calibrate-worker-{s.index}") for s in specs}
    for p in procs.values():
        p.start()
    results: dict[int, WorkerResult] = {}
    error = None
    try:
        while len(results) < len(specs) and error is None:
            try:
                kind, index, payload = out.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [i for i, p in procs.items()
                        if i not in results and p.exitcode not in (None, 0)]
                if dead:
                    error = f"worker {dead[0]} exited with code {procs[dead[0]].exitcode}"
                continue
            if kind == "ok":
                results[index] = payload
            else:
                error = f"worker {index}: {payload}"
    finally:  # an error, Ctrl-C or SIGTERM here: stop the workers (each ends its trial)
        for i, p in procs.items():
            if p.is_alive() and i not in results:
                p.terminate()
        for p in procs.values():
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    if error is not None:
        names = {f"{socket.gethostname()}:{p.pid}:w{i}" for i, p in procs.items()}
        fail_running_trials(storage, specs[0].study, worker=names)
        raise PipiError(error)
    return [results[i] for i in sorted(results)]


def end_lost_trial_runs(study: optuna.Study) -> list[str]:
    """Runs of FAILed trials still RUNNING in MLflow (their worker was killed, e.g. SIGKILL
    or a node lost, so nobody ended them) end FAILED with the reason; returns their ids.
    Optuna's heartbeat fails such a trial after its grace period (``open_storage``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    ended = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        rid = t.user_attrs.get("run_id")
        if rid and not t.user_attrs.get("reused") and \
                tracking.get_run(rid).live:
            tracking.terminate_run(rid, "FAILED", f"trial {t.number} of study "
                                   f"{study.study_name} FAILed: its worker "
                                   f"{t.user_attrs.get('worker', '?')} stopped mid-trial")
            ended.append(rid)
    return ended


# --------------------------------------------------------------------------- the summary
def finish(run: tracking.Run, spec: TrialSpec, results: Sequence[WorkerResult], work: Path, *,
           storage, source_run_id: str | None, target_digest: str = "") -> CalibrationResult:
    """Log the study's best trial (params, ``prior_params.json``), its counts, Optuna's plots
    and the trials table (``optuna/``) on the calibrate run ``run``; ``spec`` is any of the
    call's worker specs."""
    cfg, space, name, train = (TrainConfig.from_dict(spec.base_config), spec.space(),
                               spec.study, spec.mode == "train")
    storage_url = redact(spec.storage)
    o = study_outcome(optuna.load_study(study_name=name, storage=storage), space,
                      f"run {spec.parent_run_id}")
    trials, best_trial = o.study.trials, o.best_trial
    best_run = best_trial.user_attrs.get("run_id")
    doc = prior_params_document(
        o.best, image_size=cfg.image_size, objective="macro_auc", value=best_trial.value,
        baseline_value=o.baseline, best_trial=best_trial.number, target=spec.target,
        source_run_id=source_run_id, calibrate_run_id=spec.parent_run_id, study=name,
        storage=storage_url, data_digest=spec.data_digest, n_trials=len(trials),
        mode=spec.mode,
        **({"best_run_id": best_run, "backbone": cfg.backbone, "epochs": cfg.epochs,
            "seed": cfg.seed} if train else {}),
        search=space.key, **({"target_data_digest": target_digest} if target_digest else {}))
    trained = sorted(n for r in results for n in r.trained)
    reused = sorted(n for r in results for n in r.reused)
    run.log_params({"alpha": o.best.alpha, "lambda_eff": doc["lambda_eff"],
                    "lambda_eff_fraction": o.best.lambda_eff_fraction,
                    "best_trial": best_trial.number,
                    **({"best_run_id": best_run or ""} if train else {})})
    metrics = {"calibration/best_macro_auc": best_trial.value,
               "calibration/trials_complete": len(o.complete),
               "calibration/trials_pruned": o.n_pruned, "calibration/trials_total": len(trials)}
    if train:
        metrics.update({"calibration/trials_trained": len(trained),
                        "calibration/trials_reused": len(reused)})
    if o.baseline is not None:
        metrics["calibration/baseline_macro_auc"] = o.baseline
        metrics["calibration/gain_macro_auc"] = best_trial.value - o.baseline
    run.log_metrics(metrics)
    run.log_dict(doc, "prior_params.json")
    write_study_plots(o.study, work / "optuna")
    table = (trials_table(trials, image_size=cfg.image_size, space=space) if train
             else o.study.trials_dataframe())
    table.to_csv(work / "optuna" / "trials.csv", index=False)
    run.log_artifacts(work / "optuna", "optuna")
    ran = sorted(n for r in results for n in r.trials)
    return CalibrationResult(spec.parent_run_id, name, storage_url, o.best, best_trial.value,
                             o.baseline, ran, len(o.complete), o.n_pruned, len(trials),
                             list(results), mode=spec.mode, trained=trained, reused=reused)


__all__ = ["PRUNED_STATUS", "TARGET_EPOCH_METRIC", "end_lost_trial_runs", "fail_running_trials",
           "finish", "load_objective", "optimize", "run_worker_file", "run_workers",
           "worker_main"]
