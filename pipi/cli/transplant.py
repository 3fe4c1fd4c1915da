"""`pipi transplant` / `mlflow run . -e transplant`: first-conv cosine, BN and subset-block
transplants between RGB and +PI runs of the same seed, and the Grad-CAM / prior overlap."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, choice, experiment_option, setup_logging
from pipi.runs.choices import TRANSPLANT_STUDIES

if TYPE_CHECKING:
    from pipi.workflows import transplant as workflow
else:   # loaded when the command runs: `pipi transplant --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.transplant")


@click.command("transplant", cls=PipiCommand)
@click.option("--rgb", default="", help="RGB (cell a) run ids, comma-separated, or an MLflow "
              "filter; paired with --pi by backbone and seed.")
@click.option("--pi", default="", help="+PI (cell pi) run ids, comma-separated, or a filter.")
@click.option("--study", type=choice(TRANSPLANT_STUDIES), default="transplant", show_default=True,
              help="transplant: first-conv cosine, BN and subset transplants; gradcam: the "
                   "Grad-CAM / P_blood overlap; all: both.")
@click.option("--n-frames", type=click.IntRange(min=1), default=50, show_default=True,
              help="Grad-CAM: test frames per focal class.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Grad-CAM: seed of the frame sample.")
@click.option("--data", default="", help="Staged folder (default: the one the runs were "
              "trained on, their data_dir param).")
@experiment_option
def transplant(rgb, pi, study, n_frames, seed, data, experiment):
    """Where the +PI lift lives: weight surgery between paired runs, and Grad-CAM (docs/entry-points.md)."""
    setup_logging()
    tracking.configure()
    res = workflow.run_transplant(rgb=rgb, pi=pi, study=study, data=data, n_frames=n_frames, seed=seed,
                         experiment=experiment or None)
    click.echo(res.table)
    click.echo(tracking.ui_hint(res.parent_run_id))
