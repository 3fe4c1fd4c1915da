"""Click commands: the ``pipi`` console script and the MLproject entry points.

Each command only parses its options and delegates to a function of ``pipi``; the
``entrypoints/<name>.py`` scripts that MLproject calls run the command of the same name
from ``ENTRY_POINTS``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from pipi.errors import NotBuiltYetError, PipiError


class _Command(click.Command):
    """Turns PipiError into one clear line and a non-zero exit, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PipiError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("alembic", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """pipi: training-time optical priors for capsule endoscopy, on MLflow."""
    _setup_logging(verbose)


# --------------------------------------------------------------------------- synthesize
@main.group()
def synthesize() -> None:
    """Write synthetic releases in the real on-disk formats."""


_preset = click.option("--preset", type=click.Choice(["tiny", "demo"]), default="tiny",
                       show_default=True)
_synth_opts = [
    click.option("--out", type=click.Path(path_type=Path), required=True),
    _preset,
    click.option("--videos", type=int, default=None, help="Override the preset's video count."),
    click.option("--frames-per-video", type=int, default=None),
    click.option("--size", type=int, default=None, help="Frame side in pixels."),
    click.option("--seed", type=int, default=0, show_default=True),
]


def _with(opts):
    def deco(f):
        for o in reversed(opts):
            f = o(f)
        return f
    return deco


@synthesize.command("kvasir", cls=_Command)
@_with(_synth_opts)
def synthesize_kvasir_cmd(out, preset, videos, frames_per_video, size, seed):
    """A Kvasir-Capsule-format release (labelled_images/ + metadata.csv)."""
    from pipi.data.synthetic import synthesize_kvasir

    synthesize_kvasir(out, preset=preset, videos=videos, frames_per_video=frames_per_video,
                      size=size, seed=seed)
    click.echo(f"wrote {out}")


@synthesize.command("galar", cls=_Command)
@_with(_synth_opts)
def synthesize_galar_cmd(out, preset, videos, frames_per_video, size, seed):
    """A Galar-format release (metadata.csv, Labels/, Frames/)."""
    from pipi.data.synthetic import synthesize_galar

    synthesize_galar(out, preset=preset, videos=videos, frames_per_video=frames_per_video,
                     size=size, seed=seed)
    click.echo(f"wrote {out}")


# --------------------------------------------------------------------------- stage
@main.group()
def stage() -> None:
    """Stage a release into the patient-disjoint layout pipi trains on."""


@stage.command("kvasir", cls=_Command)
@click.option("--images", type=click.Path(path_type=Path), required=True,
              help="labelled_images folder or labelled_images.zip.")
@click.option("--metadata", type=click.Path(path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--split-manifest", type=click.Path(path_type=Path), default=None,
              help="JSON with video_to_split: reproduce a split exactly.")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--link", type=click.Choice(["hardlink", "symlink", "copy"]), default="hardlink",
              show_default=True)
@click.option("--no-mlflow", is_flag=True, help="Do not log a stage run.")
def stage_kvasir_cmd(images, metadata, out, split_manifest, seed, link, no_mlflow):
    """Stage Kvasir-Capsule: split, layout, frame index, manifest, count table."""
    from pipi import staging, tracking

    if not no_mlflow:
        tracking.configure()
    staging.run_stage(images=images, metadata=metadata, out=out, split_manifest=split_manifest,
                      seed=seed, link=link, log_run=not no_mlflow)


@click.command("stage", cls=_Command)
@click.option("--source", default="synthetic", show_default=True,
              help="'synthetic', 'synthetic-tiny', or a labelled_images folder/zip.")
@click.option("--metadata", default="", help="metadata.csv (default: beside the images).")
@click.option("--out", default="", help="Output folder (default under .pipi/data for synthetic).")
@click.option("--split-manifest", default="", help="JSON with video_to_split.")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--link", type=click.Choice(["hardlink", "symlink", "copy"]), default="hardlink")
def stage_entry(source, metadata, out, split_manifest, seed, link):
    """MLproject `stage`: synthesize-then-stage, or stage a real release."""
    from pipi import staging, tracking

    _setup_logging()
    tracking.configure()
    staging.stage_source(source, metadata=metadata or None, out=out or None,
                         split_manifest=Path(split_manifest) if split_manifest else None,
                         seed=seed, link=link)


# --------------------------------------------------------------------------- train
@main.command("train", cls=_Command)
@click.option("--cell", default="pi", show_default=True, help="A cell of the cell table.")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--backbone", default="efficientnet_b0", show_default=True,
              type=click.Choice(["efficientnet_b0", "resnet18", "convnext_tiny"]))
@click.option("--data", default="synthetic", show_default=True,
              help="A staged folder, or 'synthetic' (the demo release, staged if needed).")
@click.option("--profile", type=click.Choice(["paper", "demo", "smoke"]), default="demo",
              show_default=True, help="Image size and epochs for the machine (logged).")
@click.option("--weights", default="imagenet", show_default=True,
              help="imagenet, none, or a state_dict file.")
@click.option("--epochs", type=int, default=0, help="Override the profile's epochs (0: keep).")
@click.option("--image-size", "--image_size", type=int, default=0, help="Override the image size (0: keep).")
@click.option("--alpha", type=float, default=4.0, show_default=True, help="Prior steepness.")
@click.option("--lambda-eff", type=float, default=0.0,
              help="Prior attenuation length in px (0: 0.25 x diagonal).")
