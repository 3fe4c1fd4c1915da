"""Calibrating the analytic prior of a frozen 5-channel model: the objective and its inputs.

The paper fits the prior's steepness ``alpha`` "on a held-out validation subset" and proposes
re-calibrating the prior on a target capsule system before deployment. Here the frozen
model's weights never change; only the prior channels it is fed are recomputed:

* **Objective** (maximised): the macro-AUC, over the fold's evaluable classes, of the frozen
  model on the calibration fold, with ``P_blood`` and ``Phi`` recomputed from the frames for
  each ``(alpha, lambda_eff)`` exactly as training computes them (``FrameInputs``, eval mode).
* **Search space**: ``alpha`` in ``[1, 12]`` (log scale); ``lambda_eff`` as a fraction of
  the image diagonal in ``[0.1, 1.0]`` (the published default is 0.25), so a result carries
  over to another image size.
* **Folds**: ``kvasir-val`` is the validation split of a staged Kvasir release;
  ``galar:<capsule system>`` is that system's ``calibration`` vendor fold of a staged Galar
  folder (the ``evaluation`` fold stays untouched for ``galar``).
* **Pruning**: the fold is scored in batches in a fixed, class-interleaved order (the same
  for every trial), and the running macro-AUC of the frames scored so far is reported as an
  intermediate value about ten times per trial, so a pruner can stop hopeless trials.

A calibration result travels as ``prior_params.json`` (:func:`prior_params_document`);
:func:`load_prior_params` is the one place that turns a ``prior_params`` option (a file, or
the id of a ``calibrate`` run) into alpha and lambda_eff.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from pipi.calibration.options import (  # how calibrate fits (its mode), its targets
    CALIBRATE_MODES,
    TARGET_KVASIR,
    parse_target,
)
from pipi.classes import CLASSES, KVASIR_MAP_HINT, ClassSet, class_set_of, not_kvasir
from pipi.config import TrainConfig
from pipi.data.cache import to_float
from pipi.errors import ConfigError, DataError
from pipi.stats.auc import macro_auc
from pipi.training.frames import FrameInputs

#: Search space (paper "Analytic prior": alpha is a calibrated steepness; lambda_eff ~ 0.25 diag).
ALPHA_RANGE = (1.0, 12.0)            # log scale
LAMBDA_FRACTION_RANGE = (0.1, 1.0)   # lambda_eff / image diagonal
PRIOR_PARAMS_FORMAT = "pipi.prior_params"
PRIOR_PARAMS_VERSION = 1
#: How many intermediate values a trial reports (the pruner's steps).
REPORTS_PER_TRIAL = 10


# --------------------------------------------------------------------------- prior params
def diagonal(image_size: int) -> float:
    """The diagonal of a square ``image_size`` image in pixels."""
    return math.hypot(image_size, image_size)


@dataclass(frozen=True)
class PriorParams:
    """A calibrated prior: ``alpha`` and ``lambda_eff`` as a fraction of the image diagonal."""

    alpha: float
    lambda_eff_fraction: float
    source: str = ""        # the file or calibrate run it came from
    mode: str = "frozen"    # how calibrate fitted it: frozen model, or one training per trial

    def lambda_eff(self, image_size: int) -> float:
        """``lambda_eff`` in pixels at ``image_size`` (what ``PriorConfig`` takes)."""
        return self.lambda_eff_fraction * diagonal(image_size)

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` with this prior (lambda_eff converted at ``cfg.image_size``)."""
        prior = replace(cfg.prior, alpha=float(self.alpha),
                        lambda_eff=self.lambda_eff(cfg.image_size))
        return replace(cfg, prior=prior)


def prior_params_document(params: PriorParams, *, image_size: int, **extra) -> dict:
    """The ``prior_params.json`` document of a calibration result."""
    return {"format": PRIOR_PARAMS_FORMAT, "version": PRIOR_PARAMS_VERSION,
            "alpha": float(params.alpha),
            "lambda_eff_fraction": float(params.lambda_eff_fraction),
            "lambda_eff": params.lambda_eff(image_size), "image_size": int(image_size),
            **extra}


