"""`pipi promote` / `mlflow run . -e promote`: move `champion` only on cross-seed evidence."""

from __future__ import annotations

import sys

import click

from pipi import tracking
from pipi.cli.common import PipiCommand, setup_logging
from pipi.workflows.promote import promote as run_promote
from pipi.workflows.promote import rollback as run_rollback


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
        res = run_rollback(model)
    else:
        res = run_promote(model=model, version=version, baseline=baseline,
                          min_sign_positive=min_sign_positive, force_reason=force_reason,
                          evidence=evidence)
    click.echo(res.text)
    sys.exit(0 if res.promoted else 1)
