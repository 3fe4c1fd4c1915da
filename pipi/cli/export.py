"""`pipi export cv2024`: a run's predictions as the Capsule Vision 2024 challenge's sheet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, PipiGroup, setup_logging

if TYPE_CHECKING:
    from pipi.workflows import export as workflow
else:   # loaded when the command runs: `pipi export --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.export")


@click.group(cls=PipiGroup)
def export() -> None:
    """Write a run's predictions in another tool's format."""


@export.command("cv2024", cls=PipiCommand)
@click.option("--run", "run_id", required=True, help="The run whose per-frame predictions "
              "(its predictions/ artifact) are written.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The sheet to write (.xlsx, or .csv with --format csv).")
@click.option("--split", type=click.Choice(["test", "val"]), default="test", show_default=True,
              help="Which split: test (the challenge's validation folder when staged from "
                   "its layout) or val.")
@click.option("--format", "fmt", type=click.Choice(["xlsx", "csv"]), default=None,
              help="Sheet format (default: from --out's suffix, else xlsx).")
def cv2024(run_id: str, out: Path, split: str, fmt: str | None) -> None:
    """The challenge's prediction sheet: image_path as the dataset wrote it, one probability
    column per class in the class order, predicted_class (Eval_metrics_gen_excel.py reads it)."""
    workflow.sheet_target(out, fmt)   # a bad --out or --format: one line, before the store is opened
    setup_logging()
    tracking.configure()
    res = workflow.export_cv2024(run_id, out, split=split, fmt=fmt)
    click.echo(f"wrote {res.out}: {res.n_frames} {split} frames of run {run_id}, "
               f"{len(res.classes)} classes ({', '.join(res.classes)})")
