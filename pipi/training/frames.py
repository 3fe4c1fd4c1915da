"""Per-frame training: one ``run_cell`` for every per-frame cell (a, pi, pblood_only,
phi_only, distill), following the paper's recipe and the run contract.

Loss: class-weighted cross-entropy with inverse-frequency weights
``w_c = N / (K * n_c)`` where ``n_c`` is the number of training rows of class c, N their sum
and K the number of classes present in train (absent classes get weight 0). Model selection:
best validation macro-AUC over the evaluable classes, early stopping with ``patience``.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from pipi.classes import CLASSES, NUM_CLASSES
from pipi.config import TrainConfig
from pipi.data.cache import batches, build_cache, split_rows
from pipi.data.progress import tqdm
from pipi.data.staging import load_staged
from pipi.errors import PipiError
from pipi.models import distill_loss
from pipi.paths import UNKNOWN_SOURCE, metric_key, pipi_home
from pipi.predictions import (  # noqa: F401  (re-exported: the format's home is pipi.predictions)
    PREDICTIONS_VERSION,
    PROB_COLUMNS,
    predictions_frame,
    predictions_schema,
    prob_columns_of,
    read_predictions,
    write_predictions,
)
from pipi.runtime import (
    DeviceBatches,
    ResidentBatches,
    Runtime,
    apply_determinism,
    prepare_model,
    runtime_of,
    weighted_cross_entropy,
)
from pipi.serving.frame_model import FrameInputs, build_frame_model
from pipi.stats.auc import macro_auc, per_class_auc
from pipi.stats.cv2024 import cv2024_metrics
from pipi.training.checkpoint import plain_state
from pipi.training.graphed import GraphedStep, capturable_adamw, make_capturable
from pipi.training.probe import features_path, probe_features, published_features
from pipi.training.result import FitResult

log = logging.getLogger(__name__)


class TrainingDiverged(PipiError):
    """The loss became NaN or infinite."""


# --------------------------------------------------------------------------- setup
def seed_everything(seed: int, runtime: Runtime | None = None) -> torch.Generator:
    """Seed python, numpy and torch; deterministic kernels unless ``runtime`` says otherwise.
    Returns the data generator (CPU: the same augmentation on every device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    apply_determinism(runtime or Runtime(torch.device("cpu")))
    return torch.Generator().manual_seed(seed)


def source_names(value: str) -> tuple[str, ...]:
    """The source names of a ``train_sources`` / ``test_sources`` option (comma-separated)."""
    return tuple(s.strip() for s in value.split(",") if s.strip())


def scored_split(frames: pd.DataFrame, cfg: TrainConfig) -> np.ndarray:
    """The split of every staged row as this run uses it: ``train``/``val`` rows outside
    ``cfg.train_sources`` and ``test`` rows outside ``cfg.test_sources`` become "" (not used);
    every row keeps its split when neither is set."""
    split = frames["split"].to_numpy().astype(object)
    if not (cfg.train_sources or cfg.test_sources):
        return split
    src = frames["source"].astype(str).to_numpy()
    split = split.copy()
    for names, splits in ((cfg.train_sources, ("train", "val")), (cfg.test_sources, ("test",))):
        if names:
            drop = np.isin(split, splits) & ~np.isin(src, source_names(names))
            split[drop] = ""
    return split


def split_classes(frames: pd.DataFrame, split: str) -> list[int]:
    """Classes with positives in ``split``.

    On ``test`` these are the headline macro-AUC's classes (the paper's 11 on the canonical
    split, Blood - fresh included although it has no val frames); on ``val`` they are the
    classes that select the checkpoint and stop early.
    """
    return sorted(set(frames.loc[frames["split"] == split, "class_index"].tolist()))


def class_weights(labels: np.ndarray, n_classes: int = NUM_CLASSES) -> torch.Tensor:
    counts = np.bincount(labels, minlength=n_classes).astype(np.float64)
    present = counts > 0
    w = np.zeros(len(counts))
    w[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(w, dtype=torch.float32)


# --------------------------------------------------------------------------- loops
def optimizer_step(loss: torch.Tensor, optimizer, *, where: str) -> float:
    """One guarded update: refuse a NaN/inf loss (naming ``where``), then backward and step."""
    if not torch.isfinite(loss):
        raise TrainingDiverged(f"loss is {loss.item()} at {where}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def _frame_loss(fwd, x, y, p_blood, weights, cfg: TrainConfig, device: torch.device):
    if cfg.cell_config.distill:
        logits, aux = fwd(x)
        return distill_loss(logits, y, aux, p_blood, class_weights=weights,
                            lam=cfg.distill_lambda)
    if device.type == "cuda":  # the fused weighted nll_loss reduction is not deterministic
        return weighted_cross_entropy(fwd(x), y, weights)
    return F.cross_entropy(fwd(x), y, weight=weights)


def train_one_epoch(model, images, labels, inputs: FrameInputs, optimizer, weights, *, cfg,
                    gen, device, epoch: int, progress: bool = True,
                    runtime: Runtime | None = None, forward=None, scaler=None,
                    graphed: GraphedStep | None = None) -> float:
    """One epoch of the full step: cache -> device (uint8) -> augmentation -> prior ->
    forward/backward/step under the runtime's precision and memory format.

    ``images``: the uint8 memmap (batches streamed from the host), or a
    :class:`ResidentBatches` already on the device (``data_path=device``; the same batches).
    ``graphed``: the step replayed as a CUDA graph (``graph=on``) instead of the eager step.

    A NaN/inf loss raises ``TrainingDiverged`` naming the batch: at once on the CPU; on a GPU
    at the end of the epoch (checking every step would synchronise every step).
    """
    device = torch.device(device)
    rt = runtime or Runtime(device)
    fwd = model if forward is None else forward  # a compiled module has no truth value
    model.train()
    idx_batches = batches(len(labels), cfg.batch_size, gen=gen, max_batches=cfg.max_batches)
    stream = (images.batches(idx_batches) if isinstance(images, ResidentBatches)
              else DeviceBatches(images, idx_batches, device, labels=labels))
    losses, sizes = [], []
    for bi, (x8, y) in enumerate(tqdm(stream, desc=f"epoch {epoch}", unit="batch",
                                      total=len(idx_batches), leave=False,
                                      disable=not progress)):
        if graphed is not None:
            losses.append(graphed(x8, y, gen))
            sizes.append(len(idx_batches[bi]))
            continue
        x, p_blood = inputs(x8.float(), train=True, gen=gen, scale=255.0)
        with rt.autocast():
            loss = _frame_loss(fwd, rt.inputs(x), y, p_blood, weights, cfg, device)
        if device.type != "cuda" and not torch.isfinite(loss):
            raise TrainingDiverged(f"loss is {loss.item()} at epoch {epoch}, batch {bi}")
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None and scaler.is_enabled():
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        losses.append(loss.detach())
        sizes.append(len(idx_batches[bi]))
    if not losses:
        return 0.0
    vals = torch.stack(losses).double().cpu().numpy()  # one synchronisation per epoch
    bad = np.flatnonzero(~np.isfinite(vals))
    if len(bad):
        raise TrainingDiverged(f"loss is {vals[bad[0]]} at epoch {epoch}, batch {bad[0]}")
    return float(np.dot(vals, sizes) / sum(sizes))


def graphed_step(fwd, optimizer, inputs: FrameInputs, weights, cfg: TrainConfig,
                 rt: Runtime) -> GraphedStep:
    """The run's training step as a CUDA graph (``graph=on``), with the cell's loss."""
    def loss_fn(f, x, y, p_blood):
        return _frame_loss(f, x, y, p_blood, weights, cfg, rt.device)

    return GraphedStep(forward=fwd, optimizer=optimizer, inputs=inputs, loss_fn=loss_fn,
                       runtime=rt, batch_size=cfg.batch_size)


@torch.no_grad()
def predict_probs(model, images, inputs: FrameInputs, *, device, batch_size: int = 128,
                  strip_prior: bool = False, runtime: Runtime | None = None,
                  forward=None) -> np.ndarray:
    """Softmax probabilities ``[N, 14]`` for every row of a uint8 image array.

    Batched on the device (prefetched like training); the probabilities stay there until
    one copy back at the end."""
    device = torch.device(device)
    rt = runtime or Runtime(device)
    fwd = model if forward is None else forward  # a compiled module has no truth value
    model.eval()
    deploy = getattr(model, "deploy_mode", None)
    if deploy is not None:
        model.deploy_mode = True
    out = []
    try:
        for x8, _ in DeviceBatches(images, batches(len(images), batch_size), device):
            x, _ = inputs(x8.float().div_(255.0), train=False, strip_prior=strip_prior)
            with rt.autocast():
                logits = fwd(rt.inputs(x))
            out.append(torch.softmax(logits.float(), dim=1))
    finally:
        if deploy is not None:
            model.deploy_mode = deploy
    if not out:
        return np.zeros((0, len(inputs.cfg.class_set)), np.float32)
    return torch.cat(out).cpu().numpy()


def split_metrics(df: pd.DataFrame, classes: list[int], prefix: str, *,
                  names: Sequence[str] = CLASSES, cv2024: bool = False) -> dict[str, float]:
    """``<prefix>/*`` metrics of a predictions table: macro-AUC over ``classes`` (those with
    positives in the split), per-class AUC named by ``names`` (the class set in index order),
    accuracy, macro-F1; per source (a ``source`` column) ``<prefix>/source/<SRC>/macro_auc``
    over the classes with positives and negatives there; with ``cv2024`` the Capsule Vision
    2024 challenge's metrics (:func:`pipi.stats.cv2024.cv2024_metrics`)."""
    y = df["label"].to_numpy()
    probs = df[list(prob_columns_of(df))].to_numpy(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a class absent from a smoke-sized split is NaN
        per_class = per_class_auc(y, probs, classes=classes)
        out = {f"{prefix}/macro_auc": macro_auc(y, probs, classes=classes)}
    for k, auc in zip(classes, per_class):
        if np.isfinite(auc):
            out[f"{prefix}/auc/{metric_key(names[k])}"] = float(auc)
    out[f"{prefix}/accuracy"] = float((probs.argmax(1) == y).mean())
    # macro-F1 of the argmax over the same classes (the published code's selection metric)
    import sklearn.metrics   # 1.2 s to import: when the metrics are computed, not before

    out[f"{prefix}/macro_f1"] = float(sklearn.metrics.f1_score(
        y, probs.argmax(1), labels=classes, average="macro", zero_division=0))
    if "source" in df and len(df):
        out.update(source_metrics(df, y, probs, prefix))
    if cv2024 and len(df):
        out.update(cv2024_metrics(y, probs, names).metrics(prefix))
    return out


def source_metrics(df: pd.DataFrame, y: np.ndarray, probs: np.ndarray,
                   prefix: str) -> dict[str, float]:
    """Per source: ``<prefix>/source/<SRC>/macro_auc`` (over the classes with positives and
    negatives among that source's frames; NaN left out) and ``.../n_frames``."""
    out = {}
    src = df["source"].astype(str).to_numpy()
    if not any(src):   # a dataset without sources: the split's own numbers say it all
        return out
    for name in sorted(set(src)):
        rows = src == name
        present = [int(k) for k in np.unique(y[rows]) if 0 < int((y[rows] == k).sum()) < rows.sum()]
        key = f"{prefix}/source/{metric_key(name or UNKNOWN_SOURCE)}"
        out[f"{key}/n_frames"] = float(rows.sum())
        if present:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[f"{key}/macro_auc"] = macro_auc(y[rows], probs[rows], classes=present)
    return out


def final_metrics(df: pd.DataFrame, classes: list[int], prefix: str, cfg: TrainConfig,
                  manifest: dict | None) -> dict[str, float]:
    """A run's reported ``<prefix>/*`` metrics: :func:`split_metrics` with the class names of
    ``cfg`` and, on data staged from the Capsule Vision layout, the challenge's metrics."""
    one_source = len((manifest or {}).get("sources") or ()) == 1   # the split's own numbers
    return split_metrics(df.drop(columns="source") if one_source and "source" in df else df,
                         classes, prefix, names=cfg.class_set.names,
                         cv2024=is_capsule_vision(manifest))


def fit_metrics(preds: dict[str, pd.DataFrame], classes: list[int], val_classes: list[int],
                cfg: TrainConfig, manifest: dict | None, best_epoch: int) -> dict[str, float]:
    """Every metric a trained cell reports (per-frame and sequence cells alike): the ``val``
    and ``test`` :func:`final_metrics` (per-source and, on Capsule Vision data, the
    challenge's) and ``best_epoch``."""
    return {**final_metrics(preds["val"], val_classes, "val", cfg, manifest),
            **final_metrics(preds["test"], classes, "test", cfg, manifest),
            "best_epoch": best_epoch}


def is_capsule_vision(manifest: dict | None) -> bool:
    """Whether a staged manifest says the data was staged from the Capsule Vision layout
    (its runs then also log the challenge's metrics)."""
    return (manifest or {}).get("layout") == "capsule-vision"


# --------------------------------------------------------------------------- the run
#: The metrics the epoch loop logs once per epoch (step = epoch): the selected epoch's
#: values are there, so the final metrics of a run never log them a second time.
EPOCH_SERIES = ("train/loss", "val/macro_auc", "val/macro_f1", "train/lr")


def fit_epochs(model, *, cfg: TrainConfig, gen: torch.Generator, train_epoch, predict_val,
               val_frames: pd.DataFrame, classes: list[int], tracker=None,
               resume_state: dict | None = None, extra_state: dict | None = None,
               capturable: bool = False) -> dict:
    """The epoch loop shared by every trained cell: AdamW + cosine annealing (or a constant
    rate: ``cfg.lr_schedule``), validation
    macro-AUC after each epoch, early stopping with ``cfg.patience``, best-epoch selection,
    per-epoch metrics and a resumable checkpoint through ``tracker``.

    ``train_epoch(epoch, optimizer) -> mean loss`` runs one epoch; ``predict_val() ->
    probs[N, 14]`` scores ``val_frames``. On return the model holds the best epoch's weights.
    Returns ``{"best": ..., "history": [...], "val_probs": the best epoch's validation
    probabilities}``. ``capturable``: AdamW for a CUDA graph
    (state and learning rate on the model's device; ``graph=on``).
    """
    if capturable:
        dev = next(model.parameters()).device
        optimizer = capturable_adamw(model.parameters(), lr=cfg.lr,
                                     weight_decay=cfg.weight_decay, device=dev)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                                      weight_decay=cfg.weight_decay)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)
                 if cfg.lr_schedule == "cosine"
                 else torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0))
    best = {"score": -math.inf, "epoch": -1, "state": None, "bad_epochs": 0}
    history: list[dict] = []
    start = 0
    if resume_state is not None:
        model.load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        if capturable:
            make_capturable(optimizer, dev)
        scheduler.load_state_dict(resume_state["scheduler"])
        best, history = resume_state["best"], resume_state["history"]
        gen.set_state(resume_state["gen_state"])
        torch.set_rng_state(resume_state["torch_rng"])
        start = resume_state["epoch"] + 1
        log.info("resuming at epoch %d", start)
    for epoch in range(start, cfg.epochs):
        if best["bad_epochs"] >= cfg.patience:
            break
        lr = float(optimizer.param_groups[0]["lr"])  # a device tensor when capturable
        loss = train_epoch(epoch, optimizer)
        scheduler.step()
        vprobs = predict_val()
        vm = split_metrics(predictions_frame(val_frames, vprobs), classes, "val")
        vauc = vm["val/macro_auc"]
        score = vm[f"val/{cfg.select_metric}"]  # what selects the checkpoint and stops early
        history.append({"epoch": epoch, "loss": loss, "val_macro_auc": vauc,
                        "val_macro_f1": vm["val/macro_f1"], "lr": lr})
        log.info("epoch %d  loss %.4f  val macro-AUC %.4f  val macro-F1 %.4f  lr %.2e",
                 epoch, loss, vauc, vm["val/macro_f1"], lr)
        if score > best["score"] or best["state"] is None:
            best = {"score": score, "epoch": epoch, "bad_epochs": 0,
                    "state": copy.deepcopy(model.state_dict()),
                    "val_probs": torch.as_tensor(np.asarray(vprobs, np.float32))}
        else:
            best["bad_epochs"] += 1
        if tracker is not None:
            tracker.log_metrics(dict(zip(EPOCH_SERIES, (loss, vauc, vm["val/macro_f1"], lr))),
                                step=epoch, model=model)
            # tensors and plain data only: resume reads it with weights_only=True
            tracker.log_checkpoint(plain_state({
                "config": cfg.to_dict(), "epoch": epoch, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "best": best, "history": history, "gen_state": gen.get_state(),
                "torch_rng": torch.get_rng_state(), **(extra_state or {})}))
    model.load_state_dict(best["state"])
    # the best epoch's validation scores are the run's val predictions (no second val pass);
    # a checkpoint from before they were kept has none (None: the caller scores val again)
    val_probs = best.get("val_probs")
    return {"best": best, "history": history,
            "val_probs": None if val_probs is None else np.asarray(val_probs, np.float32)}


