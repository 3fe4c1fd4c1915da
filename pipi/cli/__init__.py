"""The ``pipi`` command line: one short module per entry point, options from the registries.

``pipi <name>`` exists for every MLproject entry point with the same options (the
``entrypoints/<name>.py`` scripts run ``ENTRY_POINTS[name]``), plus ``pipi synthesize`` and
``pipi stage kvasir`` for releases on disk, ``pipi export cv2024`` for a run's Capsule Vision
2024 prediction sheet, and the two servers ``pipi server`` (tracking) and ``pipi serve`` (a model).

The door is light (issue 39): this module imports click and pipi's errors only. A command's
module (and torch, mlflow, the registries it needs) is imported when that command is asked
for; ``pipi --help`` lists the commands from :data:`COMMANDS` without importing any of them
(a test holds the table to the commands' own help).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import sys
from collections.abc import Iterator, Mapping

import click

from pipi import tracking  # a light face: its names are imported on first use
from pipi.errors import PipiError

#: Every ``pipi`` command: its module under ``pipi.cli``, the click object there and the
#: first paragraph of its help (what ``pipi --help`` lists).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "ablate": ("ablate", "ablate", "Sweep cells x seeds x backbones as nested runs; idempotent "
               '(docs/entry-points.md, "ablate").'),
    "aggregate": ("aggregate", "aggregate", "Paper tables, cross-seed statistics, figures and a "
                  "dashboard from per-frame predictions."),
    "calibrate": ("calibrate", "calibrate", "Fit alpha and lambda_eff of a frozen model's prior "
                  "on a held-out fold (docs/entry-points.md)."),
    "export": ("export", "export", "Write a run's predictions in another tool's format."),
    "galar": ("galar", "galar", "Score Kvasir-trained runs zero-shot on Galar: one child run per "
              "source run."),
    "galkva": ("galkva", "galkva", "GalKva-2026 cross-vendor benchmark: validate, score and "
               "write submissions."),
    "import": ("importer", "import_", "Bring an outside checkpoint or prediction file into "
               "MLflow as a run (MLproject `import`)."),
    "promote": ("promote", "promote", "Gate a registered version on cross-seed evidence; exit 0 "
                "promoted, 1 refused."),
    "onnx": ("onnx", "onnx", "Write a registered per-frame model, prior included, as an ONNX "
             "graph checked with ONNX Runtime."),
    "predict": ("predict", "predict", "Score a folder of frames or a staged split with a "
                "registered model into a parquet file."),
    "robustness": ("robustness", "robustness", "Score finished runs on the test split under the "
                   "paper's perturbations (docs/entry-points.md)."),
    "serve": ("serve", "serve", "Serve a model with MLflow's scoring server and pipi's request "
              "limits until Ctrl-C."),
    "server": ("server", "server", "Start a lab tracking server (PostgreSQL + SeaweedFS S3 + "
               "mlflow server) until Ctrl-C."),
    "stage": ("stage", "stage", "Stage a release into the patient-disjoint layout pipi trains "
              "on (MLproject `stage`)."),
    "synthesize": ("synthesize", "synthesize", "Write synthetic releases in the real on-disk "
                   "formats."),
    "train": ("train", "train", "Train one cell and register its model (the run contract: "
              "docs/run-contract.md)."),
    "transplant": ("transplant", "transplant", "Where the +PI lift lives: weight surgery between "
                   "paired runs, and Grad-CAM (docs/entry-points.md)."),
}
#: The MLproject entry points (``entrypoints/<name>.py`` runs ``ENTRY_POINTS[name]``).
ENTRY_POINT_NAMES = ("stage", "train", "ablate", "transplant", "galar", "calibrate",
                     "robustness", "aggregate", "promote", "import", "predict")


def _fail(message: str) -> None:
    """One clear line and exit 2; under ``mlflow run`` its run is marked FAILED with the reason."""
    click.echo(f"error: {message}", err=True)
    run_id = tracking.launched_run_id()
    if run_id:
        try:
            tracking.configure()
            if tracking.get_run(run_id).live:
                tracking.terminate_run(run_id, "FAILED", message)
        except PipiError:
            pass
    sys.exit(2)


def _freeze_at_exit() -> None:
    """The last exit handler (registered before any other): the objects still alive go to
    the collector's permanent generation, so the interpreter's final collections do not walk
    the million objects torch, torchvision and MLflow made (1.4 s of every command that loaded
    them, on 2 cores: docs/benchmarks.md). Every other exit handler has run; objects still
    referenced are released as usual; only garbage in reference cycles stays uncollected, as
    Python allows for objects alive at exit."""
    gc.freeze()


_FREEZE_REGISTERED: list[bool] = []


def _main(super_main, *args, standalone_mode: bool = True, **kw):
    """click's ``main`` with one line (not a traceback) for an error, Ctrl-C or SIGTERM."""
    if not standalone_mode:
        return super_main(*args, standalone_mode=False, **kw)
    if not _FREEZE_REGISTERED:   # once per process (a test may call main many times)
        atexit.register(_freeze_at_exit)   # first registered, last run
        _FREEZE_REGISTERED.append(True)
    tracking.install_signal_handlers()  # SIGTERM is handled like Ctrl-C (docs/faults.md)
    tracking.end_with_mlflow_run()  # `mlflow run` killed alone: this run ends KILLED too
    try:
        return super_main(*args, standalone_mode=False, **kw)
    except click.exceptions.Abort as exc:
        cause = exc.__cause__
        if isinstance(cause, KeyboardInterrupt):
            if not tracking.reported(cause):  # a run that ended KILLED already said so
                click.echo(f"aborted: {tracking.interrupt_reason(cause)}", err=True)
            # the shell's convention: 128 + the signal's number
            sys.exit(143 if isinstance(cause, tracking.Terminated) else 130)
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as exc:  # a bad option: same path as any other error
        _fail(exc.format_message())
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


