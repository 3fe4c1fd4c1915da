"""The MLflow side of sequence cells: base runs, stored embeddings, the C3 autoencoder run.

A sequence cell builds on a FINISHED per-frame run of its base cell (same recipe and data;
``find_base_run``), whose embeddings are computed once and stored as an artifact of that
run, and (C3) on a Normal-class autoencoder trained once per (seed, data, size, recipe) as
its own run (entry point tag ``c3_autoencoder``).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi import tracking
from pipi.classes import class_index
from pipi.config import TrainConfig, recipe_key
from pipi.errors import ConfigError, PipiError
from pipi.runs.evaluate import load_run_model
from pipi.training.frames import FrameInputs, tmpdir
from pipi.training.sequence import (
    C3_DIR,
    EMBEDDINGS_DIR,
    NORMAL_CLASS,
    AutoencoderRecipe,
    Streams,
    base_config,
    build_windows,
    c1_cached,
    c1_stream,
    frame_embeddings,
    residual_matrix,
    store_array,
    train_autoencoder,
    zscore,
    zscore_stats,
)

log = logging.getLogger(__name__)
#: format of the cached per-frame embeddings' metadata
EMBEDDINGS_FORMAT = "pipi.embeddings"


def ensure_autoencoder(cfg: TrainConfig, *, frames: pd.DataFrame, images: np.ndarray,
                       manifest: dict, cache_dir: Path, device: torch.device,
                       progress: bool = False, parent: tracking.Run | None = None
                       ) -> tuple[str, np.ndarray]:
    """(run id, raw C3 features ``(N, 192)``): reuse the FINISHED AE run, or train one.

    The AE run is keyed by ``pipi.config_hash`` over the recipe, the data digest and the code
    version; a new one is started nested under ``parent`` (the run that needs it), if any.
    """
    digest = manifest["data_digest"]
    recipe = AutoencoderRecipe.of(cfg)
    key = tracking.config_hash({"c3_autoencoder": asdict(recipe), "data_digest": digest,
                                "code": tracking.code_version()})
    found = tracking.find_finished_run(key, **{tracking.tags.TAG_ENTRY_POINT: "c3_autoencoder"})
    if found is not None:
        rid = found.run_id
        local = Path(cache_dir) / "c3" / f"{rid}.npy"
        if not local.is_file():
            with tracking.downloaded(rid, f"{C3_DIR}/residuals.npy", prefix="pipi-c3-") as got:
                local.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(got, local)
        res = np.load(local)
        if res.shape == (len(frames), 192):
            log.info("C3: reusing autoencoder run %s", rid)
            return rid, res
        log.warning("C3 run %s has residuals of shape %s; training a new one", rid, res.shape)

    normal = np.flatnonzero((frames["split"].to_numpy() == "train")
                            & (frames["class_index"].to_numpy() == class_index(NORMAL_CLASS)))
    tags = {tracking.tags.TAG_CONFIG_HASH: key, tracking.tags.TAG_SEED: str(cfg.seed),
            tracking.tags.TAG_DATA_DIGEST: digest,
            tracking.tags.TAG_DATASET: manifest.get("dataset", ""),
            tracking.tags.TAG_IMAGE_SIZE: cfg.image_size}
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="c3_autoencoder", nested=parent is not None, tags=tags,
                               run_name=f"c3-autoencoder-s{cfg.seed}-{cfg.image_size}px") as run:
            run.log_params({**asdict(recipe), "normal_train_frames": len(normal)})
            ae = train_autoencoder(
                images, normal, recipe, device=device,
                on_epoch=lambda e, v: run.log_metrics({"c3/train_l1": v}, step=e))
            res = residual_matrix(ae, images, device=device)
            torch.save(ae.state_dict(), work / "autoencoder.pt")
            np.save(work / "residuals.npy", res)
            run.log_artifact(work / "autoencoder.pt", C3_DIR)
            run.log_artifact(work / "residuals.npy", C3_DIR)
            rid = run.run_id
        local = Path(cache_dir) / "c3" / f"{rid}.npy"
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work / "residuals.npy", local)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rid, res


def find_base_run(cfg: TrainConfig, digest: str) -> str | None:
    """Run id of a FINISHED per-frame run this sequence configuration can build on.

    The exact base configuration (same ``pipi.config_hash``: recipe, data and code version)
    wins; otherwise the newest FINISHED ``train`` run with the same recipe and data
    (``pipi.recipe_hash``), trained by another code version. Runs of another recipe (other
    epochs, lr, patience, profile, select_metric, prior, ...) are never used.
    """
    bcfg = base_config(cfg)
    exact = tracking.find_finished_run(tracking.config_hash(tracking.config_key(bcfg, digest)),
                                       **{tracking.tags.TAG_ENTRY_POINT: "train"})
    if exact is not None:
        return exact.run_id
    same_recipe = tracking.find_finished_runs({
        tracking.tags.TAG_ENTRY_POINT: "train",
        tracking.tags.TAG_RECIPE_HASH: tracking.config_hash(recipe_key(bcfg, digest)),
    }, max_results=1)
    return same_recipe[0].run_id if same_recipe else None


def base_embeddings(run_id: str, *, frames: pd.DataFrame, images: np.ndarray, digest: str,
                    image_size: int, cache_dir: Path, device: torch.device) -> np.ndarray:
    """Embeddings of every staged row under the base run's model, computed once.

    Looked up in the local cache, then in the run's ``embeddings/`` artifact; else computed
    from the run's model and logged to that run.
    """
    local = Path(cache_dir) / "embeddings" / f"{run_id}.npy"
    meta = {"data_digest": digest, "rows": len(frames), "image_size": image_size,
            "format": EMBEDDINGS_FORMAT, "version": 1}
    if local.is_file():
        emb = np.load(local)
        if len(emb) == len(frames):
            return emb
    try:
        with tracking.downloaded(run_id, EMBEDDINGS_DIR, prefix="pipi-embeddings-") as folder:
            got = json.loads((folder / "meta.json").read_text())
            emb = (np.load(folder / "embeddings.npy")
                   if all(got.get(k) == v for k, v in meta.items()) else None)
        if emb is not None:
            store_array(local, emb)
            log.info("embeddings of run %s reused from its artifact", run_id)
            return emb
    except (PipiError, OSError, ValueError, json.JSONDecodeError):
        pass
    model, mcfg = load_run_model(run_id)
    if mcfg.image_size != image_size:
        raise ConfigError(f"base run {run_id} trained at {mcfg.image_size}px, "
                          f"this run needs {image_size}px")
    emb = frame_embeddings(model, images, FrameInputs(mcfg), device=device)
    work = tmpdir()
    try:
        np.save(work / "embeddings.npy", emb)
        (work / "meta.json").write_text(json.dumps({**meta, "dim": int(emb.shape[1])}))
        tracking.log_artifact_to_run(run_id, work / "embeddings.npy", EMBEDDINGS_DIR)
        tracking.log_artifact_to_run(run_id, work / "meta.json", EMBEDDINGS_DIR)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    store_array(local, emb)
    return emb


def build_streams(cfg: TrainConfig, *, base_run_id: str, frames: pd.DataFrame, manifest: dict,
                  images: np.ndarray, cache_dir: Path, device: torch.device,
                  progress: bool = False, parent: tracking.Run | None = None
                  ) -> tuple[Streams, dict]:
    """All streams of the cell, plus the ids of the runs they came from (a run trained for
    them is nested under ``parent``)."""
    cell = cfg.cell_config
    digest = manifest["data_digest"]
    train_rows = frames["split"].to_numpy() == "train"
    emb = base_embeddings(base_run_id, frames=frames, images=images, digest=digest,
                          image_size=cfg.image_size, cache_dir=cache_dir, device=device)
    streams = Streams(embeddings=zscore(emb, emb[train_rows]),
                      windows=build_windows(frames, window=cfg.window),
                      norms={"emb": zscore_stats(emb[train_rows])})
    sources = {tracking.tags.TAG_BASE_RUN: base_run_id}
    if cell.c1:
        streams.c1 = c1_stream(frames, images, cfg, cache_dir=cache_dir, digest=digest,
                               device=device)
        if cell.c1 != "c8_patient":
            raw = c1_cached(images, cfg, cache_dir=cache_dir, digest=digest, device=device)
            streams.norms["c1"] = zscore_stats(raw[train_rows])
    if cell.c3:
        rid, res = ensure_autoencoder(cfg, frames=frames, images=images, manifest=manifest,
                                      cache_dir=cache_dir, device=device, progress=progress,
                                      parent=parent)
        streams.c3 = zscore(res, res[train_rows])
        streams.norms["c3"] = zscore_stats(res[train_rows])
        sources[tracking.tags.TAG_C3_RUN] = rid
    return streams, sources
