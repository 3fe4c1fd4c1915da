"""Score a finished run under a transform and log the result as a child run.

Every study that re-scores trained models without retraining them (inference-time channel
ablation, PI-TTA probes, and later robustness, transplants, cross-vendor evaluation) is one
call of :func:`evaluate_run`: load the run's logged model and configuration, score the
staged frames of each requested split with a :class:`Scorer`, and log a child run that
follows the run contract (tags ``pipi.cell = <cell>@<variant>``, ``pipi.study``,
``pipi.variant``, ``pipi.source_run_id``; per-frame predictions; ``<split>/*`` metrics).
:func:`find_or_evaluate` makes it idempotent: the child is keyed by (study, variant, source
run, data digest, options, code version) and a FINISHED child with that key is reused.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
import yaml
from torch import nn

from pipi import tracking
from pipi.classes import CLASSES
from pipi.config import TrainConfig, run_params
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError
from pipi.paths import pipi_home
from pipi.predictions import predictions_frame, write_predictions
from pipi.report.run_figures import evaluation_figures
from pipi.training.frames import (
    FrameInputs,
    build_frame_model,
    is_capsule_vision,
    predict_probs,
    split_classes,
    split_metrics,
    tmpdir,
)

log = logging.getLogger(__name__)


def load_run_model(run_id: str) -> tuple[nn.Module, TrainConfig]:
    """The best weights of a per-frame run (from its logged ``model``) and its config."""
    work = tmpdir()
    try:
        folder = tracking.registry.download_model_files(run_id, work)
        spec = yaml.safe_load((folder / "MLmodel").read_text())
        arts = spec["flavors"]["python_function"]["artifacts"]
        doc = json.loads((folder / arts["config"]["path"]).read_text())
        cfg = TrainConfig.from_dict(doc, weights="none")
        model = build_frame_model(cfg)
        state = torch.load(folder / arts["weights"]["path"], map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return model.eval(), cfg


def device_for(device: str | None = None) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


@dataclass
class EvalContext:
    """What a scorer sees: the model, its config, the staged frames and their uint8 cache."""

    model: nn.Module
    cfg: TrainConfig
    frames: pd.DataFrame              # every staged row
    images: np.ndarray                # (N, S, S, 3) uint8 at cfg.image_size, frames' order
    device: torch.device
    source_run_id: str
    work: Path


class Scorer(Protocol):
    """``scorer(ctx, rows) -> (probs (len(rows), 14), extra metrics)`` for one split's rows."""

    def __call__(self, ctx: EvalContext, rows: np.ndarray, split: str
                 ) -> tuple[np.ndarray, Mapping[str, float]]: ...


def plain_scorer(ctx: EvalContext, rows: np.ndarray, split: str):
    """The model as trained: un-augmented frames, the prior as the cell computes it."""
    imgs = ctx.images[rows] if len(rows) else ctx.images[:0]
    return predict_probs(ctx.model, imgs, FrameInputs(ctx.cfg), device=ctx.device), {}


@dataclass(frozen=True)
class Evaluation:
    """One way of re-scoring a finished run: the study, the variant and how to score."""

    study: str
    variant: str
    scorer: Callable = plain_scorer
    splits: tuple[str, ...] = ("val", "test")
    options: Mapping = field(default_factory=dict)   # hashed into the key, logged as params
    model_transform: Callable[[nn.Module, TrainConfig], nn.Module] | None = None
    tags: Mapping = field(default_factory=dict)
    check: Callable[[TrainConfig], None] | None = None  # raise ConfigError for a wrong run
    finalize: Callable[[dict], dict] | None = None  # extra metrics from all the metrics
    select: Callable[[pd.DataFrame], np.ndarray] | None = None  # rows to score (bool); all


def evaluation_key(ev: Evaluation, *, source_run_id: str, data_digest: str) -> str:
    return tracking.evaluation_key(study=ev.study, variant=ev.variant,
                                   source_run_id=source_run_id, data_digest=data_digest,
                                   options=ev.options)