class PipiCommand(click.Command):
    """Turns PipiError (and a bad option) into one clear line and a non-zero exit."""

    def invoke(self, ctx):
        # the run `mlflow run` made for this process, remembered for the command (MLflow
        # clears MLFLOW_RUN_ID when any run ends; pipi does not write it back, issue 39)
        with tracking.remembering_launched_run():
            try:
                return super().invoke(ctx)
            except PipiError as exc:
                _fail(str(exc))

    def main(self, *args, **kw):
        return _main(super().main, *args, **kw)


class PipiGroup(click.Group):
    command_class = PipiCommand

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PipiError as exc:
            _fail(str(exc))

    def main(self, *args, **kw):
        return _main(super().main, *args, **kw)


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("alembic", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _Deferred:
    """A module imported on the first attribute access. Not an entry of ``sys.modules``
    (importlib's ``LazyLoader`` is: anything that walks them, as ``inspect.getmodule`` does
    while torch registers its operators, then executed the module mid-way through another
    import, in a cycle)."""

    def __init__(self, name: str):
        self._name, self._module = name, None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


#: ``--experiment`` of the commands that start runs (here, light: a command that defers its
#: workflow does not import ``cli.common``).
experiment_option = click.option(
    "--experiment", default="",
    help="MLflow experiment (default: MLflow's own choice, MLFLOW_EXPERIMENT_NAME or Default). "
         "Under `mlflow run`, use `mlflow run --experiment-name` instead.")

#: ``-m`` of the commands that take a registered per-frame model (predict, onnx).
frame_model_option = click.option(
    "-m", "--model", required=True,
    help="The model: models:/NAME@ALIAS, models:/NAME/VERSION or runs:/RUN/model (a per-frame "
         "cell's).")


def lazy_module(name: str):
    """Module ``name``, imported on its first attribute access: a command module names its
    workflow this way so that its ``--help`` imports none of it."""
    return sys.modules.get(name) or _Deferred(name)


def command(name: str) -> click.Command:
    """The click command ``pipi <name>`` (its module imported now)."""
    module, attr, _ = COMMANDS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)


class LazyGroup(PipiGroup):
    """A group whose commands are imported when one is asked for (:data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = [(n, click.utils.make_default_short_help(COMMANDS[n][2], limit))
                for n in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """pipi: training-time optical priors for capsule endoscopy, on MLflow."""
    setup_logging(verbose)


class _EntryPoints(Mapping):
    """``{entry point: click command}``, each command imported when it is looked up."""

    def __getitem__(self, name: str) -> click.Command:
        if name not in ENTRY_POINT_NAMES:
            raise KeyError(name)
        return command(name)

    def __iter__(self) -> Iterator[str]:
        return iter(ENTRY_POINT_NAMES)

    def __len__(self) -> int:
        return len(ENTRY_POINT_NAMES)


ENTRY_POINTS: Mapping[str, click.Command] = _EntryPoints()


def __getattr__(name: str):
    if name == "CLI_ONLY_OPTIONS":   # the registries' module, imported on first use
        return importlib.import_module(f"{__name__}.common").CLI_ONLY_OPTIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CLI_ONLY_OPTIONS", "COMMANDS", "ENTRY_POINTS", "PipiCommand", "PipiGroup", "command",
           "experiment_option", "frame_model_option", "lazy_module", "main", "setup_logging"]
