"""Optuna workers for ``calibrate``: worker processes on one RDB study, and the trials of
``mode=train``, each an ordinary tracked ``train`` run of the ``pi`` cell.

A worker (a spawned process here, or a SLURM array task) loads the study from its RDB storage
and pulls trials until its share of the budget is spent (Optuna's distributed pattern).

A ``mode=train`` trial:

* suggests ``alpha`` (log), and ``lambda_eff`` (a fraction of the image diagonal) when the
  study searches it (``search=alpha,lambda_eff``; by default lambda_eff keeps the recipe's
  0.25 x diagonal, as the paper), and applies them to the ``pi`` configuration of the study
  (``PriorParams.apply``);
* **reuses** the FINISHED ``train`` run with the same config hash (recipe incl. the prior,
  data digest, code version: ``tracking.config_key``, the key ``ablate`` reuses by), so an
  identical trial never trains twice; its value is scored from that run's predictions;
* otherwise creates a run nested under the calibrate parent (tags ``pipi.optuna_study``,
  ``pipi.trial_number``) and fills it with ``train`` (injected by the caller: a workflow may
  not import another one), reporting the epoch's validation macro-AUC to Optuna so the pruner
  can stop it. A pruned trial's run ends **KILLED** with ``pipi.pruned=true`` and the reason
  in ``pipi.failure_reason`` (it did not train to the end, so it is never reused).
* Its value is the macro-AUC of the run's ``val`` predictions (the ``kvasir-val`` fold) over
  the fold's headline classes (the frozen mode's classes).
* **target=galar:<system>**: the trial still trains on the staged Kvasir-Capsule data; its
  value is the macro-AUC of the run's logged model (best epoch) on that system's
  ``calibration`` fold of a staged Galar folder (``target_data``), scored as the frozen mode
  scores (``calibration.objective.score_on_fold``) -- a reused run is scored the same way,
  without training. Each epoch the model being trained is scored on the fold and that value,
  logged on the run as ``calibration/target_macro_auc``, goes to Optuna's pruner.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os
import queue as queue_mod
import shlex
import socket
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import torch

from pipi import tracking
from pipi.calibration.objective import (
    SEARCHES,
    TARGET_KVASIR,
    Fold,
    PriorParams,
    SearchSpace,
    calibration_fold,
    diagonal,
    parse_target,
    score_on_fold,
)
from pipi.calibration.study import make_pruner, make_sampler, open_storage
from pipi.config import TrainConfig
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError, DataError, PipiError
from pipi.paths import PROJECT_ROOT, pipi_home
from pipi.predictions import PROB_COLUMNS, read_predictions
from pipi.runs.evaluate import load_run_model
from pipi.stats.auc import macro_auc
from pipi.sweeps import slurm

log = logging.getLogger(__name__)

PRUNED_STATUS = "KILLED"
#: per epoch, on a run trained for a Galar target: the fold's macro-AUC the pruner saw
TARGET_EPOCH_METRIC = "calibration/target_macro_auc"


def worker_id(index: int) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:w{index}"


# --------------------------------------------------------------------------- local workers
def _fail_running_trials(storage, study_name: str, workers: set[str]) -> None:
    """Mark the RUNNING trials of stopped workers FAIL (nothing left running)."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if t.user_attrs.get("worker") in workers:
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)


def run_workers(specs: Sequence, *, storage, target: Callable) -> list:
    """One spawned process per spec running ``target(spec, queue)``, which puts
    ``("ok", index, result)`` or ``("error", index, line)``; on the first failure stop them
    all, FAIL their RUNNING trials and raise."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = {s.index: ctx.Process(target=target, args=(s, out), daemon=False,
                                  name=f"calibrate-worker-{s.index}") for s in specs}
    for p in procs.values():
        p.start()
    results: dict[int, object] = {}
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
        _fail_running_trials(storage, specs[0].study, names)
        raise PipiError(error)
    return [results[i] for i in sorted(results)]


# --------------------------------------------------------------------------- mode=train
@dataclass(frozen=True)
class TrainTrialSpec:
    """Everything a ``mode=train`` worker needs (picklable; ``train_fn`` by reference)."""

    index: int
    n_trials: int
    study: str
    storage: str
    sampler: str
    pruner: str
    seed: int
    parent_run_id: str
    tracking_uri: str
    code_version: str
    data: str                        # the staged Kvasir folder trials train on
    data_digest: str
    base_config: dict                # TrainConfig.to_dict() of the study's pi configuration
    fold_classes: tuple[int, ...]    # the target fold's headline classes
    train_fn: Callable = field(repr=False, default=None)
    grid_trials: int = 1
    threads: int = 0
    target: str = TARGET_KVASIR      # kvasir-val, or galar:<system>
    target_data: str = ""            # galar: the staged Galar folder of the fold
    target_digest: str = ""          # galar: its data digest (checked when a worker loads it)
    search: tuple[str, ...] = SEARCHES["alpha,lambda_eff"]  # the prior parameters searched

    def __post_init__(self):
        object.__setattr__(self, "search", tuple(self.search))  # a list when read from JSON

    def space(self) -> SearchSpace:
        """The study's search space; the parameters not searched keep the recipe's values."""
        return SearchSpace.of(TrainConfig.from_dict(self.base_config), self.search)


@dataclass
class TrainWorkerResult:
    index: int
    worker: str
    trials: list[int] = field(default_factory=list)
    trained: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)
    wall_s: float = 0.0


def fold_macro_auc(preds: pd.DataFrame, classes: Sequence[int]) -> float:
    """Macro-AUC of a predictions table (``label``, ``prob_00..13``) over ``classes``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(macro_auc(preds["label"].to_numpy(np.int64),
                               preds[list(PROB_COLUMNS)].to_numpy(np.float64),
                               classes=list(classes)))


