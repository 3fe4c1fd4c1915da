"""`pipi train` / `mlflow run . -e train`: one cell, one seed, one backbone."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import (
    CLI_ONLY_OPTIONS,
    Auto,
    AutoBool,
    PipiCommand,
    backbone_option,
    cell_option,
    data_option,
    experiment_option,
    model_prefix_option,
    overrides_from,
    prior_params_option,
    profile_option,
    setup_logging,
    train_override_options,
    weights_option,
    with_options,
)

if TYPE_CHECKING:
    from pipi.runs import training
else:   # loaded when the command runs: `pipi train --help` imports neither torch nor mlflow
    training = lazy_module("pipi.runs.training")


@click.command("train", cls=PipiCommand)
@cell_option
@click.option("--seed", type=int, default=42, show_default=True)
@backbone_option
@data_option
@profile_option
@weights_option
@with_options(train_override_options)
@prior_params_option
@click.option("--resume", default="", help="Run id of an interrupted run to continue.")
@click.option("--base-run", default="",
              help="A sequence cell's base: this FINISHED run (train or import) of its base "
                   "cell, backbone, data and image size, instead of the one pipi finds or "
                   "trains (e.g. e_dagger on an imported distillation checkpoint).")
@click.option("--system-metrics", default="auto", show_default=True,
              help="true: log MLflow's system metrics (CPU, memory, disk, network; GPU with "
                   "nvidia-ml-py) as system/* metrics of the run; auto: $PIPI_SYSTEM_METRICS "
                   "(default false). Needs psutil (docs/mlflow-ui.md).")
@click.option("--onnx", type=click.BOOL, default=False, show_default=True,
              help="true: also keep the model as an ONNX graph (prior inside, checked with "
                   "ONNX Runtime) beside it: onnx/model.onnx of the run, named by the tag "
                   "pipi.onnx on the run and the registered version. Per-frame cells; needs "
                   "pip install -e '.[onnx]' (docs/serving.md, ONNX).")
@model_prefix_option
@experiment_option
def train(cell, seed, backbone, data, profile, weights, prior_params, resume, base_run,
          system_metrics, onnx, model_prefix, experiment, **kw):
    """Train one cell and register its model (the run contract: docs/run-contract.md)."""
    setup_logging()
    system_metrics = tracking.system_metrics_enabled(system_metrics)
    if onnx:   # a cell that cannot be exported is refused before anything is staged
        training.check_onnx(cell)
    # the prefix reaches the training as a context value, for this command only (issue 39)
    click.get_current_context().with_resource(tracking.using_model_prefix(model_prefix))
    # one request: every option checked before anything is staged, loaded or started, the
    # config built once, the data, prior and runtime resolved once; the training service trains it
    req = training.request_from_options(
        cell=cell, backbone=backbone, seed=seed, profile=profile, data=data, weights=weights,
        prior_params=prior_params, resume=resume or None, base_run=base_run or None,
        connect=tracking.configure,
        **overrides_from(kw))
    # the options as `mlflow run -e train` logs them, whichever launcher parsed them
    req = dataclasses.replace(req, options=requested_options(click.get_current_context()))
    s = training.run(req, experiment=experiment or None, system_metrics=system_metrics,
                     onnx=onnx)
    cfg = req.cfg
    click.echo(f"run {s.run_id}: test macro-AUC {s.test_macro_auc:.4f} "
               f"(val {s.val_macro_auc:.4f}, best epoch {s.best_epoch}; profile "
               f"{cfg.profile}, {cfg.image_size} px)")
    names = [cfg.class_set[k] for k in s.test_classes]
    if names:  # the headline's classes: those with test positives
        click.echo(f"  over {len(names)} classes with test positives: {', '.join(names)}")
    if s.registered:
        click.echo(f"registered {s.registered} (alias candidate: "
                   f"models:/{s.registered_name}@candidate)")
        held = [(a, tracking.registry.alias_version(s.registered_name, a))
                for a in ("candidate", "champion", "previous-champion")]
        click.echo(f"  aliases of {s.registered_name}: "
                   + ", ".join(f"@{a} -> version {v}" for a, v in held if v))
    click.echo(tracking.ui_hint(s.run_id))


def requested_options(ctx: click.Context) -> dict[str, str]:
    """The command's options as requested, in the form ``mlflow run`` logs its parameters
    (an unset number or switch is ``auto``, as the MLproject default writes it)."""
    return tracking.launch_params({
        p.name: "auto" if isinstance(p.type, (Auto, AutoBool)) and ctx.params[p.name] is None
        else ctx.params[p.name]
        for p in ctx.command.params if p.name not in CLI_ONLY_OPTIONS})