@click.option("--select-metric", type=click.Choice(["macro_auc", "macro_f1"]), default="macro_auc",
              show_default=True, help="Validation metric that selects the checkpoint and stops "
              "early: macro_auc (paper) or macro_f1 (the published code).")
@click.option("--resume", default="", help="Run id of an interrupted run to continue.")
@click.option("--experiment", default="", help="MLflow experiment (default: pipi).")
def train(cell, seed, backbone, data, profile, weights, epochs, image_size, alpha, lambda_eff,
          select_metric, resume, experiment):
    """Train one cell and register its model (the run contract: README)."""
    from pipi import runner, tracking
    from pipi.cells import make_config

    _setup_logging()
    tracking.configure()
    cfg = make_config(cell=cell, backbone=backbone, seed=seed, profile=profile,
                      weights=runner.check_weights(weights), epochs=epochs or None,
                      image_size=image_size or None, alpha=alpha, lambda_eff=lambda_eff,
                      select_metric=select_metric)
    s = runner.train(cfg, data=data, resume=resume or None, experiment=experiment or None)
    click.echo(f"run {s['run_id']}: test macro-AUC {s['test_macro_auc']:.4f} "
               f"(val {s['val_macro_auc']:.4f}, best epoch {s['best_epoch']})")
    if s.get("registered"):
        click.echo(f"registered {s['registered']} (alias candidate: "
                   f"models:/{s['registered_name']}@candidate)")
    click.echo(tracking.ui_hint(s["run_id"]))


# --------------------------------------------------------------------------- not built yet
def _not_built(name: str, issue: str):
    @click.command(name, cls=_Command, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def cmd(args):
        raise NotBuiltYetError(f"entry point '{name}' is not built yet ({issue})")
    cmd.help = f"Not built yet ({issue})."
    return cmd


def _pending(name: str, issue: str, *options):
    """An MLproject entry point whose issue has not landed: declared options, one-line exit."""

    @click.command(name, cls=_Command)
    def cmd(**_kw):
        raise NotBuiltYetError(f"entry point '{name}' is not built yet ({issue})")

    for o in reversed(options):
        cmd = o(cmd)
    cmd.help = f"Not built yet ({issue})."
    return cmd


_run_ids = click.option("--run-ids", default="", help="Comma-separated MLflow run ids.")
@click.command("ablate", cls=_Command)
@click.option("--study", default="eight_cell", show_default=True,
              help="eight_cell, per_frame, cross_backbone, channel_train, channel_infer or "
                   "pi_tta.")
@click.option("--seeds", default="41,42", show_default=True, help="Comma-separated seeds.")
@click.option("--backbones", default="efficientnet_b0", show_default=True,
              help="Comma-separated backbones (cross_backbone: all three unless changed).")
@click.option("--cells", default="", help="Comma-separated cells (default: the study's).")
@click.option("--profile", type=click.Choice(["paper", "demo", "smoke"]), default="demo",
              show_default=True)
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local",
              show_default=True, help="slurm: one job-array task per child (PIPI_SLURM_*).")
@click.option("--data", default="synthetic", show_default=True,
              help="A staged folder, or 'synthetic' (the demo release, staged if needed).")
@click.option("--weights", default="imagenet", show_default=True,
              help="Backbone initialisation of every child: imagenet, none, or a state_dict file.")
def ablate(study, seeds, backbones, cells, profile, executor, data, weights):
    """Sweep cells x seeds x backbones as nested runs; idempotent (README, "ablate")."""
    from pipi import runner, tracking
    from pipi.ablate import run_ablation

    _setup_logging()
    tracking.configure()
    weights = runner.check_weights(weights)
    result = run_ablation(study=study, seeds=seeds, backbones=backbones, cells=cells,
                          profile=profile, executor=executor, data=data, weights=weights)
    click.echo(result.table)
    click.echo(tracking.ui_hint(result.parent_run_id))
    if result.failed:
        click.echo(f"error: {len(result.failed)} child run(s) failed twice (see the table)",
                   err=True)
        sys.exit(1)


transplant = _pending("transplant", "transplant issue", _run_ids)
galar = _pending("galar", "cross-vendor issue", click.option("--data", default="synthetic"),
                 _run_ids)
calibrate = _pending("calibrate", "Optuna calibration issue", click.option("--n-trials", default=20),
                     click.option("--storage", default=""))
robustness = _pending("robustness", "robustness issue", _run_ids)


@click.command("aggregate", cls=_Command)
@click.option("--experiment", default="pipi", show_default=True,
              help="MLflow experiment whose runs are aggregated (the aggregate run goes there).")
@click.option("--filter", "filter_", default="",
              help="MLflow search filter, e.g. \"tags.`pipi.backbone` = 'resnet18'\".")
@click.option("--out", default="", help="Also write a local copy of everything logged here.")
def aggregate(experiment, filter_, out):
    """Paper tables, cross-seed statistics, figures and a dashboard from per-frame predictions."""
    from pipi import aggregate as agg
    from pipi import tracking

    _setup_logging()
    tracking.configure()
    res = agg.run_aggregate(experiment=experiment, filter_string=filter_,
                            out=Path(out) if out else None)
    click.echo(res.summary)


promote = _pending("promote", "promotion issue", click.option("--model", default=""),
                   click.option("--version", default=""), click.option("--alias", default="champion"))

ENTRY_POINTS: dict[str, click.Command] = {
    "stage": stage_entry, "train": train, "ablate": ablate, "transplant": transplant,
    "galar": galar, "calibrate": calibrate, "robustness": robustness, "aggregate": aggregate,
    "promote": promote,
}