def evaluate_run(source_run_id: str, ev: Evaluation, *, data: Path,
                 parent_run_id: str | None = None, entry_point: str = "ablate",
                 progress: bool = False) -> str:
    """Score ``source_run_id`` as ``ev`` says on the staged folder ``data``; return the child run
    id. The child is nested under the active run (a study's parent ``parent_run_id``), else it
    goes into the source run's experiment."""
    frames, manifest = load_staged(data)
    digest = manifest["data_digest"]
    model, cfg = load_run_model(source_run_id)
    if ev.check is not None:
        ev.check(cfg)
    if ev.model_transform is not None:
        model = ev.model_transform(model, cfg)
    images = build_cache(data, frames, size=cfg.image_size, digest=digest,
                         cache_dir=pipi_home() / "cache", progress=progress)
    key = evaluation_key(ev, source_run_id=source_run_id, data_digest=digest)
    # a child of an imported run is imported too (aggregate keeps it beside its source)
    src = tracking.get_run(source_run_id)
    src_tags = src.tags
    tags = {**tracking.evaluation_tags(cfg, manifest, study=ev.study, variant=ev.variant,
                                       source_run_id=source_run_id, key=key,
                                       parent_run_id=parent_run_id),
            **{k: src_tags[k] for k in tracking.tags.INHERITED_SOURCE_TAGS if k in src_tags},
            **{k: str(v) for k, v in ev.tags.items()}}
    keep = np.ones(len(frames), bool) if ev.select is None else np.asarray(ev.select(frames), bool)
    split = np.where(keep, frames["split"].to_numpy(), "")
    scored = frames[keep]  # the classes of the metrics are those with positives among them
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point=entry_point, nested=True, tags=tags,
                               experiment=None if parent_run_id
                               else tracking.experiment_name(src.experiment_id),
                               run_name=f"{cfg.cell}@{ev.variant}-{cfg.backbone}-s{cfg.seed}"
                               ) as run:
            run.log_params({**run_params(cfg), "data_dir": str(data), "variant": ev.variant,
                                 "study": ev.study, "source_run_id": source_run_id,
                                 **{f"{ev.study}.{k}": v for k, v in ev.options.items()}})
            ctx = EvalContext(model.to(device_for()), cfg, frames, images, device_for(),
                              source_run_id, work)
            preds, metrics = score_splits(frames, split, ev.splits, scored,
                                          lambda rows, s: ev.scorer(ctx, rows, s),
                                          names=cfg.class_set.names,
                                          cv2024=is_capsule_vision(manifest))
            if ev.finalize is not None:
                metrics.update(ev.finalize(metrics))
            log_scores(run, preds, metrics, scored, work, names=cfg.class_set.names)
            if "test" in preds:  # the figures that fit a re-scored run (docs/mlflow-ui.md)
                run.log_figures(evaluation_figures(
                    preds["test"], split_classes(scored, "test"),
                    label=f"{cfg.cell}@{ev.variant} {cfg.backbone} s{cfg.seed}",
                    names=cfg.class_set.names))
            return run.run_id
    finally:
        shutil.rmtree(work, ignore_errors=True)


def score_splits(frames: pd.DataFrame, split: np.ndarray, splits: Sequence[str],
                 scored: pd.DataFrame,
                 score: Callable[[np.ndarray, str], tuple[np.ndarray, Mapping[str, float]]],
                 *, names: Sequence[str] = CLASSES, cv2024: bool = False
                 ) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Per-frame predictions and ``<split>/*`` metrics of each split in ``splits``.

    ``split``: the split of every row of ``frames`` ("" for rows not scored); ``score(rows,
    split)`` gives the probabilities ``(len(rows), 14)`` and extra metrics of those rows;
    the metrics' classes are those with positives among ``scored``, named by ``names`` (the
    run's class set); ``cv2024`` adds the Capsule Vision 2024 challenge's metrics.
    """
    preds, metrics = {}, {}
    for s in splits:
        rows = np.flatnonzero(split == s)
        probs, extra = score(rows, s)
        preds[s] = predictions_frame(frames.iloc[rows], probs)
        metrics.update(split_metrics(preds[s], split_classes(scored, s), s, names=names,
                                     cv2024=cv2024))
        metrics.update(extra)
    return preds, metrics


def log_scores(run: tracking.Run, preds: Mapping[str, pd.DataFrame],
               metrics: Mapping[str, float], scored: pd.DataFrame, work: Path, *,
               names: Sequence[str] = CLASSES) -> None:
    """Log into ``run``: finite metrics, the class tags, the predictions artifact
    (``names``: the class set in index order)."""
    run.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
    run.set_tags(tracking.class_tags(test=split_classes(scored, "test"),
                                          val=split_classes(scored, "val"), names=names))
    run.log_artifacts(write_predictions(dict(preds), work / "predictions", names),
                           "predictions")


def find_evaluation(source_run_id: str, ev: Evaluation, *, data_digest: str,
                    entry_point: str = "ablate"):
    """The FINISHED child of this evaluation, or None."""
    return tracking.find_finished_run(
        evaluation_key(ev, source_run_id=source_run_id, data_digest=data_digest),
        **{tracking.tags.TAG_ENTRY_POINT: entry_point})


# --------------------------------------------------------------------------- channel zeroing
class ZeroChannels(nn.Module):
    """Feeds a 5-channel model its input with some channels set to zero."""

    def __init__(self, model: nn.Module, channels: Sequence[int]):
        super().__init__()
        self.model, self.channels = model, tuple(channels)

    def forward(self, x):
        x = x.clone()
        x[:, list(self.channels)] = 0
        return self.model(x)


#: Inference-time channel ablations: variant -> zeroed input channels (3 = P_blood, 4 = Phi).
CHANNEL_VARIANTS: dict[str, tuple[int, ...]] = {
    "zero_phi": (4,), "zero_pblood": (3,), "zero_both": (3, 4),
}


def _five_channel(cfg: TrainConfig) -> None:
    if cfg.cell_config.input_channels != 5:
        raise ConfigError(f"cell {cfg.cell} is not a 5-channel cell; channel_infer needs a pi run")


def channel_evaluation(variant: str) -> Evaluation:
    """Inference-time channel ablation of a 5-channel run (study ``channel_infer``)."""
    channels = CHANNEL_VARIANTS[variant]
    return Evaluation(
        study="channel_infer", variant=variant, check=_five_channel,
        options={"channels": ",".join(map(str, channels))},
        model_transform=lambda model, cfg: ZeroChannels(model, channels))
