"""The ``train`` workflow: configuration -> MLflow run -> training -> run contract -> registry.

One run body serves per-frame and sequence cells: resolve the data, start (or resume, or
attach to ``mlflow run``'s) run with the contract's tags, log params, config and dataset,
fit, log metrics and predictions, then the model: a registered pyfunc for every cell
(``pipi.tracking.pyfunc``; sequence cells also keep their checkpoint).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi import tracking
from pipi.classes import CLASSES
from pipi.config import TrainConfig, make_config, recipe_command, resolve_profile, run_params
from pipi.data.cache import build_cache
from pipi.data.kvasir import load_staged
from pipi.errors import ConfigError
from pipi.paths import pipi_home
from pipi.runtime import runtime_of
from pipi.evaluate import load_run_model
from pipi.model_input import encode_png
from pipi.models import NormalAutoencoder
from pipi.sequence import C3_DIR, base_config, fit_sequence
from pipi.sequence_clip import ClipPredictor
from pipi.tracking.pyfunc import (
    MAX_CLIP_FRAMES,
    PARAMS,
    PipiImageClassifier,
    PipiSequenceClassifier,
    preprocess,
)
from pipi.training import FrameInputs, run_frame_cell, tmpdir, write_predictions
from pipi.workflows.stage import resolve_data
from pipi.workflows.streams import build_streams, find_base_run

log = logging.getLogger(__name__)


def registered_name(cfg: TrainConfig) -> str:
    return f"pipi-{cfg.backbone}-{cfg.cell}"


def prepare(*, cell: str, backbone: str, seed: int, profile: str, data: str | None,
            **overrides) -> tuple[TrainConfig, Path]:
    """Resolve the data and ``profile=auto``, then build the config (every option checked)."""
    root = resolve_data(data, preset="tiny" if profile == "smoke" else "demo")
    _, manifest = load_staged(root)
    check_trainable(root, manifest, data)
    profile = resolve_profile(profile, manifest.get("dataset", ""))
    return make_config(cell=cell, backbone=backbone, seed=seed, profile=profile,
                       **overrides), root


def check_trainable(root: Path, manifest: dict, data: str | None) -> None:
    """A staged Galar folder is test data only (zero-shot, every frame in ``test``)."""
    if manifest.get("dataset") == "galar":
        raise ConfigError(f"data={data or root}: {root} is a staged Galar folder, test data "
                          "only (zero-shot); train on a staged Kvasir-Capsule release and "
                          "score Galar with `galar`")


def resume_data(resume: str, data: str | None) -> Path:
    """The staged folder a resumed run continues on: its own (``data_dir``), checked against
    the run's data digest. A ``data`` that is given must hold the same data."""
    run = tracking.get_run(resume)
    digest = run.data.tags.get(tracking.TAG_DATA_DIGEST, "")
    own = run.data.params.get("data_dir", "")
    if data in (None, "", "synthetic") and own:
        path = Path(own)
        if not (path / "manifest.json").is_file():
            raise ConfigError(
                f"resume={resume}: the run was trained on {own}, which is no longer a staged "
                f"folder (no manifest.json); stage the same data again (data digest "
                f"{digest[:12]}) and pass it as data=<folder>")
        root = resolve_data(str(path))
        given = f"its own data folder {own}"
    else:
        root = resolve_data(data, preset="demo")
        given = f"data={data}"
    _, manifest = load_staged(root)
    if digest and manifest["data_digest"] != digest:
        raise ConfigError(
            f"resume={resume}: {given} has data digest {manifest['data_digest'][:12]} but the "
            f"run was trained on data digest {digest[:12]} ({own or 'unknown folder'}); leave "
            "data out to continue on the run's own data, or start a new run")
    return root


def load_resume(resume: str) -> tuple[TrainConfig, dict]:
    """The checkpoint of an interrupted run and the configuration it was started with (the
    run's own: every recipe option passed with ``resume`` is ignored)."""
    run = tracking.get_run(resume)
    if run.info.status == "FINISHED":
        raise ConfigError(
            f"resume={resume}: that run FINISHED; resume continues an interrupted (FAILED, "
            "KILLED or RUNNING) run. To train again, start a new run without resume")
    tracking.claim_for_resume(resume)  # refuses a run that another process still trains
    ckpt = tracking.download_artifact(resume, "checkpoints/last.pt", tmpdir())
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    return TrainConfig.from_dict(state["config"]), state