def run_frame_cell(cfg: TrainConfig, *, data: Path, resume_state: dict | None = None,
                   tracker=None, device: str | None = None, progress: bool = True,
                   cache_dir: Path | None = None, runtime: Runtime | None = None,
                   staged: tuple[pd.DataFrame, dict] | None = None) -> FitResult:
    """Train and evaluate a per-frame cell: its model, predictions and metrics.

    ``staged``: the (frames, manifest) of ``data`` when the caller has loaded them already
    (the ``train`` workflow's request), else they are read here.

    ``tracker`` (``pipi.tracking`` functions or a test double with ``log_metrics``,
    ``log_checkpoint``) receives per-epoch metrics and the resumable checkpoint. ``runtime``
    (default: ``cfg``'s options resolved here, ``device`` overriding ``cfg.device``) says
    where and in which precision to compute.
    """
    rt = runtime or runtime_of(cfg, device=device)
    dev = rt.device
    frames, manifest = staged if staged is not None else load_staged(data)
    digest = manifest["data_digest"]
    cache = build_cache(data, frames, size=cfg.image_size, digest=digest,
                        cache_dir=cache_dir or pipi_home() / "cache", progress=progress)
    used = scored_split(frames, cfg)  # train_sources / test_sources: rows not used are ""
    split_idx = {s: np.flatnonzero(used == s) for s in ("train", "val", "test")}
    scored = frames.assign(split=used)  # what the split classes are counted on
    # views of the memmap (or rows read a batch at a time), never copies: memory stays flat
    # in the number of frames
    images = {s: split_rows(cache, i) for s, i in split_idx.items()}
    labels = {s: frames["class_index"].to_numpy(np.int64)[i] for s, i in split_idx.items()}
    classes = split_classes(scored, "test")
    val_classes = split_classes(scored, "val")

    gen = seed_everything(cfg.seed, rt)
    model, fwd = prepare_model(build_frame_model(cfg), rt)
    inputs = FrameInputs(cfg, check=False)
    weights = (class_weights(labels["train"], len(cfg.class_set)).to(dev) if cfg.class_weights
               else None)
    if cfg.cell_config.frozen and cfg.probe_recipe == "cached":
        return _run_cached_probe(cfg, model, inputs, cache, scored, manifest, split_idx,
                                 labels, weights, gen=gen, rt=rt, tracker=tracker,
                                 resume_state=resume_state, cache_dir=cache_dir, root=data,
                                 progress=progress)
    scaler = rt.scaler()
    # data_path=device: the uint8 training set copied to the device once for the whole run
    train_images = (ResidentBatches(images["train"], dev, labels=labels["train"])
                    if rt.data_path == "device" else images["train"])
    graphed: dict = {}

    def train_epoch(epoch, optimizer):
        if rt.graph and "step" not in graphed:  # captured once, on the run's optimizer
            graphed["step"] = graphed_step(fwd, optimizer, inputs, weights, cfg, rt)
        return train_one_epoch(model, train_images, labels["train"], inputs, optimizer,
                               weights, cfg=cfg, gen=gen, device=dev, epoch=epoch,
                               progress=progress, runtime=rt, forward=fwd, scaler=scaler,
                               graphed=graphed.get("step"))

    def predict(split):
        return predict_probs(model, images[split], inputs, device=dev, runtime=rt, forward=fwd)

    fit = fit_epochs(model, cfg=cfg, gen=gen, train_epoch=train_epoch,
                     predict_val=lambda: predict("val"),
                     val_frames=frames.iloc[split_idx["val"]], classes=val_classes, tracker=tracker,
                     resume_state=resume_state, capturable=rt.graph)
    best, history = fit["best"], fit["history"]
    preds = {s: predictions_frame(frames.iloc[split_idx[s]],
                                  fit["val_probs"] if s == "val" and fit["val_probs"] is not None
                                  else predict(s))
             for s in ("val", "test")}
    metrics = fit_metrics(preds, classes, val_classes, cfg, manifest, best["epoch"])
    return FitResult(model.cpu().to(memory_format=torch.contiguous_format), preds, metrics,
                     classes, val_classes, history, runtime=rt.params(), frames=frames,
                     manifest=manifest)