def run_value(run_id: str, classes: Sequence[int], work: Path) -> float:
    """The objective of a finished trial run: its ``val`` predictions on the fold's classes."""
    folder = tracking.download_artifact(run_id, "predictions", work / run_id)
    return fold_macro_auc(read_predictions(folder, "val"), classes)


@dataclass(frozen=True)
class TargetFold:
    """A Galar target: the fold and the uint8 cache of its staged folder (at the recipe's
    image size), loaded once per worker."""

    fold: Fold
    images: np.ndarray

    def score(self, model: torch.nn.Module, cfg: TrainConfig) -> float:
        """The fold's macro-AUC of ``model`` under ``cfg``'s prior."""
        return score_on_fold(model, cfg, self.images, self.fold)


def load_target(spec: TrainTrialSpec) -> TargetFold | None:
    """The Galar fold a worker scores its trials on (None for kvasir-val)."""
    if parse_target(spec.target)[0] == TARGET_KVASIR:
        return None
    root = Path(spec.target_data)
    frames, manifest = load_staged(root)
    if manifest["data_digest"] != spec.target_digest:
        raise DataError(f"target_data={root}: its data digest {manifest['data_digest'][:12]} "
                        f"is not the study's {spec.target_digest[:12]} (restaged since the "
                        "calibrate call began)")
    size = TrainConfig.from_dict(spec.base_config).image_size
    images = build_cache(root, frames, size=size, digest=spec.target_digest,
                         cache_dir=pipi_home() / "cache", progress=False)
    return TargetFold(calibration_fold(frames, manifest, spec.target), images)


def target_value(run_id: str, target: TargetFold) -> float:
    """The objective of a finished trial run on a Galar fold: its logged model, scored."""
    model, cfg = load_run_model(run_id)
    return target.score(model, cfg)


def trial_config(base: TrainConfig, alpha: float, fraction: float) -> TrainConfig:
    """The trial's configuration: the study's ``pi`` recipe with this prior."""
    return PriorParams(alpha, fraction).apply(base)