def resume_config(resume: str) -> TrainConfig:
    """The configuration a run was started with (its ``config.json``), without its checkpoint."""
    path = tracking.download_artifact(resume, "config.json", tmpdir())
    return TrainConfig.from_dict(json.loads(path.read_text()))


def log_results(out: dict, work: Path) -> dict:
    """Log a fitted cell's final metrics, predictions and history; return the summary."""
    m = {k: v for k, v in out["metrics"].items() if isinstance(v, float) and math.isfinite(v)}
    # val/macro_auc is the per-epoch series; the selected epoch's value gets its own name
    m["val/best_macro_auc"] = m.pop("val/macro_auc", float("nan"))
    tracking.log_metrics(m)
    tracking.set_tags({**tracking.class_tags(test=out["classes"], val=out["val_classes"]),
                       "pipi.best_epoch": out["metrics"]["best_epoch"]})
    tracking.log_artifacts(write_predictions(out["predictions"], work / "predictions"),
                           "predictions")
    tracking.log_dict(out["history"], "history.json")
    return {"run_id": tracking.active_run_id(),
            "test_macro_auc": out["metrics"]["test/macro_auc"],
            "val_macro_auc": out["metrics"]["val/macro_auc"],
            "best_epoch": out["metrics"]["best_epoch"], "registered": None}


def train(cfg: TrainConfig, *, data: str | None = None, resume: str | None = None,
          experiment: str | None = None, register: bool = True, progress: bool = True,
          nested: bool = False) -> dict:
    """Run one cell end to end inside an MLflow run and return a summary."""
    resume_state, base_id = None, None
    if resume:
        # the run's own data and recipe: a resumed run never changes what it trains on
        root = resume_data(resume, data)
        saved, resume_state = load_resume(resume)
        if saved != cfg:
            log.warning("resuming run %s with its own configuration, not the one passed", resume)
        cfg = saved
        base_id = tracking.get_run(resume).data.tags.get(tracking.TAG_BASE_RUN)
    else:
        root = resolve_data(data, preset="tiny" if cfg.profile == "smoke" else "demo")
    frames, manifest = load_staged(root)
    check_trainable(root, manifest, data)
    seq = cfg.cell_config.is_sequence
    runtime = runtime_of(cfg)  # a device that is not there fails before the run starts
    tags = tracking.train_tags(cfg, manifest, data=None if data in (None, "", "synthetic")
                               else str(root))
    if resume:  # the recipe the run was started with, not one naming the resolved folder
        tags[tracking.TAG_RECIPE] = tracking.get_run(resume).data.tags.get(
            tracking.TAG_RECIPE, tags[tracking.TAG_RECIPE])
    if resume:  # `mlflow run -P resume=` made a run of its own: say what it did
        wrapper = tracking.tag_project_run(
            {tracking.TAG_ENTRY_POINT: "train", tracking.TAG_RESUMED_RUN: resume},
            note=f"resumed run {resume}: its metrics, predictions and model are there",
            unless=resume)
        if wrapper:
            tags[tracking.TAG_RESUMED_BY] = ",".join(
                x for x in (tracking.get_run(resume).data.tags.get(tracking.TAG_RESUMED_BY),
                            wrapper) if x)
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="train", experiment=experiment, run_id=resume,
                               nested=nested, run_name=f"{cfg.cell}-{cfg.backbone}-s{cfg.seed}",
                               tags=tags) as run:
            if not resume:
                params = {**run_params(cfg), "data_dir": str(root)}
                if seq:
                    params["base_cell"] = cfg.cell_config.base_cell
                tracking.log_params(params)
                tracking.log_dict(cfg.to_dict(), "config.json")
                tracking.log_dataset(frames, source=str(root), name=tags[tracking.TAG_DATASET],
                                     digest=manifest["data_digest"], context="training")
            tracking.log_params(runtime.params())  # on resume: `.resolved` if it moved
            tracker = tracking.RunTracker(work / "ckpt")
            if seq:
                summary = _fit_sequence(cfg, root=root, frames=frames, manifest=manifest,
                                        base_id=base_id, tracker=tracker, work=work,
                                        resume_state=resume_state, register=register,
                                        progress=progress, tags=tags, device=runtime.device)
            else:
                out = run_frame_cell(cfg, data=root, resume_state=resume_state, tracker=tracker,
                                     progress=progress, runtime=runtime)
                summary = log_results(out, work)
                summary.update(_log_model(cfg, out["model"], work, summary["test_macro_auc"],
                                          register, tags))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary


