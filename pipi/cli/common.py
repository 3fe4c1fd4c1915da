"""What every command shares: option types and registry choices (the error handling and
logging, which ``pipi --help`` needs without the registries, are the package's:
:mod:`pipi.cli`, re-exported here)."""

from __future__ import annotations

import click

from pipi.cells import CELLS
from pipi.cli import PipiCommand, PipiGroup, experiment_option, setup_logging  # noqa: F401 (re-exported)
from pipi.config import (
    DECODERS,
    DISTILL_TARGETS,
    PROBE_RECIPES,
    PROFILE_CHOICES,
    SELECT_METRICS,
    TRAIN_OVERRIDES,
)
from pipi.models.specs import ARCHS, FOUNDATION, PRIOR_INITS
from pipi.options.prior import DEFAULT_ALPHA, HB_INDEX_NAMES, PRIOR_MASKS, SECOND_CHANNELS
from pipi.options.runtime import DATA_PATHS, GRAPHS, PRECISIONS, SWITCHES


class Auto(click.ParamType):
    """A number or ``auto`` (also empty): "not set", the recipe/profile decides. -> None."""

    def __init__(self, cast=int, *, minimum: float | None = None, strict: bool = False):
        self.cast, self.minimum, self.strict = cast, minimum, strict
        self.name = f"{cast.__name__}|auto"

    def convert(self, value, param, ctx):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("auto", "")):
            return None
        try:
            v = self.cast(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not {'an integer' if self.cast is int else 'a number'} "
                      "or 'auto'", param, ctx)
        if self.minimum is not None and (v <= self.minimum if self.strict else v < self.minimum):
            op = ">" if self.strict else ">="
            self.fail(f"{value!r}: must be {op} {self.minimum} (or 'auto')", param, ctx)
        return v


class AutoBool(click.ParamType):
    """``true``, ``false`` or ``auto`` (also empty): "not set", the recipe decides. -> None."""

    name = "true|false|auto"

    def convert(self, value, param, ctx):
        text = "" if value is None else str(value).strip().lower()
        if text in ("auto", ""):
            return None
        if text in ("true", "false"):
            return text == "true"
        self.fail(f"{value!r} is not true, false or 'auto'", param, ctx)


def choice(values) -> click.Choice:
    return click.Choice(list(values))


def with_options(options):
    def deco(f):
        for o in reversed(options):
            f = o(f)
        return f
    return deco


cell_option = click.option("--cell", default="pi", show_default=True, type=choice(CELLS),
                           help="A cell of the cell table (pipi/cells.py).")
backbone_option = click.option(
    "--backbone", default="efficientnet_b0", show_default=True,
    help=f"One of {', '.join(ARCHS)} (torchvision), {', '.join(FOUNDATION)} (timm foundation "
         "towers, per-frame cells) or timm:<name> (any timm model, per-frame cells).")
profile_option = click.option(
    "--profile", type=choice(PROFILE_CHOICES), default="auto", show_default=True,
    help="Image size and epochs for the machine (logged); auto: paper on real data, demo on "
         "the synthetic release.")
data_option = click.option("--data", default="synthetic", show_default=True,
                           help="A staged folder, or 'synthetic' (the demo release, staged if needed).")
weights_option = click.option("--weights", default="imagenet", show_default=True,
                              help="imagenet, none, or a state_dict file.")

