"""`pipi aggregate` / `mlflow run . -e aggregate`: the paper's tables from predictions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, setup_logging

if TYPE_CHECKING:
    from pipi.workflows import aggregate as workflow
else:   # loaded when the command runs: `pipi aggregate --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.aggregate")


@click.command("aggregate", cls=PipiCommand)
@click.option("--experiment", default="", show_default=True,
              help="MLflow experiment whose runs are aggregated (default: where train and "
                   "ablate put them: MLFLOW_EXPERIMENT_NAME/ID or Default).")
@click.option("--filter", "filter_", default="",
              help="MLflow search filter, e.g. \"tags.`pipi.backbone` = 'resnet18'\".")
@click.option("--out", default="", help="Also write a local copy of everything logged here.")
@click.option("--resample", type=click.Choice(["video", "frame"]), default="video",
              show_default=True, help="Bootstrap unit: test videos (paper) or frames "
              "(the published code).")
@click.option("--pair-imported", type=click.BOOL, default=False, show_default=True,
              help="Let imported runs (entry point import) join the arm of their cell; by "
                   "default they form arms of their own, e.g. 'a (released)'.")
@click.option("--channel-family", type=click.Choice(["paper", "vs_pi"]), default="paper",
              show_default=True, help="BH family of the training-time channel ablation: the "
              "paper's five paired tests, or only the three against full +PI.")
def aggregate(experiment, filter_, out, resample, pair_imported, channel_family):
    """Paper tables, cross-seed statistics, figures and a dashboard from per-frame predictions."""
    setup_logging()
    tracking.configure()
    res = workflow.run_aggregate(experiment=experiment or tracking.default_experiment(),
                        filter_string=filter_, out=Path(out) if out else None,
                        resample=resample, pair_imported=pair_imported,
                        channel_family=channel_family)
    click.echo(res.summary)
