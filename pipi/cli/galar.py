"""`pipi galar` / `mlflow run . -e galar`: zero-shot evaluation of Kvasir-trained runs on Galar."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, experiment_option, prior_params_option, setup_logging
from pipi.runs.choices import FOLD_CHOICES

if TYPE_CHECKING:
    from pipi.workflows import galar as workflow
else:   # loaded when the command runs: `pipi galar --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.galar")


@click.command("galar", cls=PipiCommand)
@click.option("--runs", default="", help="Comma-separated run ids or models:/ URIs "
              "(models:/NAME/VERSION, models:/NAME@ALIAS), or an MLflow filter string, e.g. "
              "\"tags.`pipi.entry_point` = 'train'\".")
@click.option("--data", default="synthetic", show_default=True,
              help="A staged Galar folder (`pipi stage galar`), or 'synthetic' / "
                   "'synthetic-tiny' (the synthetic Galar release, staged if needed).")
@click.option("--fold", type=click.Choice(FOLD_CHOICES), default="auto", show_default=True,
              help="all: every staged video (the paper's zero-shot protocol); evaluation: the "
                   "vendor folds' evaluation videos only (calibration videos left out); auto: "
                   "all, or evaluation with --prior-params.")
@prior_params_option
@experiment_option
def galar(runs, data, fold, prior_params, experiment):
    """Score Kvasir-trained runs zero-shot on Galar: one child run per source run."""
    setup_logging()
    tracking.configure()
    res = workflow.run_galar(runs=runs, data=data, fold=fold, experiment=experiment or None,
                    prior_params=prior_params)
    click.echo(res.summary)
    click.echo(f"galar run {res.parent_run_id}: {tracking.ui_hint(res.parent_run_id)}")