# --------------------------------------------------------------------------- sequence cells
def ensure_base_run(cfg: TrainConfig, *, data: Path, digest: str, register: bool,
                    progress: bool) -> tuple[str, bool]:
    """(run id, trained now): the base per-frame run, trained nested when none exists."""
    rid = find_base_run(cfg, digest)
    if rid is not None:
        log.info("cell %s builds on the FINISHED %s run %s", cfg.cell,
                 cfg.cell_config.base_cell, rid)
        return rid, False
    bcfg = base_config(cfg)
    log.info("no FINISHED %s run for backbone %s, seed %d: training it first",
             bcfg.cell, bcfg.backbone, bcfg.seed)
    summary = train(bcfg, data=str(data), register=register, progress=progress,
                    nested=tracking.active_experiment_id() is not None)
    return summary["run_id"], True


def _fit_sequence(cfg: TrainConfig, *, root: Path, frames: pd.DataFrame, manifest: dict,
                  base_id: str | None, tracker, work: Path, resume_state: dict | None,
                  register: bool, progress: bool, tags: dict, device: torch.device) -> dict:
    """The sequence part of a ``train`` run: base run, streams, head; checkpoint and the
    registered pyfunc (base backbone + head + C3 autoencoder)."""
    digest = manifest["data_digest"]
    if base_id is None:
        base_id, _ = ensure_base_run(cfg, data=root, digest=digest, register=register,
                                     progress=progress)
    base_code = tracking.get_run(base_id).data.tags.get(tracking.TAG_CODE_VERSION, "")
    tracking.set_tags({tracking.TAG_BASE_RUN: base_id, "pipi.base_code_version": base_code})
    dev = device
    cache_dir = pipi_home() / "cache"
    images = build_cache(root, frames, size=cfg.image_size, digest=digest, cache_dir=cache_dir,
                         progress=progress)
    streams, sources = build_streams(cfg, base_run_id=base_id, frames=frames, manifest=manifest,
                                     images=images, cache_dir=cache_dir, device=dev,
                                     progress=progress)
    tracking.set_tags(sources)
    out = fit_sequence(cfg, frames, streams, tracker=tracker, resume_state=resume_state,
                       device=dev, progress=progress)
    summary = log_results(out, work)
    torch.save({"model": out["model"].state_dict(), "spec": out["model"].spec,
                "config": cfg.to_dict(), **sources}, work / "best_state.pt")
    tracking.log_artifact(work / "best_state.pt", "checkpoints")
    summary.update(base_run_id=base_id)
    summary.update(_log_sequence_model(cfg, out["model"], streams.norms, sources, work,
                                       summary["test_macro_auc"], register, tags))
    return summary


