"""Sequence-aware cells (library half): C1 summaries, C2 windows, C3 residuals, the head's fit.

The MLflow side (base runs, stored embeddings, the autoencoder run, the ``train`` run of a
sequence cell) lives in ``pipi.runs.streams`` and ``pipi.runs.training``.

A sequence cell (``b`` ... ``e_dagger``, see ``pipi.cells``) classifies each labelled frame
from up to three feature streams computed around it:

* **C2** (``temporal``): a Transformer over the per-frame embeddings of a window of labelled
  frames of the same video and split (``build_windows``). The embeddings come from a
  FINISHED per-frame run of the cell's ``base_cell`` with the same backbone, seed, image
  size, prior parameters and data digest (``find_base_run``), trained first as a nested run
  when none exists. They are computed once from that run's best weights and stored as an
  artifact of that run (``embeddings/``), so every later sequence run on it reuses them.
* **C1** summaries (``c1``): the 8 (``c8``, ``c8_patient``) or 13 (``c13``) global scalars of
  ``P_blood`` (``pipi.prior.c1_features``) of the centre frame, on the un-augmented image at
  the training size; ``c8`` and ``c13`` are z-scored with train-split statistics,
  ``c8_patient`` per patient (video) with that video's own statistics.
* **C3** (``c3``): ``|x - AE(x)|`` of the centre frame, pooled to 8 x 8 per channel (192
  numbers), from a Normal-class autoencoder trained once per (seed, data digest, image size,
  AE recipe) and stored with its residuals as an artifact of its own MLflow run
  (entry point tag ``c3_autoencoder``), z-scored with train statistics.

Windows (``build_windows``): for each staged row (a labelled frame; a multilabel frame has
one row per label) the window holds the ``W = cfg.window`` labelled frames of the same video
and split that are nearest to it in frame number, the row's own frame included, ties broken
towards the earlier frame, in frame-number order. In a long run of consecutive frames the
centre therefore sits at position ``W // 2`` (8 before, 7 after for W = 16). Near the start or
end of a video the window shifts inwards (it takes more frames from the other side) and
``centre`` records where the labelled frame sits. When the video has fewer than ``W``
labelled frames in its split, the window holds all of them and the remaining positions are
padding, marked True in ``mask`` (the Transformer's key-padding mask). A frame listed under
two classes counts once.

The head: the concatenation (``SequenceHead``) of the centre token of the
``TemporalEncoder`` (projection to 256, 4 layers, 8 heads, feed-forward 512, dropout 0.1,
sinusoidal positions; output back to the embedding width, e.g. 1280 for EfficientNet-B0)
with the C1 and C3 vectors, then dropout and a linear layer. Embeddings are standardised
with train-split statistics before the encoder. Recipe: class-weighted cross-entropy,
AdamW (lr 1e-4, weight decay 1e-4), cosine annealing, batch 64, early stopping on
validation macro-AUC (``pipi.cells.SEQUENCE_RECIPE`` + the profile).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from pipi.config import TrainConfig, make_config
from pipi.data.cache import batches, to_float
from pipi.errors import ConfigError, DataError
from pipi.models import NormalAutoencoder, residual_features
from pipi.models.sequence import SequenceModel
from pipi.prior import c1_features, prior_channels
from pipi.serving.windows import (  # noqa: F401 (re-exported: training and serving share them)
    Windows,
    build_windows,
    c1_form,
    zscore,
    zscore_stats,
)
from pipi.training.frames import (
    FrameInputs,
    class_weights,
    fit_epochs,
    fit_metrics,
    optimizer_step,
    predictions_frame,
    seed_everything,
    split_classes,
)
from pipi.training.result import FitResult

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
#: TrainConfig fields a sequence run shares with the per-frame run it builds on.
SHARED_WITH_BASE = ("weights", "image_size", "hflip", "rotation_deg", "jitter", "prior",
                    "prior_init", "distill_lambda", "distill_target", "decoder", "classes")
#: Fields of the base run that must match for its embeddings to be reused (params, as logged).
BASE_MATCH_PARAMS = ("weights", "image_size", "alpha", "lambda_eff", "hb_index",
                     "second_channel", "prior_mask", "prior_init", "distill_lambda")
NORMAL_CLASS = "Normal clean mucosa"
EMBEDDINGS_DIR = "embeddings"
C3_DIR = "c3"


# --------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class AutoencoderRecipe:
    """How the C3 autoencoder is trained (L1, Normal train frames; paper "Normal-class AE")."""

    seed: int
    image_size: int
    epochs: int = 10                 # paper: 10 epochs
    batch_size: int = 32             # not stated in the paper
    lr: float = 1e-3                 # Adam; not stated in the paper
    max_batches: int = 0             # smoke profile only

    @classmethod
    def of(cls, cfg: TrainConfig) -> AutoencoderRecipe:
        return cls(seed=cfg.seed, image_size=cfg.image_size, epochs=cfg.ae_epochs,
                   max_batches=cfg.max_batches)


def base_config(cfg: TrainConfig) -> TrainConfig:
    """The per-frame configuration whose run a sequence configuration builds on.

    The base cell's own recipe (lr, epochs, batch size of its profile and backbone), with the
    fields in ``SHARED_WITH_BASE`` (image size, weights, augmentation, prior) taken from
    ``cfg``: exactly what ``train -P cell=<base>`` with the same options would run.
    """
    cell = cfg.cell_config
    if not cell.is_sequence:
        raise ConfigError(f"cell {cfg.cell!r} is a per-frame cell; it has no base run")
    base = make_config(cell=cell.base_cell, backbone=cfg.backbone, seed=cfg.seed,
                       profile=cfg.profile)
    return replace(base, **{f: getattr(cfg, f) for f in SHARED_WITH_BASE})


def zscore_by_group(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Z-score each row with the statistics of the rows of its own group (per patient)."""
    out = np.empty(x.shape, dtype=np.float32)
    for g in pd.unique(groups):
        sel = groups == g
        out[sel] = zscore(x[sel], x[sel])
    return out


