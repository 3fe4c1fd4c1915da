"""`pipi import` / `mlflow run . -e import`: an outside checkpoint or prediction file as a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cells import RELEASED
from pipi.cli import lazy_module
from pipi.cli.common import (
    Auto,
    PipiGroup,
    choice,
    data_option,
    experiment_option,
    model_prefix_option,
    profile_option,
    setup_logging,
    with_options,
)
from pipi.errors import ConfigError
from pipi.models.specs import ARCHS
from pipi.options.prior import HB_INDEX_NAMES, PRIOR_MASKS, SECOND_CHANNELS
from pipi.runs.choices import IMPORT_CELLS, IMPORT_KINDS

if TYPE_CHECKING:
    from pipi.workflows import importer as workflow
else:   # loaded when the command runs: `pipi import --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.importer")


def _auto(value: str):
    return None if value in ("auto", "") else value


_options = [
    click.option("--file", default="", help="The checkpoint (torch state dict) or prediction "
                 "file (CSV, Parquet or NPZ) to import."),
    click.option("--cell", default="auto", show_default=True,
                 type=choice(["auto", *IMPORT_CELLS]),
                 help="The per-frame cell the file belongs to (auto: the published checkpoint's "
                      "args, use_physics_prior -> pi or a; else pi)."),
    click.option("--backbone", default="auto", show_default=True, type=choice(["auto", *ARCHS]),
                 help="The checkpoint's backbone (auto: the published checkpoint's "
                      "args.model_name, else efficientnet_b0)."),
    click.option("--seed", type=int, default=42, show_default=True,
                 help="The seed the released model was trained with."),
    data_option,
    profile_option,
    click.option("--image-size", type=Auto(int, minimum=16), default="auto", show_default=True,
                 help="Resolution the checkpoint is scored at in px (auto: the published "
                      "checkpoint's args.image_size, else the profile's)."),
    click.option("--alpha", type=Auto(float, minimum=0, strict=True), default="auto",
                 show_default=True, help="Prior steepness, as train takes it (auto: the "
                 "published checkpoint's args.physics_alpha, else 4.0)."),
    click.option("--lambda-eff", type=Auto(float, minimum=0, strict=True), default="auto",
                 show_default=True, help="Prior attenuation length in px (auto: the file's "
                 "args.physics_lambda_eff, else 0.25 x the image diagonal)."),
    click.option("--hb-index", type=choice(["auto", *HB_INDEX_NAMES]), default="auto",
                 show_default=True, help="Hemoglobin index, as train takes it (auto: code or "
                 "code_v2 for a published +PI checkpoint, by args.physics_prior_version; else "
                 "paper)."),
    click.option("--second-channel", type=choice(["auto", *SECOND_CHANNELS]), default="auto",
                 show_default=True, help="phi or log_gb_phi (auto: log_gb_phi for a published "
                 "+PI checkpoint, else phi)."),
    click.option("--prior-mask", type=choice(["auto", *PRIOR_MASKS]), default="auto",
                 show_default=True, help="none or fov, as train takes it (auto: none)."),
    click.option("--label", default=RELEASED, show_default=True,
                 help="Name of the source; aggregate shows the arm as '<cell> (<label>)'."),
    model_prefix_option,
    experiment_option,
]


def _run(kind: str, *, file, cell, backbone, seed, data, profile, image_size, label,
         model_prefix, experiment, alpha, lambda_eff, hb_index, second_channel,
         prior_mask) -> None:
    setup_logging()
    click.get_current_context().with_resource(tracking.using_model_prefix(model_prefix))
    if not file:
        raise ConfigError(f"pass --file: the {kind} file to import")
    tracking.configure()
    res = workflow.import_file(kind=kind, file=file, cell=_auto(cell),
                               backbone=_auto(backbone), seed=seed, data=data, profile=profile,
                               image_size=image_size, label=label,
                               experiment=experiment or None, alpha=alpha,
                               lambda_eff=lambda_eff, hb_index=_auto(hb_index),
                               second_channel=_auto(second_channel),
                               prior_mask=_auto(prior_mask))
    if res.from_file:
        click.echo(f"taken from the file's args: {', '.join(res.from_file)}")
    what = "already imported as" if res.reused else "imported as"
    click.echo(f"{file} (sha256 {res.sha256[:12]}) {what} run {res.run_id}: {res.cell}/"
               f"{res.backbone}/seed {res.seed}, test macro-AUC {res.test_macro_auc:.4f}")
    if res.registered:
        click.echo(f"registered {res.registered}")
    click.echo(tracking.ui_hint(res.run_id))


@click.group("import", cls=PipiGroup, invoke_without_command=True)
@click.option("--kind", type=choice(IMPORT_KINDS), default="checkpoint", show_default=True,
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
