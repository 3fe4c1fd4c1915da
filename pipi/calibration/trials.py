"""The trials of ``calibrate``, the pure parts: one worker's spec (one type, with the mode), its
result, the trial's configuration and value, the spec files of SLURM workers, the finished
study's outcome and the trials table.

A worker (this process, a spawned process or a SLURM array task) loads the study from its RDB
storage and pulls trials until its share of the budget is spent (Optuna's distributed
pattern). What a trial is depends on the mode:

* ``frozen``: the prior of a trained run's frozen model is recomputed with the trial's alpha
  and lambda_eff and the model is scored on the fold (:class:`~pipi.calibration.objective.
  CalibrationObjective`); each trial is logged as a run nested under the calibrate run.
* ``train``: the trial trains a ``pi`` run with its prior (``PriorParams.apply`` on the
  study's recipe), or reuses the FINISHED run with the same config hash; its value is the
  macro-AUC of the run's ``val`` predictions over the fold's headline classes
  (:func:`fold_macro_auc`), or, for ``target=galar:<system>``, of its logged model on that
  system's calibration fold (:class:`TargetFold`).

The MLflow side (the runs a trial logs or trains, the worker processes, the parent's summary)
is :mod:`pipi.runs.calibrate`'s. Library code: no MLflow.
"""

from __future__ import annotations

import json
import math
import os
import socket
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import torch

from pipi.calibration.objective import (
    CALIBRATE_MODES,
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
from pipi.calibration.options import WORKER_SPEC_OPTION
from pipi.config import TrainConfig
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError, DataError, PipiError
from pipi.paths import pipi_home
from pipi.predictions import prob_columns_of
from pipi.stats.auc import macro_auc

MODES = CALIBRATE_MODES


# --------------------------------------------------------------------------- spec, result
@dataclass(frozen=True)
class TrialSpec:
    """Everything one worker needs (picklable; ``train_fn`` travels by reference and is left
    out of the spec files). ``base_config`` is the study's configuration (``mode=frozen``: the
    source run's; ``mode=train``: the ``pi`` recipe every trial trains)."""

    mode: str
    index: int
    n_trials: int
    study: str
    storage: str
    sampler: str
    pruner: str
    seed: int
    parent_run_id: str
    tracking_uri: str
    data: str                        # the staged folder: scored (frozen) or trained on (train)
    base_config: dict                # TrainConfig.to_dict()
    target: str = TARGET_KVASIR      # kvasir-val, or galar:<system>
    search: tuple[str, ...] = SEARCHES["alpha,lambda_eff"]  # the prior parameters searched
    grid_trials: int = 1
    threads: int = 0
    progress: bool = False
    code_version: str = ""           # the parent's, so a worker keys its runs as it does
    tags: dict = field(default_factory=dict)   # frozen: the tags of each trial's run
    run_id: str = ""                 # frozen: the source run whose model is scored
    data_digest: str = ""            # train: the digest of ``data`` (the reuse key)
    fold_classes: tuple[int, ...] = ()   # train: the target fold's headline classes
    target_data: str = ""            # train, galar: the staged Galar folder of the fold
    target_digest: str = ""          # train, galar: its data digest (checked on load)
    train_fn: Callable = field(repr=False, default=None)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r} is unknown. Available: {list(MODES)}")
        # lists when read back from JSON
        object.__setattr__(self, "search", tuple(self.search))
        object.__setattr__(self, "fold_classes", tuple(self.fold_classes))

    def space(self) -> SearchSpace:
        """The study's search space; the parameters not searched keep the configuration's."""
        return SearchSpace.of(TrainConfig.from_dict(self.base_config), self.search)


@dataclass
class WorkerResult:
    """What one worker did: its trials, (train) which trained and which reused a run,
    (frozen) the seconds each trial's parts and its run's logging took, and its wall time."""

    index: int
    worker: str
    trials: list[int] = field(default_factory=list)
    trained: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)
    costs: dict[int, dict] = field(default_factory=dict)       # trial -> TrialCost fields
    logging_s: dict[int, float] = field(default_factory=dict)  # trial -> nested-run seconds
    wall_s: float = 0.0


def worker_id(index: int) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:w{index}"


