"""`pipi calibrate` / `mlflow run . -e calibrate`: Optuna fits the prior of a frozen pi run."""

from __future__ import annotations

import click

from pipi import tracking
from pipi.calibration.objective import parse_target
from pipi.calibration.study import PRUNERS, SAMPLERS, check_storage_url
from pipi.cli.common import PipiCommand, choice, experiment_option, setup_logging
from pipi.workflows.calibrate import run_calibration


@click.command("calibrate", cls=PipiCommand)
@click.option("--run", "run", required=True,
              help="A finished 5-channel run (pi, pblood_only, phi_only): its run id or a "
                   "models:/ URI (models:/pipi-efficientnet_b0-pi@candidate).")
@click.option("--target", default="kvasir-val", show_default=True,
              help="kvasir-val (the validation split) or galar:<capsule system> (that "
                   "system's calibration fold of a staged Galar folder).")
@click.option("--trials", type=click.IntRange(min=1), default=40, show_default=True,
              help="Trials this call runs (split over the workers); the study keeps them all.")
@click.option("--sampler", type=choice(SAMPLERS), default="tpe", show_default=True)
@click.option("--pruner", type=choice(PRUNERS), default="median", show_default=True,
              help="Stops hopeless trials on the running macro-AUC.")
@click.option("--storage", default="",
              help="Optuna RDB URL (default $PIPI_OPTUNA_STORAGE, else "
                   "sqlite:///<project>/optuna.db; postgresql://... for several machines).")
@click.option("--study", default="",
              help="Study name (default: a hash of run, target and data digest, so a re-run "
                   "continues the same study).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local worker processes on the study.")
@click.option("--data", default="",
              help="Staged folder (default: the run's own data for kvasir-val; a staged Galar "
                   "folder for galar:<system>).")
@experiment_option
def calibrate(run, target, trials, sampler, pruner, storage, study, workers, data, experiment):
    """Fit alpha and lambda_eff of a frozen model's prior on a held-out fold (docs/entry-points.md)."""
    setup_logging()
    parse_target(target)                  # every option checked before anything starts
    check_storage_url(storage)
    tracking.configure()
    r = run_calibration(run=run, target=target, trials=trials, sampler=sampler, pruner=pruner,
                        storage=storage, study=study, workers=workers, data=data or None,
                        experiment=experiment or None)
    base = ("" if r.baseline_value is None
            else f" (the run's own prior: {r.baseline_value:.4f})")
    click.echo(f"study {r.study} on {r.storage}: {len(r.trials_run)} trial(s) run by "
               f"{len(r.workers)} worker(s); {r.n_total} in the study, {r.n_complete} complete, "
               f"{r.n_pruned} pruned")
    click.echo(f"best alpha {r.best.alpha:.4f}, lambda_eff {r.best.lambda_eff_fraction:.4f} x "
               f"diagonal: macro-AUC {r.best_value:.4f} on {target}{base}")
    click.echo(f"calibrate run {r.run_id}: use it with -P prior_params={r.run_id}")
    click.echo(tracking.ui_hint(r.run_id))
