"""Training a cell, as a service of the library: configuration -> MLflow run -> training ->
run contract -> registry. ``pipi train`` (the MLproject ``train`` entry point), ``ablate``'s
children, ``calibrate``'s trials (mode=train) and a sequence cell's base all call it
(issue 39: no workflow calls another).

One request (``TrainRequest``: config, staged data, runtime and prior resolved once, by the
CLI or by :func:`request`), one run body for per-frame and sequence cells: start (or resume, or
attach to ``mlflow run``'s) run with the contract's tags, log params, config and dataset,
fit, log metrics and predictions, then the model: a registered pyfunc for every cell
(models from code: ``pipi/tracking/pyfunc.py``; sequence cells also keep their checkpoint).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipi import tracking
from pipi.classes import class_set_of
from pipi.config import (
    TrainConfig,
    make_config,
    recipe_command,
    resolve_profile,
    run_params,
    synthetic_preset,
    train_params,
)
from pipi.data.cache import build_cache
from pipi.errors import ConfigError
from pipi.models import NormalAutoencoder
from pipi.models.backbones import ARCHS, check_weights, imagenet_weights
from pipi.paths import pipi_home
from pipi.report.descriptions import model_card, run_description, version_description
from pipi.report.run_figures import cell_prior_figure, first_per_class, prediction_figures
from pipi.runs.checks import check_base_run, check_sources, check_trainable
from pipi.runs.data import StagedData, data_short_name, is_synthetic, load_data
from pipi.runs.evaluate import load_run_model
from pipi.runs.onnx_file import check_onnx, keep_onnx
from pipi.runs.prior_params import CalibratedPrior, check_prior_params, resolve_prior
from pipi.runs.streams import build_streams, find_base_run
from pipi.runtime import Runtime, keep_freed_memory, runtime_of
from pipi.serving.model_input import encode_png
from pipi.serving.predictors import MAX_CLIP_FRAMES
from pipi.serving.sequence_clip import ClipPredictor
from pipi.tracking.logged_model import (
    example_images,
    log_and_register,
    log_frame_model,
    registered_name,
)
from pipi.training.checkpoint import read_checkpoint
from pipi.training.frames import (
    EPOCH_SERIES,
    run_frame_cell,
    tmpdir,
    write_predictions,
)
from pipi.training.result import FitResult
from pipi.training.sequence import C3_DIR, base_config, fit_sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRequest:
    """One ``train`` request, resolved once: the configuration, the staged data (index
    loaded), the runtime and, on resume, the run (read from the server once), its own
    checkpoint and base run. The CLI builds it with :func:`request_from_options`, a library
    caller with :func:`request`; :func:`run` trains it as it is."""

    cfg: TrainConfig
    staged: StagedData
    runtime: Runtime
    data: str | None = None          # the ``data`` option as given (None: the default)
    resumed: tracking.RunRecord | None = field(default=None, repr=False, compare=False)
    resume_state: dict | None = field(default=None, repr=False, compare=False)
    base_run_id: str | None = None   # a resumed sequence run's base run
    tags: Mapping[str, str] = field(default_factory=dict)  # e.g. where the prior came from
    # the launcher's options as requested (tracking.launch_params), logged before the resolved
    # params: `pipi train` then logs what `mlflow run -e train` logs for the same request
    options: Mapping[str, str] = field(default_factory=dict)
    # the registered models' prefix ("": the one in use, tracking.model_prefix); a resume
    # takes its run's
    model_prefix: str = ""

    @property
    def resume(self) -> str | None:
        """The id of the run this request continues (None: a new run)."""
        return self.resumed.run_id if self.resumed is not None else None


def request(cfg: TrainConfig | None, *, data: str | None = None, resume: str | None = None,
            prior: CalibratedPrior | None = None) -> TrainRequest:
    """The request of a built configuration: its data resolved and loaded, its runtime
    resolved (a device that is not there fails here, before any run starts). ``resume``
    continues that run on its own data and recipe (``cfg`` is then ignored)."""
    if resume:
        resumed = tracking.get_run(resume)   # the one read of the resumed run
        prefix = resumed.params.get("model_prefix", "")
        if prefix and prefix != tracking.model_prefix():   # it registers under its own names
            log.info("resuming run %s with its model prefix %s", resume, prefix)
        staged = resume_data(resumed, data)
        saved, state = load_resume(resumed)
        if cfg is not None and saved != cfg:
            log.warning("resuming run %s with its own configuration, not the one passed", resume)
        return TrainRequest(saved, staged, runtime_of(saved), data=data, resumed=resumed,
                            resume_state=state, base_run_id=resumed.base_run_id or None,
                            model_prefix=prefix)
    if prior is not None:
        cfg = prior.apply(cfg)
    staged = load_data(data, preset=synthetic_preset(cfg.profile))
    check_trainable(staged, data)
    check_sources(cfg, staged)
    return TrainRequest(cfg.with_classes(class_set_of(staged.manifest)), staged,
                        runtime_of(cfg), data=data,
                        tags=dict(prior.tags) if prior is not None else {})


def request_from_options(*, cell: str, backbone: str, seed: int, profile: str,
                         data: str | None, weights: str, prior_params: str = "",
                         resume: str | None = None, connect: Callable[[], object] | None = None,
                         base_run: str | None = None, **overrides) -> TrainRequest:
    """The request of ``pipi train`` / ``mlflow run . -e train``, every option checked once.

    The configuration is built once, after ``profile=auto`` is resolved (from the data: a
    staged folder's dataset, or the synthetic data) and before anything is staged;
    ``connect`` (the CLI's connection to the tracking server) is called once the options are
    checked, before a calibrate run is read or the synthetic data staged. ``prior_params``
    sets alpha and lambda_eff (lambda_eff at the resolved image size); ``resume`` continues
    a run on its own recipe and data (the recipe options are then not used); ``base_run``
    names a sequence cell's base run (:func:`check_base_run`)."""
    if resume:
        if base_run:
            raise ConfigError(f"base_run={base_run}: a resumed run keeps its own base run; "
                              "pass resume alone")
        if connect is not None:
            connect()
        return request(None, data=data, resume=resume)
    synthetic = is_synthetic(data)
    # profile=auto: a staged folder's dataset decides it, so that folder is read first;
    # otherwise every option (the device included) is checked before any data is read
    staged = load_data(data) if profile == "auto" and not synthetic else None
    profile = resolve_profile(profile, staged.manifest.get("dataset", "") if staged
                              else "synthetic")
    cfg = make_config(cell=cell, backbone=backbone, seed=seed, profile=profile,
                      weights=weights, **overrides)
    check_weights(weights)
    check_prior_params(prior_params, overrides)
    cc = cfg.cell_config
    if prior_params and not cc.takes_prior_params:
        raise ConfigError(f"prior_params={prior_params}: cell {cell} uses no optical prior "
                          "(RGB only); prior_params applies to pi, pblood_only, phi_only, "
                          "distill and the sequence cells built on them")
    runtime = runtime_of(cfg)  # a device that is not there fails before anything is read
    if staged is None and not synthetic:
        staged = load_data(data)
    if staged is not None:
        check_trainable(staged, data)
    if connect is not None:
        connect()
    prior = resolve_prior(prior_params) if prior_params else None
    if prior is not None:  # lambda_eff scales to the resolved image size
        cfg = prior.apply(cfg)
    if staged is None:
        staged = load_data(data, preset=synthetic_preset(profile))
        check_trainable(staged, data)
    cfg = cfg.with_classes(class_set_of(staged.manifest))  # the head predicts the data's classes
    check_sources(cfg, staged)
    return TrainRequest(cfg, staged, runtime, data=data,
                        tags=dict(prior.tags) if prior is not None else {},
                        base_run_id=check_base_run(base_run, cfg, staged) if base_run else None)


def refuse_finished(run: tracking.RunRecord) -> None:
    """Resume continues an interrupted run; a FINISHED one is refused before anything else."""
    if run.finished:
        raise ConfigError(
            f"resume={run.run_id}: that run FINISHED; resume continues an interrupted (FAILED, "
            "KILLED or RUNNING) run. To train again, start a new run without resume")


def resume_data(run: tracking.RunRecord, data: str | None) -> StagedData:
    """The staged folder a resumed run continues on: its own (``data_dir``), checked against
    the run's data digest. A ``data`` that is given must hold the same data."""
    resume = run.run_id
    refuse_finished(run)
    digest, own = run.data_digest, run.data_dir
    if data in (None, "", "synthetic") and own:
        path = Path(own)
        if not (path / "manifest.json").is_file():
            raise ConfigError(
                f"resume={resume}: the run was trained on {own}, which is no longer a staged "
                f"folder (no manifest.json); stage the same data again (data digest "
                f"{digest[:12]}) and pass it as data=<folder>")
        staged = load_data(str(path))
        given = f"its own data folder {own}"
    else:
        staged = load_data(data, preset=synthetic_preset(run.resolved_param("profile")))
        given = f"data={data}"
    if digest and staged.digest != digest:
        raise ConfigError(
            f"resume={resume}: {given} has data digest {staged.digest[:12]} but the "
            f"run was trained on data digest {digest[:12]} ({own or 'unknown folder'}); leave "
            "data out to continue on the run's own data, or start a new run")
    check_trainable(staged, data)
    return staged


def load_resume(run: tracking.RunRecord) -> tuple[TrainConfig, dict]:
    """The checkpoint of an interrupted run and the configuration it was started with (the
    run's own: every recipe option passed with ``resume`` is ignored)."""
    resume = run.run_id
    refuse_finished(run)
    tracking.claim_for_resume(resume)  # refuses a run that another process still trains
    try:
        # read into memory, then the downloaded copy goes (one checkpoint per resume used to
        # stay in the temp folder: 60-180 MB each)
        with tracking.downloaded(resume, "checkpoints/last.pt", prefix="pipi-resume-") as ckpt:
            state = read_checkpoint(ckpt, what=f"resume={resume}: checkpoints/last.pt")
        return TrainConfig.from_dict(state["config"]), state
    except BaseException:  # this process will not train it: no heartbeat of a dead resumer
        tracking.release_claim(resume)
        raise


@dataclass(frozen=True)
class TrainSummary:
    """What a ``train`` run did: its id, the selected epoch's scores and the logged model
    (``registered``: ``models:/<name>/<version>`` when registered, else None)."""

    run_id: str
    test_macro_auc: float
    val_macro_auc: float
    best_epoch: int
    test_classes: list[int]
    model_uri: str | None = None
    model_id: str | None = None
    registered: str | None = None
    registered_name: str | None = None
    registered_version: str | None = None
    base_run_id: str | None = None       # a sequence cell: the per-frame run it builds on


#: The fields of :class:`TrainSummary` the logged model fills.
_MODEL_FIELDS = ("model_uri", "model_id", "registered", "registered_name", "registered_version")


def log_results(run: tracking.Run, out: FitResult, work: Path, classes: Sequence[str]
                ) -> tuple[TrainSummary, dict[str, float]]:
    """Log to ``run`` a fitted cell's final metrics (all but the test split's, which are logged with the
    model: the second value returned), predictions and history; return the summary."""
    m = {k: v for k, v in out.metrics.items() if isinstance(v, float) and math.isfinite(v)}
    # val/macro_auc is the per-epoch series; the selected epoch's value gets its own name
    m["val/best_macro_auc"] = m.pop("val/macro_auc", float("nan"))
    test = {k: v for k, v in m.items() if k.startswith("test/")}
    # at the selected epoch's step (the model is logged there and links them); the per-epoch
    # series already holds that epoch's val/macro_f1: not logged a second time
    run.log_metrics({k: v for k, v in m.items() if k not in test and k not in EPOCH_SERIES},
                    step=out.best_epoch)
    run.set_tags({**tracking.class_tags(test=out.classes, val=out.val_classes, names=classes),
                  tracking.tags.TAG_BEST_EPOCH: out.best_epoch})
    run.log_artifacts(write_predictions(out.predictions, work / "predictions", classes),
                      "predictions")
    run.log_dict(out.history, "history.json")
    return TrainSummary(run_id=run.run_id,
                        test_macro_auc=out.metrics["test/macro_auc"],
                        val_macro_auc=out.metrics["val/macro_auc"], best_epoch=out.best_epoch,
                        test_classes=list(out.classes)), test


def _with_model(summary: TrainSummary, logged: Mapping) -> TrainSummary:
    """The summary with what logging (and registering) the model returned."""
    return replace(summary, **{k: logged[k] for k in _MODEL_FIELDS if k in logged})


def train(cfg: TrainConfig, *, data: str | None = None, resume: str | None = None,
          experiment: str | None = None, register: bool = True, progress: bool = True,
          nested: bool = False, system_metrics: bool = False,
          epoch_hook: Callable[[int, Mapping[str, float], object], None] | None = None,
          run_id: str | None = None) -> TrainSummary:
    """Run one cell end to end inside an MLflow run and return a summary (:func:`request`,
    then :func:`run`). ``run_id``: a run created for it (a sweep's child, a calibrate
    trial) that the training fills."""
    return run(request(cfg, data=data, resume=resume), experiment=experiment,
               register=register, progress=progress, nested=nested,
               system_metrics=system_metrics, epoch_hook=epoch_hook, run_id=run_id)


def request_form(cfg: TrainConfig, data: str | None, *, onnx: bool = False) -> dict[str, str]:
    """The options that ask for ``cfg`` on ``data``, as ``mlflow run . -e train`` logs them
    (every MLproject parameter; :func:`pipi.tracking.entry_point_params`): what a run that no
    launcher parsed (a sequence cell's base, a sweep's child or a calibrate trial trained in
    this process) logs, so that its params read as a top-level run's do: ``batch_size=auto``
    beside ``batch_size.resolved=16`` (issue 38). Empty for a configuration no command asks
    for (``max_batches`` set outside the smoke profile). ``onnx``: the run keeps an ONNX copy."""
    try:
        request = train_params(cfg, data=None if data in (None, "", "synthetic") else str(data))
    except ConfigError:
        return {}
    if tracking.model_prefix() != tracking.DEFAULT_MODEL_PREFIX:
        request["model_prefix"] = tracking.model_prefix()
    if onnx:
        request["onnx"] = True
    return tracking.entry_point_params("train", request)


def run_name(cfg: TrainConfig, root: Path) -> str:
    """``<cell>-s<seed>-<profile>-<data short name>-<backbone>``: what tells runs apart in
    the UI's name column, what differs most often first (the runs table cuts a name at about
    20 characters: ``pi-efficientnet_b0-s42...`` named two runs)."""
    return f"{cfg.cell}-s{cfg.seed}-{cfg.profile}-{data_short_name(root)}-{cfg.backbone}"


def run(req: TrainRequest, *, experiment: str | None = None, register: bool = True,
        progress: bool = True, nested: bool = False, system_metrics: bool = False,
        epoch_hook: Callable[[int, Mapping[str, float], object], None] | None = None,
        run_id: str | None = None, onnx: bool = False) -> TrainSummary:
    """Train a request inside an MLflow run and return a summary (:func:`_run`), registering
    under the request's model prefix (a resumed run's own); ``onnx``: also keep the model as
    an ONNX graph beside it (:mod:`pipi.runs.onnx_file`)."""
    if onnx:
        check_onnx(req.cfg.cell)
    keep_freed_memory()   # each batch reuses the memory the last one freed (pipi.runtime)
    with tracking.using_model_prefix(req.model_prefix or None):
        return _run(req, experiment=experiment, register=register, progress=progress,
                    nested=nested, system_metrics=system_metrics, epoch_hook=epoch_hook,
                    run_id=run_id, onnx=onnx)


def _run(req: TrainRequest, *, experiment: str | None, register: bool, progress: bool,
         nested: bool, system_metrics: bool,
         epoch_hook: Callable[[int, Mapping[str, float], object], None] | None,
         run_id: str | None, onnx: bool = False) -> TrainSummary:
    """Train a request inside an MLflow run and return a summary.

    ``epoch_hook(epoch, metrics, model)`` is called after each epoch's metrics are logged,
    with the module being trained (an Optuna trial reports ``val/macro_auc``, or scores the
    model on its target fold, there); an exception it raises ends the run.

    The run ends with what the MLflow UI shows (``_show_in_ui``): figures, the run's
    description, the registered model's card and the version's evidence.
    ``system_metrics`` turns on MLflow's system-metrics logging for the run."""
    cfg, resume, data, runtime = req.cfg, req.resume, req.data, req.runtime
    root, frames, manifest = req.staged.root, req.staged.frames, req.staged.manifest
    resume_state, base_id = req.resume_state, req.base_run_id
    seq = cfg.cell_config.is_sequence
    if seq and base_id is None:  # searched once: None means it is trained first, nested
        base_id = find_base_run(cfg, manifest["data_digest"])
        if base_id is not None:
            log.info("cell %s builds on the FINISHED %s run %s", cfg.cell,
                     cfg.cell_config.base_cell, base_id)
    tags = {**tracking.train_tags(cfg, manifest, data=None if data in (None, "", "synthetic")
                                  else str(root), precision=runtime.precision,
                                  env_manager=tracking.launch_env_manager()), **req.tags}
    registered_name(cfg)  # a name MLflow accepts (ConfigError otherwise), before the fit
    if register:  # on an auth server, a model another member registered: say so before the fit
        tracking.check_can_register(registered_name(cfg))
        if seq and base_id is None:
            # the base run this sequence cell will train first registers under its own name
            tracking.check_can_register(registered_name(base_config(cfg)))
    if resume:  # the recipe the run was started with, not one naming the resolved folder
        tags[tracking.tags.TAG_RECIPE] = req.resumed.tags.get(tracking.tags.TAG_RECIPE,
                                                         tags[tracking.tags.TAG_RECIPE])
    if resume:  # `mlflow run -P resume=` made a run of its own: say what it did
        wrapper = tracking.tag_project_run(
            {tracking.tags.TAG_ENTRY_POINT: "train", tracking.tags.TAG_RESUMED_RUN: resume},
            note=f"resumed run {resume}: its metrics, predictions and model are there",
            unless=resume)
        if wrapper:
            tags[tracking.tags.TAG_RESUMED_BY] = ",".join(
                x for x in (req.resumed.tags.get(tracking.tags.TAG_RESUMED_BY), wrapper) if x)
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="train", experiment=experiment,
                               run_id=resume or run_id,
                               nested=nested, run_name=run_name(cfg, root),
                               tags=tags, log_system_metrics=system_metrics) as mrun:
            if not resume:   # the request form first (a nested or in-process run too)
                mrun.log_params(req.options or request_form(cfg, data, onnx=onnx))
                params = {**run_params(cfg), "data_dir": str(root)}
                if seq:
                    params["base_cell"] = cfg.cell_config.base_cell
                if cfg.weights == "imagenet" and cfg.backbone in ARCHS:   # which release
                    params["weights.resolved"] = str(imagenet_weights(cfg.backbone))
                mrun.log_params(params)
                mrun.log_dict(cfg.to_dict(), "config.json")
                # one dataset input per split; the test metrics link to the test one
                tracking.log_split_datasets(mrun, frames, source=str(root),
                                            name=tags[tracking.tags.TAG_DATASET],
                                            digest=manifest["data_digest"])
            test_ds = tracking.split_datasets(tags[tracking.tags.TAG_DATASET],
                                              manifest["data_digest"])["test"]
            mrun.log_params(runtime.params())  # on resume: `.resolved` if it moved
            tracker = tracking.RunTracker(mrun, work / "ckpt", epoch_hook=epoch_hook,
                                          resumed=bool(resume))
            if seq:
                summary, test = _fit_sequence(mrun, cfg, root=root, data=data, frames=frames,
                                              manifest=manifest,
                                              base_id=base_id, tracker=tracker, work=work,
                                              resume_state=resume_state, register=register,
                                              progress=progress, tags=tags,
                                              device=runtime.device, test_ds=test_ds)
            else:
                out = run_frame_cell(cfg, data=root, resume_state=resume_state, tracker=tracker,
                                     progress=progress, runtime=runtime,
                                     staged=(frames, manifest))
                summary, test_metrics = log_results(mrun, out, work, cfg.class_set.names)
                test = out.test_predictions
                summary = _with_model(summary, log_frame_model(
                    mrun, cfg, out.model, work, test_auc=summary.test_macro_auc, register=register,
                    tags=tags, test_metrics=test_metrics, test_dataset=test_ds,
                    description=_version_text(cfg, summary, manifest, tags),
                    step=summary.best_epoch))
                if onnx:
                    keep_onnx(mrun, cfg, model_uri=summary.model_uri, work=work,
                              registered=(summary.registered_name, summary.registered_version)
                              if summary.registered else None)
            _show_in_ui(mrun, cfg, summary, test, root=root, frames=frames, manifest=manifest,
                        tags=tags)
        # FINISHED: resume refuses the run, so its checkpoint has no further use
        tracker.drop_checkpoint()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary


# --------------------------------------------------------------------------- the MLflow UI
def _show_in_ui(run: tracking.Run, cfg: TrainConfig, summary: TrainSummary, test: pd.DataFrame, *,
root: Path,
                frames: pd.DataFrame, manifest: dict, tags: dict) -> None:
    """Figures (``figures/``, from the ``test`` predictions), the run's description, the
    model card and the version's evidence (docs/mlflow-ui.md)."""
    label = f"{cfg.cell} {cfg.backbone} s{cfg.seed}"
    figs = prediction_figures(test, summary.test_classes, label=label,
                              names=cfg.class_set.names)
    cell = cfg.cell_config
    if not cell.is_sequence and (cell.input_channels == 5 or cell.distill):
        figs["prior_examples"] = _prior_figure(cfg, root=root, frames=frames, manifest=manifest,
                                               label=label)
    run.log_figures(figs)
    recipe = tags.get(tracking.tags.TAG_RECIPE, recipe_command(cfg))
    digest = manifest.get("data_digest", "")
    base = summary.base_run_id
    run.set_description(run_description(
        cell=cfg.cell, backbone=cfg.backbone, seed=cfg.seed, recipe=recipe,
        test_macro_auc=summary.test_macro_auc, test_classes=summary.test_classes,
        data_digest=digest, base_run_id=base,
        base_run_url=tracking.run_url(base) if base else None,
        registered=summary.registered, class_names=cfg.class_set.names))
    if summary.registered:  # the version's own description came with its creation
        name = summary.registered_name
        # the serve command names an alias that exists: champion once promoted, else candidate
        alias = next((a for a in ("champion", "candidate")
                      if tracking.registry.alias_version(name, a)), None)
        if alias is None:   # a dependency's first version: no alias to serve yet
            return
        tracking.set_model_description(name, model_card(cell=cfg.cell, backbone=cfg.backbone,
                                                        name=name, alias=alias,
                                                        class_names=cfg.class_set.names))


def _version_text(cfg: TrainConfig, summary: TrainSummary, manifest: dict, tags: dict) -> str:
    """The registered version's description (its evidence), written when it is created."""
    return version_description(
        run_id=summary.run_id, test_macro_auc=summary.test_macro_auc,
        test_classes=summary.test_classes, data_digest=manifest.get("data_digest", ""),
        recipe=tags.get(tracking.tags.TAG_RECIPE, recipe_command(cfg)), seed=cfg.seed,
        class_names=cfg.class_set.names)


def _prior_figure(cfg: TrainConfig, *, root: Path, frames: pd.DataFrame, manifest: dict,
                  label: str) -> bytes:
    """One test frame per class with the prior channels the model received."""
    rows = first_per_class(frames, np.flatnonzero(frames["split"].to_numpy() == "test"))
    images = build_cache(root, frames, size=cfg.image_size, digest=manifest["data_digest"],
                         cache_dir=pipi_home() / "cache", progress=False)
    return cell_prior_figure(cfg, images[rows], list(frames["class"].to_numpy()[rows]),
                             label=label)


# --------------------------------------------------------------------------- sequence cells
def train_base_run(cfg: TrainConfig, *, staged: StagedData, register: bool,
                   progress: bool, data: str | None = None,
                   parent: tracking.Run | None = None) -> str:
    """The run id of the base per-frame run of a sequence cell that has none (``run`` looked
    for it), trained now, on the staged data already loaded (its index not read again):
    nested under ``parent`` (the sequence run that needs it) where one is given. ``data``: the
    sequence run's ``data`` option, which the base run's request form repeats."""
    bcfg = base_config(cfg)
    log.info("no FINISHED %s run for backbone %s, seed %d: training it first",
             bcfg.cell, bcfg.backbone, bcfg.seed)
    needed_by = parent.run_id if parent is not None else ""
    req = TrainRequest(bcfg.with_classes(class_set_of(staged.manifest)), staged,
                       runtime_of(bcfg), data=data if data is not None else str(staged.root),
                       tags={tracking.tags.TAG_NEEDED_BY: needed_by} if needed_by else {})
    summary = run(req, register=register, progress=progress,
                  nested=parent is not None)
    return summary.run_id


def _fit_sequence(run: tracking.Run, cfg: TrainConfig, *, root: Path, data: str | None,
frames: pd.DataFrame,
                  manifest: dict,
                  base_id: str | None, tracker, work: Path, resume_state: dict | None,
                  register: bool, progress: bool, tags: dict, device: torch.device,
                  test_ds=None) -> tuple[TrainSummary, pd.DataFrame]:
    """The sequence part of the ``train`` run ``run``: base run, streams, head; checkpoint and the
    registered pyfunc (base backbone + head + C3 autoencoder). Returns the summary and the
    test predictions."""
    digest = manifest["data_digest"]
    if base_id is None:
        base_id = train_base_run(cfg, staged=StagedData(root, frames, manifest), data=data,
                                 register=register, progress=progress, parent=run)
    base_code = tracking.get_run(base_id).tags.get(tracking.tags.TAG_CODE_VERSION, "")
    run.set_tags({tracking.tags.TAG_BASE_RUN: base_id,
    tracking.tags.TAG_BASE_CODE_VERSION: base_code})
    dev = device
    cache_dir = pipi_home() / "cache"
    images = build_cache(root, frames, size=cfg.image_size, digest=digest, cache_dir=cache_dir,
                         progress=progress)
    streams, sources = build_streams(cfg, base_run_id=base_id, frames=frames, manifest=manifest,
                                     images=images, cache_dir=cache_dir, device=dev,
                                     progress=progress, parent=run)
    run.set_tags(sources)
    out = fit_sequence(cfg, frames, streams, tracker=tracker, resume_state=resume_state,
                       device=dev, progress=progress, manifest=manifest)
    summary, test_metrics = log_results(run, out, work, cfg.class_set.names)
    torch.save({"model": out.model.state_dict(), "spec": out.model.spec,
                "config": cfg.to_dict(), **sources}, work / "best_state.pt")
    run.log_artifact(work / "best_state.pt", "checkpoints")
    summary = replace(summary, base_run_id=base_id)
    summary = _with_model(summary, _log_sequence_model(
        run, cfg, out.model, streams.norms, sources, work, summary.test_macro_auc, register, tags,
        test_metrics=test_metrics, test_ds=test_ds, step=summary.best_epoch,
        description=_version_text(cfg, summary, manifest, tags)))
    return summary, out.test_predictions


def _log_sequence_model(run: tracking.Run, cfg: TrainConfig, head, norms: dict, sources: dict,
work: Path,
                        test_auc: float, register: bool, tags: dict, *, test_metrics=None,
                        test_ds=None, description: str | None = None, step: int = 0) -> dict:
    """Log (and register) the sequence pyfunc: base backbone + head (+ C3 autoencoder)."""
    base_model, base_cfg = load_run_model(sources[tracking.tags.TAG_BASE_RUN])
    ae_state = None
    if tracking.tags.TAG_C3_RUN in sources:
        got = tracking.download_artifact(sources[tracking.tags.TAG_C3_RUN],
                                         f"{C3_DIR}/autoencoder.pt", work / "c3")
        ae_state = torch.load(got, map_location="cpu", weights_only=True)
    bundle = {"config": cfg.to_dict(), "base_config": base_cfg.to_dict(),
              "base_state": base_model.state_dict(), "spec": head.spec,
              "head_state": head.state_dict(), "autoencoder_state": ae_state,
              "norms": {k: (torch.from_numpy(np.asarray(m)), torch.from_numpy(np.asarray(s)))
                        for k, (m, s) in norms.items()},
              "sources": dict(sources)}
    torch.save(bundle, work / "sequence_model.pt")
    cpath = work / "model_config.json"
    cpath.write_text(json.dumps(cfg.to_dict(), indent=2))
    clip = example_images(cfg, n=2)
    predictor = ClipPredictor(cfg=cfg, base_cfg=base_cfg, base=base_model, head=head.cpu(),
                              norms={k: (np.asarray(m), np.asarray(s)) for k, (m,
                              s) in norms.items()},
                              autoencoder=_autoencoder(ae_state))
    out_example = predictor.predict([clip])
    example = pd.DataFrame({"image": [encode_png(im) for im in clip]})   # one clip, 2 frames
    return log_and_register(run, cfg, {"bundle": str(work / "sequence_model.pt"),
                             "config": str(cpath)}, example, out_example, test_auc, register,
                             tags, params=None, work=work, test_metrics=test_metrics,
                             test_dataset=test_ds, image_columns=True,
                             extra={"base_run_id": sources[tracking.tags.TAG_BASE_RUN],
                                    "window": cfg.window, "max_clip_frames": MAX_CLIP_FRAMES},
                             description=description, step=step)


def _autoencoder(state):
    if state is None:
        return None
    ae = NormalAutoencoder()
    ae.load_state_dict(state)
    return ae.eval()