# --------------------------------------------------------------------------- streams
def _device(device: str | None) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


@torch.no_grad()
def c1_raw(images: np.ndarray, cfg: TrainConfig, *, form: int, device: torch.device,
           batch_size: int = 128) -> np.ndarray:
    """Un-normalised C1 features ``(N, form)`` of every frame (un-augmented, training size)."""
    out = []
    for idx in batches(len(images), batch_size):
        x01 = to_float(images, idx, device)
        p = prior_channels(x01, **asdict(cfg.prior))
        out.append(c1_features(p[:, 0], form=form).cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, form), np.float32)


def c1_stream(frames: pd.DataFrame, images: np.ndarray, cfg: TrainConfig, *, cache_dir: Path,
              digest: str, device: torch.device) -> np.ndarray:
    """The C1 stream of the cell, normalised as the cell says (train or per-patient z)."""
    kind = cfg.cell_config.c1
    raw = c1_cached(images, cfg, cache_dir=cache_dir, digest=digest, device=device)
    if kind == "c8_patient":
        return zscore_by_group(raw, frames["video_id"].astype(str).to_numpy())
    return zscore(raw, raw[frames["split"].to_numpy() == "train"])


def c1_cached(images: np.ndarray, cfg: TrainConfig, *, cache_dir: Path, digest: str,
              device: torch.device) -> np.ndarray:
    """Un-normalised C1 features of every staged frame, cached by data, size, form and prior."""
    form = c1_form(cfg)
    blob = json.dumps({"digest": digest, "size": cfg.image_size, "form": form,
                       "prior": asdict(cfg.prior)}, sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    path = Path(cache_dir) / "c1" / f"{digest[:24]}-{key}.npy"
    if path.is_file() and np.load(path, mmap_mode="r").shape == (len(images), form):
        return np.load(path)
    raw = c1_raw(images, cfg, form=form, device=device)
    store_array(path, raw)
    return raw


def train_autoencoder(images: np.ndarray, rows: np.ndarray, recipe: AutoencoderRecipe, *,
                      device: torch.device, on_epoch=None) -> NormalAutoencoder:
    """Train the C3 autoencoder with an L1 loss on ``images[rows]`` (Normal train frames)."""
    if not len(rows):
        raise DataError("C3 needs Normal clean mucosa frames in the train split; there are none")
    gen = seed_everything(recipe.seed)
    ae = NormalAutoencoder().to(device)
    opt = torch.optim.Adam(ae.parameters(), lr=recipe.lr)
    for epoch in range(recipe.epochs):
        ae.train()
        total, n = 0.0, 0
        for idx in batches(len(rows), recipe.batch_size, gen=gen, max_batches=recipe.max_batches):
            x = to_float(images, rows[idx], device)
            loss = F.l1_loss(ae(x), x)
            total += optimizer_step(loss, opt, where=f"autoencoder epoch {epoch}") * len(idx)
            n += len(idx)
        log.info("C3 autoencoder epoch %d  L1 %.4f", epoch, total / max(n, 1))
        if on_epoch is not None:
            on_epoch(epoch, total / max(n, 1))
    return ae.eval()


@torch.no_grad()
def residual_matrix(ae: NormalAutoencoder, images: np.ndarray, *, device: torch.device,
                    batch_size: int = 128) -> np.ndarray:
    """C3 features ``(N, 192)`` of every frame (raw, not z-scored)."""
    ae.eval()
    out = [residual_features(ae, to_float(images, idx, device)).cpu().numpy()
           for idx in batches(len(images), batch_size)]
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 192), np.float32)

