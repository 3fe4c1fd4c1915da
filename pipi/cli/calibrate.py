"""`pipi calibrate` / `mlflow run . -e calibrate`: Optuna fits the prior of a frozen pi run
(mode=frozen), or trains one pi run per trial (mode=train)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.calibration.options import CALIBRATE_MODES, PRUNERS, SAMPLERS, WORKER_SPEC_OPTION
from pipi.cli import lazy_module
from pipi.cli.common import (
    Auto,
    PipiCommand,
    backbone_option,
    choice,
    experiment_option,
    profile_option,
    setup_logging,
    weights_option,
)
from pipi.sweeps.studies import EXECUTORS

if TYPE_CHECKING:
    from pipi.calibration import objective
    from pipi.calibration import study as storage
    from pipi.runs import calibrate as runs
    from pipi.workflows import calibrate as workflow
else:   # loaded when the command runs: `pipi calibrate --help` imports no torch, mlflow, optuna
    objective = lazy_module("pipi.calibration.objective")
    storage = lazy_module("pipi.calibration.study")
    runs = lazy_module("pipi.runs.calibrate")
    workflow = lazy_module("pipi.workflows.calibrate")


@click.command("calibrate", cls=PipiCommand)
@click.option("--mode", type=choice(CALIBRATE_MODES), default="frozen", show_default=True,
              help="frozen: recompute the prior of a trained run (the cheap screen); train: "
                   "each trial trains a pi run with its alpha and lambda_eff.")
@click.option("--run", "run", default="",
              help="mode=frozen: a finished 5-channel run (pi, pblood_only, phi_only): its run "
                   "id or a models:/ URI (models:/pipi-efficientnet_b0-pi@candidate).")
@click.option("--target", default="kvasir-val", show_default=True,
              help="kvasir-val (the validation split) or galar:<capsule system> (that "
                   "system's calibration fold of a staged Galar folder).")
@click.option("--search", default="auto", show_default=True,
              help="The prior parameters fitted: alpha (lambda_eff fixed at 0.25 x the "
                   "diagonal, or the run's own), alpha,lambda_eff (both), or auto (mode=train: "
                   "alpha, as the paper fits it; mode=frozen: both).")
@click.option("--trials", type=click.IntRange(min=1), default=40, show_default=True,
              help="Trials this call runs (split over the workers); the study keeps them all.")
@click.option("--sampler", type=choice(SAMPLERS), default="tpe", show_default=True)
@click.option("--pruner", type=choice(PRUNERS), default="median", show_default=True,
              help="Stops hopeless trials on the running macro-AUC.")
@click.option("--storage", "storage_url", default="",
              help="Optuna RDB URL (default $PIPI_OPTUNA_STORAGE, else "
                   "sqlite:///<project>/optuna.db; postgresql://... for several machines).")
@click.option("--study", default="",
              help="Study name (default: a hash of run, target and data digest, so a re-run "
                   "continues the same study).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on the study (mode=train: each trains its trials).")
@click.option("--executor", type=choice(EXECUTORS), default="local", show_default=True,
              help="mode=train: where the workers run (local processes, or one SLURM job "
                   "array of `workers` tasks on the same RDB study).")
@click.option("--epochs", type=Auto(int, minimum=1), default="auto", show_default=True,
              help="mode=train: epochs of each trial's run (auto: the profile's).")
@backbone_option
@click.option("--seed", type=int, default=42, show_default=True,
              help="mode=train: the seed of every trial's run.")
@profile_option
@weights_option
@click.option("--data", default="",
              help="Staged folder (mode=frozen: default the run's own data for kvasir-val; a "
                   "staged Galar folder for galar:<system>. mode=train: the Kvasir folder the "
                   "trials train on, default the synthetic release).")
@click.option("--target-data", "target_data", default="",
              help="mode=train, target=galar:<system>: the staged Galar folder whose "
                   "calibration fold scores each trial, or synthetic[-tiny|-demo] (as galar's "
                   "--data; the trials train on --data).")
@experiment_option
@click.option(WORKER_SPEC_OPTION, "worker_spec", default="", hidden=True,
              help="Internal: a SLURM task of mode=train runs the worker this file describes.")
def calibrate(mode, run, target, search, trials, sampler, pruner, storage_url, study, workers,
              executor, epochs, backbone, seed, profile, weights, data, target_data, experiment,
              worker_spec):
    """Fit alpha and lambda_eff of a frozen model's prior on a held-out fold (docs/entry-points.md)."""
    setup_logging()
    if worker_spec:
        r = runs.run_worker_file(worker_spec)
        click.echo(f"worker {r.worker}: trials {r.trials} (trained {r.trained}, reused {r.reused})")
        return
    objective.parse_target(target)        # every option checked before anything starts
    objective.parse_search(search, mode=mode)
    storage.check_storage_url(storage_url)
    tracking.configure()
    train_options = ({} if mode == "frozen" else {
        "epochs": epochs, "backbone": backbone, "seed": seed,
        "executor": executor, "profile": profile, "weights": weights})
    if target_data:  # mode=frozen refuses it in one line
        train_options["target_data"] = target_data
    r = workflow.run_calibration(mode=mode, run=run, target=target, trials=trials, sampler=sampler,
                        pruner=pruner, storage=storage_url, study=study, workers=workers,
                        data=data or None, experiment=experiment or None, search=search,
                        **train_options)
    own = "the default" if r.mode == "train" else "the run's own"
    base = ("" if r.baseline_value is None
            else f" ({own} prior: {r.baseline_value:.4f})")
    click.echo(f"study {r.study} on {r.storage}: {len(r.trials_run)} trial(s) run by "
               f"{len(r.workers)} worker(s); {r.n_total} in the study, {r.n_complete} complete, "
               f"{r.n_pruned} pruned")
    if r.mode == "train":
        click.echo(f"{len(r.trained)} trial(s) trained a pi run, {len(r.reused)} reused a "
                   "FINISHED run with the same configuration")
    fixed = " (fixed)" if objective.parse_search(search, mode=mode) == ("alpha",) else ""
    click.echo(f"best alpha {r.best.alpha:.4f}, lambda_eff {r.best.lambda_eff_fraction:.4f} x "
               f"diagonal{fixed}: macro-AUC {r.best_value:.4f} on {target}{base}")
    click.echo(f"calibrate run {r.run_id}: use it with -P prior_params={r.run_id}")
    click.echo(tracking.ui_hint(r.run_id))