def _epoch_reporter(trial: optuna.Trial, score: Callable | None = None) -> Callable:
    """The train workflow's ``epoch_hook``: report the epoch's value to Optuna and prune.
    The value is ``val/macro_auc`` (kvasir-val), or ``score(epoch, model)`` (a Galar fold)."""
    what = "val" if score is None else "target fold"

    def hook(epoch: int, metrics, model=None) -> None:
        value = metrics.get("val/macro_auc") if score is None else score(epoch, model)
        if value is None or not math.isfinite(value):
            return
        trial.report(float(value), epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(f"{what} macro-AUC {value:.4f} at epoch {epoch} is below "
                                     "the pruner's threshold")
    return hook


def _target_scorer(target: TargetFold, cfg: TrainConfig) -> Callable[[int, object], float]:
    """Per epoch: the model being trained, scored on the fold (and logged on its run)."""
    def score(epoch: int, model) -> float:
        value = target.score(model, cfg)
        if math.isfinite(value):
            tracking.log_metrics({TARGET_EPOCH_METRIC: value}, step=epoch)
        return value
    return score


def _train_trial(trial: optuna.Trial, spec: TrainTrialSpec, result: TrainWorkerResult,
                 work: Path, target: TargetFold | None = None) -> float:
    alpha, frac = spec.space().suggest(trial)
    trial.set_user_attr("worker", result.worker)
    trial.set_user_attr("calibrate_run", spec.parent_run_id)
    result.trials.append(trial.number)
    cfg = trial_config(TrainConfig.from_dict(spec.base_config), alpha, frac)
    trial.set_user_attr("lambda_eff", cfg.prior.lambda_eff)
    key = tracking.config_hash(tracking.config_key(cfg, spec.data_digest))
    trial.set_user_attr("config_hash", key)
    found = tracking.find_finished_run(key, **{tracking.TAG_ENTRY_POINT: "train"})
    if found is not None:
        rid = found.info.run_id
        log.info("trial %d: reusing FINISHED run %s (config hash %s)", trial.number, rid, key)
        trial.set_user_attr("run_id", rid)
        trial.set_user_attr("reused", True)
        result.reused.append(trial.number)
        return _value(rid, spec, work, target)
    rid = tracking.create_child_run(spec.parent_run_id, run_name=f"trial-{trial.number}", tags={
        tracking.TAG_PARENT_RUN: spec.parent_run_id, tracking.TAG_OPTUNA_STUDY: spec.study,
        tracking.TAG_TRIAL_NUMBER: trial.number, tracking.TAG_WORKER: result.worker})
    trial.set_user_attr("run_id", rid)
    trial.set_user_attr("reused", False)
    os.environ["MLFLOW_RUN_ID"] = rid  # train's pipi_run fills this run
    try:
        spec.train_fn(cfg, data=spec.data, progress=False, register=False,
                      epoch_hook=_epoch_reporter(
                          trial, None if target is None else _target_scorer(target, cfg)))
    except optuna.TrialPruned as exc:
        tracking.terminate_run(rid, PRUNED_STATUS, f"pruned by Optuna: {exc}")
        tracking.set_run_tags(rid, {tracking.TAG_PRUNED: "true"})
        raise
    except BaseException as exc:  # the trial FAILs; its run must not stay RUNNING
        if tracking.get_run(rid).info.status in ("RUNNING", "SCHEDULED"):
            reason = (tracking.interrupt_reason(exc) if isinstance(exc, KeyboardInterrupt)
                      else f"{type(exc).__name__}: {exc}")
            tracking.terminate_run(rid, "KILLED" if isinstance(exc, KeyboardInterrupt)
                                   else "FAILED", f"trial {trial.number}: {reason}")
        raise
    finally:
        os.environ.pop("MLFLOW_RUN_ID", None)
    result.trained.append(trial.number)
    tracking.set_run_tags(rid, {tracking.TAG_PRUNED: "false"})
    return _value(rid, spec, work, target)


def _value(run_id: str, spec: TrainTrialSpec, work: Path, target: TargetFold | None) -> float:
    return (run_value(run_id, spec.fold_classes, work) if target is None
            else target_value(run_id, target))


def optimize_train(spec: TrainTrialSpec) -> TrainWorkerResult:
    """Run ``spec.n_trials`` trials of the study in this process."""
    storage = open_storage(spec.storage)
    study = optuna.load_study(study_name=spec.study, storage=storage,
                              sampler=make_sampler(spec.sampler, seed=spec.seed,
                                                   trials=spec.grid_trials, params=spec.search),
                              pruner=make_pruner(spec.pruner))
    result = TrainWorkerResult(spec.index, worker_id(spec.index))
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"pipi-caltrain-{os.getpid()}"
    target = load_target(spec)
    t0 = time.perf_counter()
    tracking.optimize_study(study, lambda t: _train_trial(t, spec, result, work, target),
                            n_trials=spec.n_trials, catch=())
    result.wall_s = time.perf_counter() - t0
    return result


def _worker_env(spec: TrainTrialSpec) -> None:
    if spec.threads:
        torch.set_num_threads(spec.threads)
    os.environ[tracking.CODE_VERSION_ENV] = spec.code_version  # the parent's reuse key
    os.environ["MLFLOW_TRACKING_URI"] = spec.tracking_uri
    tracking.configure(spec.tracking_uri)


def train_worker_main(spec: TrainTrialSpec, out) -> None:
    """Entry of a spawned ``mode=train`` worker: ``("ok", index, result)`` or an error line."""
    tracking.install_signal_handlers()  # SIGTERM/Ctrl-C: the run ends KILLED, the trial FAILs
    try:
        _worker_env(spec)
        out.put(("ok", spec.index, optimize_train(spec)))
    except PipiError as exc:
        out.put(("error", spec.index, str(exc)))
    except BaseException as exc:
        out.put(("error", spec.index, f"{type(exc).__name__}: {exc}"))
        raise


# --------------------------------------------------------------------------- SLURM
WORKER_SPEC_OPTION = "--worker-spec"


def _spec_path(folder: Path, index: int) -> Path:
    return folder / f"worker-{index}.json"


def _result_path(spec_file: Path) -> Path:
    return spec_file.with_suffix(".result.json")


def write_worker_specs(specs: Sequence[TrainTrialSpec], folder: Path) -> list[Path]:
    """One JSON file per worker, readable by its owner only (mode 0600, written whole then
    renamed): a spec holds the Optuna storage URL, password included."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in specs:
        path = _spec_path(folder, spec.index)
        doc = {k: v for k, v in asdict(spec).items() if k != "train_fn"}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(doc, indent=1))
        os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_CREAT
        os.replace(tmp, path)
        _result_path(path).unlink(missing_ok=True)
        paths.append(path)
    return paths


def run_slurm_workers(specs: Sequence[TrainTrialSpec], *, storage,
                      folder: Path | None = None) -> list[TrainWorkerResult]:
    """The workers as one SLURM job array (``pipi.sweeps.slurm``): task i runs
    ``entrypoints/calibrate.py --worker-spec worker-i.json``, an Optuna worker that loads the
    study from the RDB storage and runs its share of the trials. A task that ends without its
    result file is an error naming its SLURM state and log tail (its RUNNING trials FAIL)."""
    base = Path(folder or os.environ.get("PIPI_SLURM_DIR") or pipi_home() / "slurm")
    folder = base / specs[0].parent_run_id / "calibrate"
    tasks = [slurm.Task("", f"calibrate-worker-{spec.index}", shlex.join(
        [sys.executable, str(PROJECT_ROOT / "entrypoints" / "calibrate.py"),
         WORKER_SPEC_OPTION, str(path)])) for spec, path in zip(
             specs, write_worker_specs(specs, folder), strict=True)]
    script = slurm.write_array_script(tasks, folder, name="workers",
                                      tracking_uri=specs[0].tracking_uri)
    job = slurm.submit_array(script, len(tasks))
    slurm.wait_for([job])
    states = slurm.task_states(job)
    results, errors = [], []
    for k, spec in enumerate(specs):
        got = _result_path(_spec_path(folder, spec.index))
        if got.is_file():
            results.append(TrainWorkerResult(**json.loads(got.read_text())))
            continue
        tail = slurm.log_tail(folder, "workers", k)
        errors.append(f"SLURM task {job}_{k} ({states.get(k, '?')}): {tail.strip()[-300:]}")
    if errors:
        study = optuna.load_study(study_name=specs[0].study, storage=storage)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.user_attrs.get("calibrate_run") == specs[0].parent_run_id:
                storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        end_lost_trial_runs(study)
        raise PipiError("calibrate workers failed: " + "; ".join(errors))
    return results


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
                tracking.get_run(rid).info.status in ("RUNNING", "SCHEDULED"):
            tracking.terminate_run(rid, "FAILED", f"trial {t.number} of study "
                                   f"{study.study_name} FAILed: its worker "
                                   f"{t.user_attrs.get('worker', '?')} stopped mid-trial")
            ended.append(rid)
    return ended


def run_worker_file(path: str | Path, *, train_fn: Callable) -> TrainWorkerResult:
    """A SLURM task: run the worker described by ``path``; write its result beside it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        doc["fold_classes"] = tuple(doc["fold_classes"])
        spec = TrainTrialSpec(**doc, train_fn=train_fn)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a calibrate worker spec ({exc})") from None
    tracking.install_signal_handlers()
    _worker_env(spec)
    result = optimize_train(spec)
    _result_path(path).write_text(json.dumps(asdict(result)))
    return result


# --------------------------------------------------------------------------- the table
def trials_table(trials: Sequence[optuna.trial.FrozenTrial], *, image_size: int,
                 space: SearchSpace | None = None) -> pd.DataFrame:
    """One row per trial: number, state, alpha, lambda_eff (fraction and pixels), objective,
    the run id and whether it reused a finished run (a parameter ``space`` keeps fixed: its
    fixed value)."""
    rows = []
    for t in trials:
        values = space.values(t.params) if space is not None else t.params
        frac = values.get("lambda_eff_fraction")
        rows.append({"trial": t.number, "state": t.state.name, "alpha": values.get("alpha"),
                     "lambda_eff_fraction": frac,
                     "lambda_eff": None if frac is None else frac * diagonal(image_size),
                     "objective": t.value, "run_id": t.user_attrs.get("run_id", ""),
                     "reused": bool(t.user_attrs.get("reused", False)),
                     "worker": t.user_attrs.get("worker", "")})
    return pd.DataFrame(rows, columns=["trial", "state", "alpha", "lambda_eff_fraction",
                                       "lambda_eff", "objective", "run_id", "reused", "worker"])


__all__ = ["PRUNED_STATUS", "TARGET_EPOCH_METRIC", "WORKER_SPEC_OPTION", "TargetFold",
           "TrainTrialSpec", "TrainWorkerResult", "end_lost_trial_runs", "fold_macro_auc",
           "load_target", "target_value", "optimize_train", "run_slurm_workers", "run_value",
           "run_worker_file", "run_workers", "train_worker_main", "trial_config",
           "trials_table", "worker_id", "write_worker_specs"]
