"""`pipi stage` / `mlflow run . -e stage`, and `pipi stage kvasir` for a release on disk."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import PipiGroup, lazy_module, setup_logging
from pipi.data.staging import GALAR_PRESETS, MULTILABEL_RULES, ImageStageRequest

if TYPE_CHECKING:
    from pipi.workflows import stage as workflow
else:   # executed when a command runs: `pipi stage --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.stage")

_split = click.option(
    "--split", type=click.Choice(["auto", "paper", "random"]), default="auto", show_default=True,
    help="auto: the paper's split when the videos are the release's 43 labelled videos, the "
         "seeded search (--seed) otherwise; paper / random force one. --split-manifest wins.")
_link = click.option("--link", type=click.Choice(["hardlink", "symlink", "copy"]),
                     default="hardlink", show_default=True)
_HELP_ROOT = ("The dataset folder: [<split>/]<Class>/[<Source>/...]<file>, "
              "split folders training|train, validation|val|valid, test (docs/your-own-dataset.md)")
_HELP_LABELS = ("A label table (CSV, Parquet or Excel): image_path|path|filename, a class column "
                "or one-hot class columns, optional split, video_id|patient_id, source.")
_HELP_CLASSES = "Comma-separated class names: fixes their index order (default: sorted)."
_HELP_CLASS_MAP = ('JSON {"classes": [...] | "kvasir", "map": {"name": "target" | null}} or a '
                   "from,to CSV: map the data's classes onto another set (null drops one).")
_HELP_GROUP = ("Regex with a named group (?P<group>...) on file names giving each image's video "
               r"or patient, e.g. '^(?P<group>[0-9a-f]{16})_' (Kvasir), '-P(?P<group>\d+)-' "
               "(KID): carved splits are then group-disjoint.")


def _image_request(root, out, labels, classes, class_map, multilabel, group_pattern, seed,
                   link) -> ImageStageRequest:
    return ImageStageRequest(
        root=Path(root), out=Path(out) if out else None,
        labels=Path(labels) if labels else None,
        classes=tuple(c.strip() for c in classes.split(",") if c.strip()) or None,
        class_map=Path(class_map) if class_map else None, multilabel=bool(multilabel),
        group_patterns=tuple(p for p in group_pattern if p), seed=seed, link=link)


@click.group("stage", cls=PipiGroup, invoke_without_command=True)
@click.option("--source", default="synthetic", show_default=True,
              help="'synthetic', 'synthetic-tiny', 'images' (with --root: any folder or table "
                   "of images), or a labelled_images folder/zip.")
@click.option("--metadata", default="", help="metadata.csv (default: beside the images).")
@click.option("--out", default="", help="Output folder (default under .pipi/data for synthetic).")
@click.option("--split-manifest", default="", help="JSON with video_to_split.")
@_split
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=42, show_default=True,
              help="Seeds the search of --split random (or auto on other data).")
@_link
@click.option("--root", default="", help="source=images: " + _HELP_ROOT)
@click.option("--labels", default="", help="source=images: " + _HELP_LABELS)
@click.option("--classes", default="", help="source=images: " + _HELP_CLASSES)
@click.option("--class-map", default="", help="source=images: " + _HELP_CLASS_MAP)
@click.option("--multilabel", type=click.BOOL, default=False, show_default=True,
              help="source=images: keep an image with several classes (refused otherwise).")
@click.option("--group-pattern", default="", help="source=images: " + _HELP_GROUP)
@click.pass_context
def stage(ctx, source, metadata, out, split_manifest, split, seed, link, root, labels, classes,
          class_map, multilabel, group_pattern):
    """Stage a release into the patient-disjoint layout pipi trains on (MLproject `stage`).

    Without a subcommand: synthesize-then-stage (idempotent), stage a folder or table of
    images (source=images, root=DIR), or stage a real Kvasir-Capsule release.
    """
    if ctx.invoked_subcommand is not None:
        return
    setup_logging()
    tracking.configure()
    images = None
    if source == "images":
        if not root:
            raise click.UsageError("source=images needs --root (-P root=DIR)")
        images = _image_request(root, out, labels, classes, class_map, multilabel,
                                (group_pattern,), seed, link)
    elif root or labels or classes or class_map or group_pattern:
        raise click.UsageError("--root, --labels, --classes, --class-map and --group-pattern "
                               "are for source=images")
    workflow.stage_source(source, metadata=metadata or None, out=out or None, images=images,
                          split_manifest=Path(split_manifest) if split_manifest else None,
                          split=split, seed=seed, link=link)


@stage.command("kvasir")
@click.option("--images", type=click.Path(path_type=Path), required=True,
              help="labelled_images folder or labelled_images.zip.")
@click.option("--metadata", type=click.Path(path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--split-manifest", type=click.Path(path_type=Path), default=None,
              help="JSON with video_to_split: reproduce a split exactly.")
@_split
@click.option("--seed", type=int, default=42, show_default=True,
              help="Seeds the search of --split random (or auto on other data).")
@_link
@click.option("--no-mlflow", is_flag=True, help="Do not log a stage run.")
def stage_kvasir_cmd(images, metadata, out, split_manifest, split, seed, link, no_mlflow):
    """Stage Kvasir-Capsule: split, layout, frame index, manifest, count table."""
    if not no_mlflow:
        tracking.configure()
    workflow.run_stage(images=images, metadata=metadata, out=out, split_manifest=split_manifest,
                       split=split, seed=seed, link=link, log_run=not no_mlflow)


@stage.command("galar")
@click.option("--root", type=click.Path(path_type=Path), required=True,
              help="The Galar release: metadata.csv, Labels/, Frames/.")
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--mapping", type=click.Path(path_type=Path), default=None,
              help="The benchmark release's class_mapping.json (default: the shipped mapping).")
@click.option("--frames-per-class", type=int, default=None, help="Up to N frames per class.")
@click.option("--capsule-systems", default=None, help='e.g. "PillCam SB3,Olympus".')
@click.option("--videos", default=None, help="e.g. 1-60.")
@click.option("--multilabel", type=click.Choice(MULTILABEL_RULES), default="priority",
              show_default=True, help="A frame positive for several mapped classes.")
@click.option("--calibration-fraction", type=click.FloatRange(0.0, 1.0, max_open=True),
              default=0.5, show_default=True,
              help="Share of each capsule system's videos in the calibration fold (for "
                   "`calibrate -P target=galar:<system>`); `galar` scores every video anyway "
                   "unless asked for fold=evaluation. 0: no calibration fold.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--preset", type=click.Choice(sorted(GALAR_PRESETS)), default=None,
              help="paper-subset: the paper's 10-video subset rules (10,000 frames per class, "
                   "the first ones; first mapped class of a multi-label frame); the 10 video "
                   "ids are not published: pass them with --videos.")
@_link
@click.option("--no-mlflow", is_flag=True, help="Do not log a stage run.")
def stage_galar_cmd(root, out, mapping, frames_per_class, capsule_systems, videos, multilabel,
                    calibration_fraction, seed, preset, link, no_mlflow):
    """Stage Galar for zero-shot evaluation: mapped classes, vendor folds, Kvasir layout."""
    if not no_mlflow:
        tracking.configure()
    workflow.run_stage_galar(root=root, out=out, mapping=mapping,
                             frames_per_class=frames_per_class, capsule_systems=capsule_systems,
                             videos=videos, multilabel=multilabel,
                             calibration_fraction=calibration_fraction, seed=seed, link=link,
                             log_run=not no_mlflow, preset=preset)


@stage.command("images")
@click.option("--root", type=click.Path(path_type=Path), required=True, help=_HELP_ROOT)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--labels", type=click.Path(path_type=Path), default=None, help=_HELP_LABELS)
@click.option("--classes", default="", help=_HELP_CLASSES)
@click.option("--class-map", type=click.Path(path_type=Path), default=None,
              help=_HELP_CLASS_MAP)
@click.option("--multilabel", is_flag=True,
              help="Keep an image with several classes (refused otherwise).")
@click.option("--group-pattern", multiple=True,
              help=_HELP_GROUP + " Repeatable: the first that matches a file name wins.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=42, show_default=True,
              help="Seeds the carved splits (val from training; all three with no split).")
@_link
@click.option("--no-mlflow", is_flag=True, help="Do not log a stage run.")
def stage_images_cmd(root, out, labels, classes, class_map, multilabel, group_pattern, seed,
                     link, no_mlflow):
    """Stage any folder or table of images with its own classes and sources."""
    if not no_mlflow:
        tracking.configure()
    workflow.run_stage_images(
        _image_request(root, out, labels, classes, class_map, multilabel, group_pattern,
                       seed, link), log_run=not no_mlflow)