def parse_prior_params(doc, source: str) -> PriorParams:
    if not isinstance(doc, dict) or doc.get("format") != PRIOR_PARAMS_FORMAT:
        raise ConfigError(f"prior_params={source}: not a {PRIOR_PARAMS_FORMAT} document "
                          "(the prior_params.json that `calibrate` logs)")
    if doc.get("version") != PRIOR_PARAMS_VERSION:
        raise ConfigError(f"prior_params={source}: version {doc.get('version')!r} is not "
                          f"supported (expected {PRIOR_PARAMS_VERSION})")
    try:
        alpha, frac = float(doc["alpha"]), float(doc["lambda_eff_fraction"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"prior_params={source}: needs numeric alpha and "
                          "lambda_eff_fraction") from None
    if not (math.isfinite(alpha) and alpha > 0 and math.isfinite(frac) and frac > 0):
        raise ConfigError(f"prior_params={source}: alpha={alpha} and lambda_eff_fraction="
                          f"{frac} must be finite and > 0")
    mode = doc.get("mode", "frozen")   # documents from before mode=train have none
    if mode not in CALIBRATE_MODES:
        raise ConfigError(f"prior_params={source}: mode {mode!r} is unknown "
                          f"(expected one of {list(CALIBRATE_MODES)})")
    return PriorParams(alpha, frac, source, mode)


# --------------------------------------------------------------------------- search space
#: What ``calibrate -P search=`` may fit: alpha alone (lambda_eff fixed), or both.
SEARCHES = {"alpha": ("alpha",), "alpha,lambda_eff": ("alpha", "lambda_eff")}
#: ``search=auto``: mode=train fits alpha (the paper: alpha "fit on a held-out validation
#: subset", lambda_eff "set to 0.25 x the image diagonal"); mode=frozen both.
DEFAULT_SEARCH = {"train": "alpha", "frozen": "alpha,lambda_eff"}


def parse_search(search: str | None, *, mode: str) -> tuple[str, ...]:
    """``auto`` -> the mode's default; ``alpha`` or ``alpha,lambda_eff`` (any order)."""
    text = (search or "auto").strip().lower().replace(" ", "")
    if text == "auto":
        text = DEFAULT_SEARCH.get(mode, "alpha,lambda_eff")
    names = set(text.split(","))
    for params in SEARCHES.values():
        if names == set(params):
            return params
    raise ConfigError(f"search={search!r}: use auto, alpha (lambda_eff fixed) or "
                      "alpha,lambda_eff")


@dataclass(frozen=True)
class SearchSpace:
    """The prior parameters a study searches, and the values of those it keeps fixed."""

    params: tuple[str, ...]            # ("alpha",) or ("alpha", "lambda_eff")
    alpha: float                       # the configuration's own values: the fixed ones, and
    lambda_eff_fraction: float         # the baseline trial

    @classmethod
    def of(cls, cfg: TrainConfig, params) -> SearchSpace:
        """``cfg``'s own prior (lambda_eff ``auto`` = 0.25 x the diagonal) as fixed values."""
        frac = (0.25 if cfg.prior.lambda_eff is None
                else cfg.prior.lambda_eff / diagonal(cfg.image_size))
        return cls(tuple(params), float(cfg.prior.alpha), float(frac))

    @property
    def key(self) -> str:
        return ",".join(self.params)

    def suggest(self, trial) -> tuple[float, float]:
        """(alpha, lambda_eff fraction) of an Optuna trial: suggested, or fixed."""
        alpha = (trial.suggest_float("alpha", *ALPHA_RANGE, log=True)
                 if "alpha" in self.params else self.alpha)
        frac = (trial.suggest_float("lambda_eff_fraction", *LAMBDA_FRACTION_RANGE)
                if "lambda_eff" in self.params else self.lambda_eff_fraction)
        return alpha, frac

    def values(self, trial_params) -> dict:
        """``alpha`` and ``lambda_eff_fraction`` of a finished trial (fixed ones filled in;
        None where a searched one is missing, e.g. a trial that failed before suggesting)."""
        return {"alpha": (trial_params.get("alpha") if "alpha" in self.params
                          else self.alpha),
                "lambda_eff_fraction": (trial_params.get("lambda_eff_fraction")
                                        if "lambda_eff" in self.params
                                        else self.lambda_eff_fraction)}

    def baseline(self) -> dict | None:
        """The configuration's own prior as a first trial (searched params only), if inside
        the search space."""
        if not (ALPHA_RANGE[0] <= self.alpha <= ALPHA_RANGE[1]
                and LAMBDA_FRACTION_RANGE[0] <= self.lambda_eff_fraction
                <= LAMBDA_FRACTION_RANGE[1]):
            return None
        both = {"alpha": self.alpha, "lambda_eff_fraction": self.lambda_eff_fraction}
        return {k: v for k, v in both.items()
                if (k if k == "alpha" else "lambda_eff") in self.params}


# --------------------------------------------------------------------------- targets, folds
@dataclass(frozen=True)
class Fold:
    """The calibration fold: staged rows (cache order), their labels and scored classes."""

    target: str
    rows: np.ndarray            # indices into frames / the uint8 cache
    labels: np.ndarray          # class index per row
    classes: tuple[int, ...]    # classes with positives and negatives in the fold
    #: every class of the staged data in index order (Kvasir-Capsule's 14 or its own)
    names: tuple[str, ...] = CLASSES

    @property
    def class_names(self) -> list[str]:
        return [self.names[k] for k in self.classes]


def calibration_fold(frames: pd.DataFrame, manifest: dict, target: str) -> Fold:
    """The rows of ``target`` in a staged folder; DataError if nothing can be scored."""
    kind, system = parse_target(target)
    dataset = manifest.get("dataset", "kvasir-capsule")
    names = class_set_of(manifest)
    if kind == TARGET_KVASIR:
        if dataset == "galar":
            raise ConfigError(f"target={target}: the data is a staged Galar folder; pass "
                              "target=galar:<capsule system> or a staged Kvasir folder")
        mask = frames["split"].to_numpy() == "val"
    else:
        if dataset != "galar" or "capsule_system" not in frames.columns:
            raise ConfigError(f"target={target}: needs data=<a staged Galar folder> "
                              f"(`pipi stage galar`), got a {dataset!r} folder")
        systems = sorted(set(frames["capsule_system"].astype(str)))
        if system not in systems:
            raise ConfigError(f"target={target}: no capsule system {system!r} in the staged "
                              f"Galar folder. Available: {systems}")
        mask = ((frames["capsule_system"].astype(str).to_numpy() == system)
                & (frames["vendor_fold"].astype(str).to_numpy() == "calibration"))
    rows = np.flatnonzero(mask)
    if kind != TARGET_KVASIR and not len(rows):
        raise DataError(f"target={target}: the staged Galar folder has no calibration video of "
                        f"{system!r} (staged with --calibration-fraction 0, or one video); "
                        "restage with `pipi stage galar --calibration-fraction 0.5`")
    labels = frames["class_index"].to_numpy()[rows].astype(np.int64)
    evaluable = manifest.get("evaluable_classes")
    allowed = ({names.index(c) for c in evaluable} if evaluable else set(range(len(names))))
    present = set(labels.tolist())
    classes = tuple(sorted(c for c in present & allowed if len(present) > 1))
    if not classes:
        found = sorted(names[c] for c in present)
        raise DataError(f"target={target}: the calibration fold ({len(rows)} frames) has no "
                        "positives of any evaluable class against negatives (classes "
                        f"present: {found}); a macro-AUC needs at least two classes")
    return Fold(target, rows, labels, classes, names.names)


def check_galar_classes(target: str, names, what: str) -> None:
    """A ``galar:<system>`` target scores Galar mapped onto Kvasir-Capsule's 14 classes:
    ConfigError (one line) when ``what`` (a run, the training data) has another class set."""
    cs = ClassSet(tuple(names))
    if parse_target(target)[0] == "galar" and not cs.is_kvasir:
        raise ConfigError(f"target={target}: {not_kvasir(what, cs)}; a Galar target scores "
                          f"Kvasir-Capsule's 14 classes (Galar's labels are mapped onto them): "
                          f"{KVASIR_MAP_HINT}")


def interleaved_order(labels: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """A fixed order of the fold in which every class is spread evenly (seeded)."""
    n = len(labels)
    perm = np.random.default_rng(seed).permutation(n)
    key = np.empty(n)
    for c in np.unique(labels):
        idx = perm[labels[perm] == c]
        key[idx] = (np.arange(len(idx)) + 0.5) / len(idx)
    return np.argsort(key, kind="stable")


# --------------------------------------------------------------------------- the objective
@dataclass
class TrialCost:
    """Seconds spent in one objective evaluation, by part."""

    inputs: float = 0.0     # the prior (+ normalisation), on the device
    forward: float = 0.0    # the model's forward pass and softmax
    report: float = 0.0     # running AUCs, Optuna's report/should_prune

    def total(self) -> float:
        return self.inputs + self.forward + self.report


@dataclass
class CalibrationObjective:
    """Scores a frozen 5-channel model on a fold under a given prior.

    ``score(alpha, fraction, report=...)`` returns the fold's macro-AUC; ``report(step,
    value)`` receives the running macro-AUC about ``REPORTS_PER_TRIAL`` times and may raise
    to stop early. ``last_cost`` holds the timing split of the latest call.
    """

    model: torch.nn.Module
    cfg: TrainConfig
    images: np.ndarray          # the uint8 cache of the whole staged folder
    fold: Fold
    device: torch.device
    batch_size: int = 64
    order: np.ndarray = field(init=False)
    last_cost: TrialCost = field(default_factory=TrialCost)

    def __post_init__(self):
        if self.cfg.cell_config.input_channels != 5:
            raise ConfigError(f"cell {self.cfg.cell} has {self.cfg.cell_config.input_channels} "
                              "input channels; calibrate needs a run of a 5-channel cell "
                              "(pi, pblood_only, phi_only)")
        self.order = interleaved_order(self.fold.labels)
        self.model = self.model.to(self.device).eval()

    def config_for(self, alpha: float, fraction: float) -> TrainConfig:
        return PriorParams(alpha, fraction).apply(self.cfg)

    def predict(self, alpha: float, fraction: float, report=None) -> np.ndarray:
        """Probabilities ``(len(fold), K)`` in fold order under this prior."""
        return self.predict_with(self.config_for(alpha, fraction), report)

    @torch.no_grad()
    def predict_with(self, cfg: TrainConfig, report=None) -> np.ndarray:
        """Probabilities ``(len(fold), K)`` in fold order under ``cfg``'s prior."""
        inputs = FrameInputs(cfg)
        rows = self.fold.rows[self.order]
        labels = self.fold.labels[self.order]
        n = len(rows)
        n_batches = max(1, math.ceil(n / self.batch_size))
        every = math.ceil(n_batches / REPORTS_PER_TRIAL)  # at most REPORTS_PER_TRIAL reports
        probs = np.zeros((n, len(self.cfg.class_set)), np.float32)
        cost = TrialCost()
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        for b in range(n_batches):
            sl = slice(b * self.batch_size, min(n, (b + 1) * self.batch_size))
            t0 = time.perf_counter()
            x, _ = inputs(to_float(self.images, rows[sl], self.device), train=False)
            sync()
            t1 = time.perf_counter()
            probs[sl] = torch.softmax(self.model(x).float(), dim=1).cpu().numpy()
            t2 = time.perf_counter()
            cost.inputs += t1 - t0
            cost.forward += t2 - t1
            if report is not None and ((b + 1) % every == 0) and b + 1 < n_batches:
                value = self._auc(labels[:sl.stop], probs[:sl.stop])
                if math.isfinite(value):
                    report(b + 1, value)
                cost.report += time.perf_counter() - t2
        self.last_cost = cost
        out = np.empty_like(probs)
        out[self.order] = probs
        return out

    def _auc(self, labels: np.ndarray, probs: np.ndarray) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # classes not yet seen are left out
            return macro_auc(labels, probs, classes=self.fold.classes)

    def score(self, alpha: float, fraction: float, report=None) -> float:
        """The objective: macro-AUC of the fold under ``(alpha, fraction x diagonal)``."""
        return self._auc(self.fold.labels, self.predict(alpha, fraction, report))

    def score_as_trained(self) -> float:
        """The fold's macro-AUC under the model's own prior (``cfg.prior``, as trained)."""
        return self._auc(self.fold.labels, self.predict_with(self.cfg))


def score_on_fold(model: torch.nn.Module, cfg: TrainConfig, images: np.ndarray,
                  fold: Fold) -> float:
    """The fold's macro-AUC of ``model`` (5-channel, on its own device) under ``cfg``'s prior,
    as :class:`CalibrationObjective` scores it; the model's train/eval mode is restored, so a
    training loop may call this between epochs (``calibrate mode=train``, target Galar)."""
    training = model.training
    try:
        device = next(model.parameters()).device
        return CalibrationObjective(model, cfg, images, fold, device).score_as_trained()
    finally:
        model.train(training)


__all__ = ["ALPHA_RANGE", "CALIBRATE_MODES", "DEFAULT_SEARCH", "LAMBDA_FRACTION_RANGE",
           "SEARCHES", "CalibrationObjective", "Fold", "PriorParams", "SearchSpace", "TrialCost",
           "calibration_fold", "check_galar_classes", "diagonal", "interleaved_order",
           "parse_prior_params", "parse_search", "parse_target", "prior_params_document",
           "score_on_fold"]
