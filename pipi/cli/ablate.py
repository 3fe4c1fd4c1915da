"""`pipi ablate` / `mlflow run . -e ablate`: sweeps as nested runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import (
    PipiCommand,
    choice,
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
from pipi.config import PAPER_SEEDS, make_config
from pipi.sweeps.studies import EXECUTORS, STUDIES, parse_list

if TYPE_CHECKING:
    from pipi import runtime
    from pipi.models import backbones as backbone_models
    from pipi.workflows import ablate as workflow
else:   # loaded when the command runs: `pipi ablate --help` imports neither torch nor mlflow
    runtime = lazy_module("pipi.runtime")
    backbone_models = lazy_module("pipi.models.backbones")
    workflow = lazy_module("pipi.workflows.ablate")


@click.command("ablate", cls=PipiCommand)
@click.option("--study", default="eight_cell", show_default=True, type=choice(STUDIES))
@click.option("--seeds", default=",".join(map(str, PAPER_SEEDS)), show_default=True,
              help="Comma-separated seeds (default: the paper's six).")
@click.option("--backbones", default="efficientnet_b0", show_default=True,
              help="Comma-separated backbones (cross_backbone: all three unless changed).")
@click.option("--cells", default="", help="Comma-separated cells (default: the study's).")
@profile_option
@click.option("--executor", type=choice(EXECUTORS), default="local", show_default=True,
              help="slurm: one job-array task per child (PIPI_SLURM_*).")
@click.option("--parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="local executor: children trained at once, each in its own process.")
@data_option
@weights_option
@with_options(train_override_options)
@prior_params_option
@model_prefix_option
@experiment_option
def ablate(study, seeds, backbones, cells, profile, executor, parallel, data, weights,
           prior_params, model_prefix, experiment, **kw):
    """Sweep cells x seeds x backbones as nested runs; idempotent (docs/entry-points.md, "ablate")."""
    setup_logging()
    # the children get it: in this process as a context value, in a worker process or a
    # SLURM task as an argument (issue 39: not through os.environ)
    click.get_current_context().with_resource(tracking.using_model_prefix(model_prefix))
    overrides = overrides_from(kw)
    parse_list(seeds, cast=int, name="seeds")
    cfg = make_config(cell="a", profile="paper" if profile == "auto" else profile, **overrides)
    if executor == "local":  # SLURM tasks resolve the device on their own node
        runtime.runtime_of(cfg)
    backbone_models.check_weights(weights)
    tracking.configure()
    result = workflow.run_ablation(study=study, seeds=seeds, backbones=backbones, cells=cells,
                          profile=profile, executor=executor, parallel=parallel, data=data,
                          weights=weights, overrides=overrides,
                          experiment=experiment or None, prior_params=prior_params)
    click.echo(result.table)
    click.echo(tracking.ui_hint(result.parent_run_id))
    if result.failed:
        click.echo(f"error: {len(result.failed)} child run(s) failed twice (see the table)",
                   err=True)
        sys.exit(1)
