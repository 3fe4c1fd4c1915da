"""`pipi robustness` / `mlflow run . -e robustness`: finished runs scored on perturbed test images."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, experiment_option, setup_logging

if TYPE_CHECKING:
    from pipi.probes import perturb
    from pipi.workflows import robustness as workflow
else:   # loaded when the command runs: `pipi robustness --help` imports neither torch nor mlflow
    perturb = lazy_module("pipi.probes.perturb")
    workflow = lazy_module("pipi.workflows.robustness")


@click.command("robustness", cls=PipiCommand)
@click.option("--runs", default="", help="Comma-separated run ids, or an MLflow filter such as "
              "\"tags.`pipi.seed` = '42'\" (its FINISHED per-frame runs).")
@click.option("--perturbations", default="all", show_default=True,
              help="all, or a comma-separated subset of jpeg80,jpeg50,jpeg25,brightness-20,"
                   "brightness+20,noise0.02,noise0.05,noise0.10 (the baseline is always scored).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the Gaussian noise (the same noise per frame in every run).")
@click.option("--data", default="", help="Staged folder (default: the one the runs were "
              "trained on, their data_dir param).")
@experiment_option
def robustness(runs, perturbations, seed, data, experiment):
    """Score finished runs on the test split under the paper's perturbations (docs/entry-points.md)."""
    setup_logging()
    perturb.parse_perturbations(perturbations)
    tracking.configure()
    res = workflow.run_robustness(runs=runs, perturbations=perturbations, seed=seed, data=data,
                         experiment=experiment or None)
    click.echo(res.table)
    click.echo(tracking.ui_hint(res.parent_run_id))
