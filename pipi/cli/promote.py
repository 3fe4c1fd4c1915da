"""`pipi promote` / `mlflow run . -e promote`: move `champion` only on cross-seed evidence."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, setup_logging

if TYPE_CHECKING:
    from pipi.workflows import promote as workflow
else:   # loaded when the command runs: `pipi promote --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.promote")


@click.command("promote", cls=PipiCommand)
@click.option("--model", required=True, help="Registered model, pipi-<backbone>-<cell>.")
@click.option("--version", default="", help="Version number (default: the @candidate one).")
@click.option("--baseline", default="a", show_default=True,
              help="Cell whose runs the version must beat, paired by seed.")
@click.option("--min-sign-positive", type=click.IntRange(min=1), default=4, show_default=True,
              help="Paired seeds needed, and seeds that must improve on the baseline.")
@click.option("--force-reason", default="",
              help="Promote without passing the gate; the reason is recorded on the version.")
@click.option("--evidence", type=click.Choice(["videos", "seeds"]), default="videos",
              show_default=True,
              help="What the gate's BCa interval resamples: test videos, or seeds (the "
                   "paper's interval over per-seed deltas); recorded on the version.")
@click.option("--rollback", type=click.BOOL, default=False, show_default=True,
              help="Point @champion back at @previous-champion.")
def promote(model, version, baseline, min_sign_positive, force_reason, evidence, rollback):
    """Gate a registered version on cross-seed evidence; exit 0 promoted, 1 refused."""
    setup_logging()
    tracking.configure()
    if rollback:
        res = workflow.rollback(model)
    else:
        res = workflow.promote(model=model, version=version, baseline=baseline,
                          min_sign_positive=min_sign_positive, force_reason=force_reason,
                          evidence=evidence)
    click.echo(res.text)
    sys.exit(0 if res.promoted else 1)