def _log_sequence_model(cfg: TrainConfig, head, norms: dict, sources: dict, work: Path,
                        test_auc: float, register: bool, tags: dict) -> dict:
    """Log (and register) the sequence pyfunc: base backbone + head (+ C3 autoencoder)."""
    base_model, base_cfg = load_run_model(sources[tracking.TAG_BASE_RUN])
    ae_state = None
    if tracking.TAG_C3_RUN in sources:
        got = tracking.download_artifact(sources[tracking.TAG_C3_RUN],
                                         f"{C3_DIR}/autoencoder.pt", work / "c3")
        ae_state = torch.load(got, map_location="cpu", weights_only=True)
    bundle = {"config": cfg.to_dict(), "base_config": base_cfg.to_dict(),
              "base_state": base_model.state_dict(), "spec": head.spec,
              "head_state": head.state_dict(), "autoencoder_state": ae_state,
              "norms": {k: (np.asarray(m), np.asarray(s)) for k, (m, s) in norms.items()},
              "sources": dict(sources)}
    torch.save(bundle, work / "sequence_model.pt")
    cpath = work / "model_config.json"
    cpath.write_text(json.dumps(cfg.to_dict(), indent=2))
    clip = _example_images(cfg, n=2)
    predictor = ClipPredictor(cfg=cfg, base_cfg=base_cfg, base=base_model, head=head.cpu(),
                              norms=bundle["norms"], autoencoder=_autoencoder(ae_state))
    out_example = predictor.predict([clip])
    example = pd.DataFrame({"image": [encode_png(im) for im in clip]})   # one clip, 2 frames
    return _log_and_register(cfg, PipiSequenceClassifier(), {"bundle": str(work / "sequence_model.pt"),
                             "config": str(cpath)}, example, out_example, test_auc, register,
                             tags, params=None,
                             extra={"base_run_id": sources[tracking.TAG_BASE_RUN],
                                    "window": cfg.window, "max_clip_frames": MAX_CLIP_FRAMES})


def _autoencoder(state):
    if state is None:
        return None
    ae = NormalAutoencoder()
    ae.load_state_dict(state)
    return ae.eval()


def _example_images(cfg: TrainConfig, *, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return list(rng.integers(0, 256, (n, cfg.image_size, cfg.image_size, 3), dtype=np.uint8))


# --------------------------------------------------------------------------- the model
def _log_model(cfg: TrainConfig, model, work: Path, test_auc: float, register: bool,
               tags: dict) -> dict:
    wpath = work / "model_state.pt"
    torch.save(model.state_dict(), wpath)
    cpath = work / "model_config.json"
    cpath.write_text(json.dumps(cfg.to_dict(), indent=2))
    images = _example_images(cfg, n=2)
    # the output example is computed by the real model, so the signature is exact
    model.eval()
    with torch.no_grad():
        if hasattr(model, "deploy_mode"):
            model.deploy_mode = True
        x, _ = FrameInputs(cfg)(preprocess(images, cfg.image_size), train=False)
        probs = torch.softmax(model(x), 1).numpy().astype(np.float64)
    out_example = pd.DataFrame(probs, columns=list(CLASSES))
    out_example["predicted_class"] = [CLASSES[i] for i in probs.argmax(1)]
    # the serving example shows the base64 form a client sends without numpy (PNG: lossless)
    example = pd.DataFrame({"image": [encode_png(im) for im in images]})
    return _log_and_register(cfg, PipiImageClassifier(),
                             {"weights": str(wpath), "config": str(cpath)}, example,
                             out_example, test_auc, register, tags, params=PARAMS, extra={})


def _log_and_register(cfg: TrainConfig, python_model, artifacts: dict, example, out_example,
                      test_auc: float, register: bool, tags: dict, *, params, extra: dict
                      ) -> dict:
    """Log the pyfunc; register it as ``pipi-<backbone>-<cell>`` with version tags and the
    ``candidate`` alias."""
    run_id = tracking.active_run_id()
    name = registered_name(cfg) if register else None
    info = tracking.log_pyfunc_model(
        python_model=python_model, artifacts=artifacts, input_example=example,
        registered_model_name=name, signature_output=out_example, params=params,
    )
    result = {"model_uri": info.model_uri, "registered": None}
    if name:
        version = tracking.registered_version_of(info, name)
        tracking.tag_model_version(
            name, version,
            {"run_id": run_id, "test_macro_auc": f"{test_auc:.6f}",
             "recipe": tags.get(tracking.TAG_RECIPE, recipe_command(cfg)),
             "recipe_hash": tags.get(tracking.TAG_RECIPE_HASH, ""),
             "data_digest": tags.get(tracking.TAG_DATA_DIGEST, ""),
             "git_commit": tracking.code_version(), "cell": cfg.cell,
             "backbone": cfg.backbone, "seed": cfg.seed, **extra},
            alias="candidate",
        )
        result["registered"] = f"models:/{name}/{version}"
        result["registered_name"] = name
        result["registered_version"] = version
    return result