@torch.no_grad()
def frame_embeddings(model: nn.Module, images: np.ndarray, inputs: FrameInputs, *,
                     device: torch.device, batch_size: int = 128) -> np.ndarray:
    """Pooled backbone embeddings ``(N, D)`` of every frame (eval mode, no augmentation)."""
    model = model.to(device).eval()
    out = []
    for idx in batches(len(images), batch_size):
        x, _ = inputs(to_float(images, idx, device), train=False)
        out.append(model.embed(x).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

def store_array(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)


# --------------------------------------------------------------------------- the model
@dataclass
class Streams:
    """Per-row inputs of a sequence cell, all in ``frames`` row order."""

    embeddings: np.ndarray          # (N, D) standardised
    windows: Windows
    c1: np.ndarray | None = None    # (N, 8|13)
    c3: np.ndarray | None = None    # (N, 192)
    #: train-split (mean, std) that standardised each stream ("emb", "c1", "c3"), kept for
    #: the registered model; C1 of ``c_prime`` is per patient and has none
    norms: dict = field(default_factory=dict)

    def batch(self, rows: np.ndarray, device: torch.device) -> dict:
        idx = self.windows.index[rows]                              # (B, W)
        emb = self.embeddings[np.where(idx < 0, 0, idx)]            # (B, W, D)
        emb[idx < 0] = 0.0
        out = {"emb": torch.from_numpy(emb).to(device),
               "centre": torch.from_numpy(self.windows.centre[rows]).to(device),
               "mask": torch.from_numpy(self.windows.mask[rows]).to(device)}
        if self.c1 is not None:
            out["c1"] = torch.from_numpy(self.c1[rows]).to(device)
        if self.c3 is not None:
            out["c3"] = torch.from_numpy(self.c3[rows]).to(device)
        return out


def build_model(cfg: TrainConfig, streams: Streams) -> SequenceModel:
    return SequenceModel(
        emb_dim=streams.embeddings.shape[1], window=cfg.window, temporal=cfg.cell_config.temporal,
        c1_dim=0 if streams.c1 is None else streams.c1.shape[1],
        c3_dim=0 if streams.c3 is None else streams.c3.shape[1], num_classes=len(cfg.class_set))


@torch.no_grad()
def predict_sequence(model: SequenceModel, streams: Streams, rows: np.ndarray, *,
                     device: torch.device, batch_size: int = 256) -> np.ndarray:
    """Softmax probabilities ``(len(rows), 14)``."""
    model.eval()
    out = [torch.softmax(model(**streams.batch(rows[b], device)).float(), 1).cpu().numpy()
           for b in batches(len(rows), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, model.spec["num_classes"]), np.float32)


def fit_sequence(cfg: TrainConfig, frames: pd.DataFrame, streams: Streams, *, tracker=None,
                 resume_state: dict | None = None, device: torch.device | None = None,
                 progress: bool = False, manifest: dict | None = None) -> FitResult:
    """Train and evaluate a sequence head (the recipe of the module docstring). ``manifest``:
    the staged folder's; its metrics are those of a per-frame cell
    (:func:`pipi.training.frames.fit_metrics`: per source, the Capsule Vision challenge's)."""
    dev = device or _device(None)
    split = frames["split"].to_numpy()
    rows = {s: np.flatnonzero(split == s) for s in SPLITS}
    labels = frames["class_index"].to_numpy(np.int64)
    classes = split_classes(frames, "test")
    val_classes = split_classes(frames, "val")
    gen = seed_everything(cfg.seed)
    model = build_model(cfg, streams).to(dev)
    weights = class_weights(labels[rows["train"]], len(cfg.class_set)).to(dev)

    def train_epoch(epoch, optimizer):
        model.train()
        total, n = 0.0, 0
        for bi, b in enumerate(batches(len(rows["train"]), cfg.batch_size, gen=gen,
                                       max_batches=cfg.max_batches)):
            r = rows["train"][b]
            y = torch.from_numpy(labels[r]).to(dev)
            loss = F.cross_entropy(model(**streams.batch(r, dev)), y, weight=weights)
            total += optimizer_step(loss, optimizer,
                                    where=f"epoch {epoch}, batch {bi}") * len(r)
            n += len(r)
        return total / max(n, 1)

    fit = fit_epochs(model, cfg=cfg, gen=gen, train_epoch=train_epoch,
                     predict_val=lambda: predict_sequence(model, streams, rows["val"], device=dev),
                     val_frames=frames.iloc[rows["val"]], classes=val_classes, tracker=tracker,
                     resume_state=resume_state, extra_state={"spec": model.spec})
    best, history = fit["best"], fit["history"]
    preds = {s: predictions_frame(frames.iloc[rows[s]],
                                  fit["val_probs"] if s == "val" and fit["val_probs"] is not None
                                  else predict_sequence(model, streams, rows[s], device=dev))
             for s in ("val", "test")}
    metrics = fit_metrics(preds, classes, val_classes, cfg, manifest, best["epoch"])
    return FitResult(model.cpu(), preds, metrics, classes, val_classes, history)