def split(trials: int, workers: int) -> list[int]:
    """``trials`` shared out over ``workers`` (the first ones take the remainder)."""
    return [trials // workers + (i < trials % workers) for i in range(workers)]


# --------------------------------------------------------------------------- spec files
def spec_path(folder: Path, index: int) -> Path:
    return folder / f"worker-{index}.json"


def result_path(spec_file: Path) -> Path:
    return spec_file.with_suffix(".result.json")


def write_worker_specs(specs: Sequence[TrialSpec], folder: Path) -> list[Path]:
    """One JSON file per worker, readable by its owner only (mode 0600, written whole then
    renamed): a spec holds the Optuna storage URL, password included."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in specs:
        path = spec_path(folder, spec.index)
        doc = {k: v for k, v in asdict(spec).items() if k != "train_fn"}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(doc, indent=1))
        os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_CREAT
        os.replace(tmp, path)
        result_path(path).unlink(missing_ok=True)
        paths.append(path)
    return paths


def read_worker_spec(path: Path, *, train_fn: Callable) -> TrialSpec:
    """The spec a SLURM task was given; one clear line when the file is not one."""
    try:
        return TrialSpec(**json.loads(Path(path).read_text()), train_fn=train_fn)
    except (OSError, ValueError, TypeError, PipiError) as exc:
        raise ConfigError(f"{path}: not a calibrate worker spec ({exc})") from None


def write_worker_result(path: Path, result: WorkerResult) -> None:
    """The result file beside a spec file (the parent reads it back as a WorkerResult)."""
    result_path(Path(path)).write_text(json.dumps(asdict(result)))


def read_worker_result(path: Path) -> WorkerResult:
    return WorkerResult(**json.loads(Path(path).read_text()))


# --------------------------------------------------------------------------- mode=train
def trial_config(base: TrainConfig, alpha: float, fraction: float) -> TrainConfig:
    """The trial's configuration: the study's ``pi`` recipe with this prior."""
    return PriorParams(alpha, fraction).apply(base)


def fold_macro_auc(preds: pd.DataFrame, classes: Sequence[int]) -> float:
    """Macro-AUC of a predictions table (``label``, ``prob_00``... one per class) over
    ``classes``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(macro_auc(preds["label"].to_numpy(np.int64),
                               preds[list(prob_columns_of(preds))].to_numpy(np.float64),
                               classes=list(classes)))


@dataclass(frozen=True)
class TargetFold:
    """A Galar target: the fold and the uint8 cache of its staged folder (at the recipe's
    image size), loaded once per worker."""

    fold: Fold
    images: np.ndarray

    def score(self, model: torch.nn.Module, cfg: TrainConfig) -> float:
        """The fold's macro-AUC of ``model`` under ``cfg``'s prior."""
        return score_on_fold(model, cfg, self.images, self.fold)


def load_target(spec: TrialSpec) -> TargetFold | None:
    """The Galar fold a ``mode=train`` worker scores its trials on (None for kvasir-val)."""
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


def epoch_reporter(trial: optuna.Trial, score: Callable | None = None) -> Callable:
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


# --------------------------------------------------------------------------- the outcome
@dataclass(frozen=True)
class StudyOutcome:
    """A finished study: its completed trials, the best one and its prior (fixed parameters
    filled in), the baseline trial's value (None without one) and the number pruned."""

    study: optuna.Study
    complete: list
    best_trial: optuna.trial.FrozenTrial
    best: PriorParams
    baseline: float | None
    n_pruned: int


def study_outcome(study: optuna.Study, space: SearchSpace, source: str) -> StudyOutcome:
    """The outcome of ``study``; no completed trial is an error."""
    trials = study.trials
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise PipiError(f"study {study.study_name}: no trial completed (all pruned or "
                        "failed); run more trials or pass pruner=none")
    best_trial = study.best_trial
    v = space.values(best_trial.params)
    baseline = next((t.value for t in complete if t.user_attrs.get("baseline")), None)
    n_pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in trials)
    return StudyOutcome(study, complete, best_trial,
                        PriorParams(v["alpha"], v["lambda_eff_fraction"], source), baseline,
                        n_pruned)


@dataclass(frozen=True)
class CalibrationResult:
    """What one ``calibrate`` call did and found."""

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


__all__ = ["MODES", "WORKER_SPEC_OPTION", "CalibrationResult", "StudyOutcome", "TargetFold",
           "TrialSpec", "WorkerResult", "epoch_reporter", "fold_macro_auc", "load_target",
           "read_worker_result", "read_worker_spec", "result_path", "spec_path", "split",
           "study_outcome", "trial_config", "trials_table", "worker_id",
           "write_worker_result", "write_worker_specs"]