def _run_cached_probe(cfg, model, inputs, cache, frames, manifest, split_idx, labels, weights,
                      *, gen, rt, tracker, resume_state, cache_dir, root,
                      progress=False) -> FitResult:
    """The published probe recipe: features of the frozen backbone extracted once (cached on
    disk by digest; the script's own preprocessing, :mod:`pipi.training.probe`), the plain
    linear head trained on them as the scripts train it (``cfg``'s epochs, batch, lr, weight
    decay, class weights, schedule and selection metric; no dropout; best validation epoch)."""
    dev = rt.device
    path = features_path(cfg, manifest["data_digest"], cache_dir)
    if cfg.probe_transform == "frame":
        got = probe_features(model, cache, inputs, device=dev, path=path, fp16=cfg.probe_fp16)
    else:
        got = published_features(model, root, frames, inputs, cfg, device=dev, path=path,
                                 progress=progress)
    feats = torch.from_numpy(got).to(dev)
    f = {s: feats[torch.from_numpy(i)] for s, i in split_idx.items()}
    y = torch.from_numpy(labels["train"]).to(dev)
    classes, val_classes = split_classes(frames, "test"), split_classes(frames, "val")

    def train_epoch(epoch, optimizer):
        model.train()
        perm = torch.randperm(len(y), generator=gen).to(dev)
        steps = range(0, len(y), cfg.batch_size)
        if cfg.max_batches > 0:
            steps = steps[:cfg.max_batches]
        total, n = 0.0, 0
        for i in steps:
            idx = perm[i:i + cfg.batch_size]
            logits = model.head(f["train"][idx])   # the scripts' head: a plain Linear
            loss = weighted_cross_entropy(logits, y[idx], weights)
            value = optimizer_step(loss, optimizer,
                                   where=f"epoch {epoch}, batch {i // cfg.batch_size}")
            total, n = total + value * len(idx), n + len(idx)
        return total / max(n, 1)

    @torch.no_grad()
    def predict(split):
        model.eval()
        return torch.softmax(model.head(f[split]).float(), dim=1).cpu().numpy()

    fit = fit_epochs(model, cfg=cfg, gen=gen, train_epoch=train_epoch,
                     predict_val=lambda: predict("val"),
                     val_frames=frames.iloc[split_idx["val"]], classes=val_classes,
                     tracker=tracker, resume_state=resume_state)
    preds = {s: predictions_frame(frames.iloc[split_idx[s]], predict(s)) for s in ("val", "test")}
    metrics = fit_metrics(preds, classes, val_classes, cfg, manifest, fit["best"]["epoch"])
    return FitResult(model.cpu().to(memory_format=torch.contiguous_format), preds, metrics,
                     classes, val_classes, fit["history"], runtime=rt.params(), frames=frames,
                     manifest=manifest, features=str(path))


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pipi-run-"))
