"""`pipi train` / `mlflow run . -e train`: one cell, one seed, one backbone."""

from __future__ import annotations

import click

from pipi import tracking
from pipi.cli.common import (
    PipiCommand,
    backbone_option,
    cell_option,
    data_option,
    experiment_option,
    overrides_from,
    prior_params_from,
    prior_params_option,
    profile_option,
    setup_logging,
    train_override_options,
    weights_option,
    with_options,
)
from pipi.cells import CELLS
from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.models.backbones import check_weights
from pipi.runtime import runtime_of
from pipi.workflows import train as workflow


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
@click.option("--system-metrics", default="auto", show_default=True,
              help="true: log MLflow's system metrics (CPU, memory, disk, network; GPU with "
                   "nvidia-ml-py) as system/* metrics of the run; auto: $PIPI_SYSTEM_METRICS "
                   "(default false). Needs psutil (docs/mlflow-ui.md).")
@experiment_option
def train(cell, seed, backbone, data, profile, weights, prior_params, resume, system_metrics,
          experiment, **kw):
    """Train one cell and register its model (the run contract: docs/run-contract.md)."""
    setup_logging()
    overrides = overrides_from(kw)
    # every option is checked before anything is staged, loaded or started
    runtime_of(make_config(cell=cell, backbone=backbone, seed=seed,
                           profile="paper" if profile == "auto" else profile, **overrides))
    check_weights(weights)
    system_metrics = tracking.system_metrics_enabled(system_metrics)
    tracking.configure()
    calibrated = prior_params_from(prior_params, overrides)
    cc = CELLS[cell]
    if calibrated is not None and not (cc.is_sequence or cc.input_channels == 5 or cc.distill):
        raise ConfigError(f"prior_params={prior_params}: cell {cell} uses no optical prior "
                          "(RGB only); prior_params applies to pi, pblood_only, phi_only, "
                          "distill and the sequence cells built on them")
    if resume:  # the run's own data and recipe (checked against what was passed)
        workflow.resume_data(resume, data)
        cfg = workflow.resume_config(resume)
    else:
        cfg, _ = workflow.prepare(cell=cell, backbone=backbone, seed=seed, profile=profile,
                                  data=data, weights=weights, **overrides)
        if calibrated is not None:  # lambda_eff scales to the resolved image size
            cfg = calibrated.apply(cfg)
    s = workflow.train(cfg, data=data, resume=resume or None, experiment=experiment or None,
                       system_metrics=system_metrics)
    click.echo(f"run {s['run_id']}: test macro-AUC {s['test_macro_auc']:.4f} "
               f"(val {s['val_macro_auc']:.4f}, best epoch {s['best_epoch']}; profile "
               f"{cfg.profile}, {cfg.image_size} px)")
    if s.get("registered"):
        click.echo(f"registered {s['registered']} (alias candidate: "
                   f"models:/{s['registered_name']}@candidate)")
    click.echo(tracking.ui_hint(s["run_id"]))