#: The recipe and prior options of `train` (and every child of `ablate`): TRAIN_OVERRIDES.
train_override_options = [
    click.option("--epochs", type=Auto(int, minimum=1), default="auto", show_default=True,
                 help="Epochs (auto: the profile's)."),
    click.option("--image-size", type=Auto(int, minimum=16), default="auto", show_default=True,
                 help="Training resolution in px (auto: the profile's)."),
    click.option("--lr", type=Auto(float, minimum=0, strict=True), default="auto",
                 show_default=True, help="AdamW learning rate (auto: the recipe's)."),
    click.option("--batch-size", type=Auto(int, minimum=1), default="auto", show_default=True),
    click.option("--patience", type=Auto(int, minimum=1), default="auto", show_default=True,
                 help="Early-stopping patience in epochs."),
    click.option("--alpha", type=Auto(float, minimum=0, strict=True), default=str(DEFAULT_ALPHA),
                 show_default=True, help=f"Prior steepness ({DEFAULT_ALPHA}: the published default, "
                 "not a fitted value)."),
    click.option("--lambda-eff", type=Auto(float, minimum=0, strict=True), default="auto",
                 show_default=True, help="Prior attenuation length in px (auto: 0.25 x the "
                 "image diagonal)."),
    click.option("--hb-index", type=choice(HB_INDEX_NAMES), default="paper", show_default=True,
                 help="paper: R/(R+G+B); code: the published R/(G+B); code_v2: the published "
                      "scale-fixed v2 prior, (R-G)/(R+G) with pivot 0.30 and alpha at least 6."),
    click.option("--second-channel", type=choice(SECOND_CHANNELS), default="phi",
                 show_default=True, help="phi (paper) or log_gb_phi (published code)."),
    click.option("--prior-mask", type=choice(PRIOR_MASKS), default="none", show_default=True,
                 help="none: percentiles over every pixel (published); fov: the field of view "
                      "only (rotation fill excluded)."),
    click.option("--prior-init", type=choice(PRIOR_INITS), default="kaiming", show_default=True,
                 help="Init of the extra first-conv channels: kaiming (paper) or zeros (code)."),
    click.option("--distill-lambda", type=Auto(float, minimum=0), default="1.0",
                 show_default=True, help="Weight of the distill cell's auxiliary loss."),
    click.option("--distill-target", type=choice(DISTILL_TARGETS), default="frame",
                 show_default=True, help="The distill cell's P_blood target: frame (paper: the "
                 "prior of the frame before colour jitter, moved with its flip/rotation) or "
                 "augmented (the published code: the prior of the augmented input)."),
    click.option("--decoder", type=choice(DECODERS), default="pipi", show_default=True,
                 help="The distill cell's auxiliary decoder: pipi (1x1 conv, BN, GELU, 3x3 conv) "
                 "or code (the published code's 3x3-GELU-3x3-GELU-1x1, 64 channels; an "
                 "imported distillation checkpoint keeps its decoder with it)."),
    click.option("--weight-decay", type=Auto(float, minimum=0), default="auto",
                 show_default=True, help="AdamW weight decay (auto: the recipe's)."),
    click.option("--class-weights", type=AutoBool(), default="auto", show_default=True,
                 help="true/false: inverse-frequency class weights in the loss (auto: the "
                      "recipe's; paper true, BiomedCLIP probe false)."),
    click.option("--augment", type=AutoBool(), default="auto", show_default=True,
                 help="true/false: flip, rotation, colour jitter in training (auto: the "
                      "recipe's; the cached probe recipe has none)."),
    click.option("--probe-recipe", type=choice(PROBE_RECIPES), default="cached",
                 show_default=True, help="probe cell: cached (the published probe scripts: "
                 "features extracted once and cached, the head trained on them with their "
                 "epochs, batch, lr, weight decay) or end_to_end (through the frozen model "
                 "each epoch with the torchvision recipe)."),
    click.option("--select-metric", type=choice(SELECT_METRICS), default="macro_auc",
                 show_default=True, help="Validation metric that selects the checkpoint and "
                 "stops early: macro_auc (paper) or macro_f1 (the published code)."),
    click.option("--device", default="auto", show_default=True,
                 help="auto (cuda if available), cpu, cuda or cuda:N."),
    click.option("--precision", type=choice(PRECISIONS), default="auto", show_default=True,
                 help="Autocast precision (auto: bf16 on a GPU that supports it, else fp32)."),
    click.option("--channels-last", type=choice(SWITCHES), default="auto", show_default=True,
                 help="NHWC memory format for model and inputs (auto: on for CUDA)."),
    click.option("--compile", type=click.BOOL, default=False, show_default=True,
                 help="torch.compile the model."),
    click.option("--deterministic", type=click.BOOL, default=True, show_default=True,
                 help="Deterministic algorithms (false: cuDNN autotuning, faster on a GPU)."),
    click.option("--graph", type=choice(GRAPHS), default="off", show_default=True,
                 help="on: capture the per-frame training step as one CUDA graph and replay "
                      "it (CUDA only; refused on a CPU)."),
    click.option("--data-path", type=choice(DATA_PATHS), default="host", show_default=True,
                 help="host: batches from the on-disk cache each step; device: the uint8 "
                      "training set kept on the training device, batches gathered there."),
    click.option("--train-sources", default="", show_default=True,
                 help="Comma-separated sources (a staged dataset's `source` column) to train "
                      "and select on; empty: every source."),
    click.option("--test-sources", default="", show_default=True,
                 help="Comma-separated sources whose test frames are scored (e.g. the one "
                      "held out of --train-sources); empty: every source."),
]

#: Options of the `pipi` commands that are deliberately not MLproject parameters (under
#: `mlflow run`, MLflow's own `--experiment-name` chooses the experiment).
CLI_ONLY_OPTIONS = {"experiment", "worker_spec"}  # worker_spec: calibrate's SLURM tasks
model_prefix_option = click.option(
    "--model-prefix", default="",
    help="First part of the registered models' names, <prefix>-<backbone>-<cell> (default: "
         "$PIPI_MODEL_PREFIX, else pipi). On a shared lab server, a member registers under "
         "their own prefix (docs/lab-server.md).")

def overrides_from(kw: dict) -> dict:
    """The train overrides of a command's keyword arguments (None: not set)."""
    return {k: kw.pop(k) for k in TRAIN_OVERRIDES if k in kw}


#: ``-P prior_params=`` of the entry points that use a calibrated prior (train, galar, ...).
prior_params_option = click.option(
    "--prior-params", default="",
    help="A calibrated prior: the prior_params.json that calibrate logged, or the calibrate "
         "run's id (sets alpha and lambda_eff; lambda_eff scales with the image size).")


