"""`pipi import` / `mlflow run . -e import`: an outside checkpoint or prediction file as a run."""

from __future__ import annotations

import click

from pipi import tracking
from pipi.cli.common import (
    Auto,
    PipiGroup,
    backbone_option,
    choice,
    data_option,
    experiment_option,
    model_prefix_option,
    profile_option,
    setup_logging,
    with_options,
)
from pipi.errors import ConfigError
from pipi.workflows import importer as workflow

_options = [
    click.option("--file", default="", help="The checkpoint (torch state dict) or prediction "
                 "file (CSV, Parquet or NPZ) to import."),
    click.option("--cell", default="pi", show_default=True, type=choice(workflow.IMPORT_CELLS),
                 help="The per-frame cell the file belongs to."),
    backbone_option,
    click.option("--seed", type=int, default=42, show_default=True,
                 help="The seed the released model was trained with."),
    data_option,
    profile_option,
    click.option("--image-size", type=Auto(int, minimum=16), default="auto", show_default=True,
                 help="Resolution the checkpoint is scored at in px (auto: the profile's)."),
    click.option("--label", default="released", show_default=True,
                 help="Name of the source; aggregate shows the arm as '<cell> (<label>)'."),
    model_prefix_option,
    experiment_option,
]


def _run(kind: str, *, file, cell, backbone, seed, data, profile, image_size, label,
         model_prefix, experiment) -> None:
    setup_logging()
    tracking.set_model_prefix(model_prefix)
    if not file:
        raise ConfigError(f"pass --file: the {kind} file to import")
    tracking.configure()
    res = workflow.import_file(kind=kind, file=file, cell=cell, backbone=backbone, seed=seed,
                               data=data, profile=profile, image_size=image_size, label=label,
                               experiment=experiment or None)
    what = "already imported as" if res.reused else "imported as"
    click.echo(f"{file} (sha256 {res.sha256[:12]}) {what} run {res.run_id}: {res.cell}/"
               f"{res.backbone}/seed {res.seed}, test macro-AUC {res.test_macro_auc:.4f}")
    if res.registered:
        click.echo(f"registered {res.registered}")
    click.echo(tracking.ui_hint(res.run_id))


@click.group("import", cls=PipiGroup, invoke_without_command=True)
@click.option("--kind", type=choice(workflow.KINDS), default="checkpoint", show_default=True,
              help="checkpoint: a state dict of the cell's model; predictions: per-frame "
                   "probabilities.")
@with_options(_options)
@click.pass_context
def import_(ctx, kind, **kw):
    """Bring an outside checkpoint or prediction file into MLflow as a run (MLproject `import`).

    `pipi import checkpoint --file F ...` and `pipi import predictions --file F ...` are the
    same as `--kind checkpoint` / `--kind predictions`.
    """
    if ctx.invoked_subcommand is not None:
        return
    _run(kind, **kw)


@import_.command("checkpoint")
@with_options(_options)
def import_checkpoint(**kw):
    """A state dict of a per-frame cell's model: scored on the staged splits, registered."""
    _run("checkpoint", **kw)


@import_.command("predictions")
@with_options(_options)
def import_predictions(**kw):
    """Per-frame probabilities (CSV, Parquet or NPZ) joined to the staged frames by name."""
    _run("predictions", **kw)
