"""`pipi galkva`: validate, score and write GalKva-2026 submissions.

Only `submission --experiment` reads MLflow (through :mod:`pipi.workflows.galkva`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import click

from pipi import tracking
from pipi.analysis import HEADLINE_BACKBONE
from pipi.cells import CELLS, PER_FRAME_CELLS
from pipi.cli.common import with_options
from pipi.errors import ConfigError, PipiError
from pipi.galkva import (
    BENCHMARK_VERSION,
    LEADERBOARD_HEADER,
    SCORING_SETS,
    InvalidSubmissionError,
    MethodInfo,
    Submitter,
    build_submission,
    check_submission,
    load_prediction_dir,
    recompute,
    score_predictions,
    score_submission,
    validate_submission,
    write_submission,
)
from pipi.galkva.report import evaluation_json, markdown_report, write_text_atomic
from pipi.galkva.validate import load_submission
from pipi.workflows.galkva import experiment_galkva_runs

_TRAINED_ON = ("Kvasir-Capsule", "Galar", "Both", "Other")


def _errors(fn):
    """PipiError -> one 'error:' line and exit 2; an invalid submission -> its list, exit 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except InvalidSubmissionError as exc:
            for v in exc.violations:
                click.echo(str(v), err=True)
            click.echo(f"invalid submission: {len(exc.violations)} problem(s)", err=True)
            raise SystemExit(1) from None
        except PipiError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(2) from None

    return wrapper


_resampling = [
    click.option("--n-resamples", type=click.IntRange(min=100), default=2000, show_default=True,
                 help="Video-bootstrap resamples per dataset."),
    click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed."),
]



@click.group("galkva")
def galkva() -> None:
    """GalKva-2026 cross-vendor benchmark: validate, score and write submissions.

    Retention = Delta_Galar / Delta_Kvasir (each Delta = method minus its own RGB baseline,
    macro-AUC over the scoring set); bands Strong >= 1.0, Positive 0.75-1.0, Partial
    0.30-0.75, Null -0.10-0.30, Negative < -0.10; undefined when Delta_Kvasir <= 0.
    """


@galkva.command("validate")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@_errors
def validate_cmd(file: Path) -> None:
    """Check FILE against the benchmark's released draft-07 schema; exit 0 if valid, 1 if not.

    pipi's own checks (numbers that contradict each other, seed counts that disagree, keys
    the schema does not know) are printed as warnings, labelled so; they never fail it.
    """
    violations = validate_submission(file)
    warnings = check_submission(file, scoring_sets=SCORING_SETS) if not violations else []
    for v in violations:
        click.echo(str(v))
    if violations:
        click.echo(f"{file}: INVALID ({len(violations)} problem(s))")
        raise SystemExit(1)
    for w in warnings:
        click.echo(str(w))
    click.echo(f"{file}: valid GalKva-2026 submission (released schema)"
               + (f"; {len(warnings)} pipi warning(s)" if warnings else ""))


@galkva.command("score")
@click.argument("file", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--predictions", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="DIR/{kvasir,galar}/{baseline,method}/<seed>/ prediction folders: recompute "
                   "every number (and check FILE's self-reported ones against them).")
@click.option("--markdown", is_flag=True, help="Print only the leaderboard Markdown row.")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write a self-contained Markdown report here (tables, "
                                 "per-class p-values and intervals, the leaderboard row).")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write every number of the score as JSON here.")
@click.option("--tolerance", type=float, default=1e-3, show_default=True,
              help="Largest accepted gap between a self-reported and a recomputed AUC.")
@with_options(_resampling)
@_errors
def score_cmd(file, predictions, markdown, report_path, json_path, tolerance, n_resamples,
              seed) -> None:
    """Retention, band, sign-positive seeds and a leaderboard row for a submission FILE.

    Without --predictions every number is self-reported and labelled so. With it, numbers
    are recomputed from per-frame predictions (per-seed paired DeLong tests, per-class
    p-values combined across seeds with Bonferroni and BH adjustments, percentile and BCa
    video-bootstrap intervals of every delta and of the retention) and any self-reported
    number of FILE that disagrees is flagged (exit 1, after the report is written).
    """
    if file is None and predictions is None:
        raise click.UsageError("give a submission FILE, --predictions DIR, or both")
    if not tolerance >= 0:  # NaN too
        raise ConfigError(f"--tolerance {tolerance}: must be a number >= 0 (the largest "
                          "accepted gap between a self-reported and a recomputed AUC)")
    if file is not None:
        violations = validate_submission(file)
        if violations:
            raise InvalidSubmissionError(str(file), violations)
    rec = None
    if predictions is not None:
        version = load_submission(file)["benchmark_version"] if file else BENCHMARK_VERSION
        rec = recompute(load_prediction_dir(predictions), benchmark_version=version,
                        n_resamples=n_resamples, rng=seed)
        score = score_predictions(rec, submission=file, tolerance=tolerance,
                                  method_name=predictions.name)
    else:
        score = score_submission(file, tolerance=tolerance)
    if markdown:
        click.echo(LEADERBOARD_HEADER)
        click.echo(score.markdown_row())
    else:
        click.echo(score.report())
        click.echo("\nLeaderboard row:\n" + LEADERBOARD_HEADER + "\n" + score.markdown_row())
    if json_path is not None:
        write_text_atomic(evaluation_json(score, rec), json_path)
        click.echo(f"wrote {json_path}", err=True)
    if report_path is not None:
        write_text_atomic(markdown_report(score, rec), report_path)
        click.echo(f"wrote {report_path}", err=True)
    if score.discrepancies:
        raise SystemExit(1)


@galkva.command("submission")
@click.option("--predictions", type=click.Path(path_type=Path, file_okay=False, exists=True),
              default=None, help="DIR/{kvasir,galar}/{baseline,method}/<seed>/ prediction folders.")
@click.option("--experiment", default=None,
              help="Or: an MLflow experiment holding the Kvasir runs of --baseline and --method "
                   "and their `galar` zero-shot runs (read as `aggregate` reads them).")
@click.option("--method", "method_cell", type=click.Choice(PER_FRAME_CELLS), default="pi",
              show_default=True, help="With --experiment: the method's cell.")
@click.option("--baseline", "baseline_cell", type=click.Choice(PER_FRAME_CELLS), default="a",
              show_default=True, help="With --experiment: the RGB baseline's cell.")
@click.option("--backbone", default=HEADLINE_BACKBONE, show_default=True,
              help="With --experiment: the backbone of both cells.")
@click.option("--filter", "filter_", default="", help="With --experiment: an MLflow filter.")
@click.option("--label", default="", help="With --experiment: use the imported runs of this "
              "source label (`import -P label=`, e.g. released): the arms '<cell> (<label>)' "
              "and their `galar` runs, never trained runs.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.option("--submitter-name", required=True)
@click.option("--affiliation", required=True)
@click.option("--email", required=True)
@click.option("--method-name", default=None, help="Method name (at most 120 characters; "
              "with --experiment default: from the cells and backbone).")
@click.option("--description", default=None, help="At least 20 characters (with --experiment "
              "default: what the runs are).")
@click.option("--trained-on", type=click.Choice(_TRAINED_ON), default="Kvasir-Capsule",
              show_default=True)
@click.option("--code-url", default=None)
@click.option("--preprint-url", default=None)
@click.option("--notes", default=None)
@click.option("--benchmark-version", type=click.Choice(sorted(SCORING_SETS)),
              default=BENCHMARK_VERSION, show_default=True)
@with_options(_resampling)
@_errors
def submission_cmd(predictions, experiment, method_cell, baseline_cell, backbone, filter_,
                   label, out, submitter_name, affiliation, email, method_name, description,
                   trained_on, code_url, preprint_url, notes, benchmark_version,
                   n_resamples, seed) -> None:
    """Write a valid submission whose every number is computed from predictions.

    From prediction folders (--predictions) or from the runs of an MLflow experiment
    (--experiment, --method, --baseline). Run ids (each seed folder's optional run.json, or
    the MLflow runs) and the recomputed statistics go into pipi's `provenance` block (an
    extra top-level key, which the released schema allows).
    """
    if (predictions is None) == (experiment is None):
        raise click.UsageError("give exactly one of --predictions DIR and --experiment NAME")
    if experiment is not None:
        tracking.configure()
        arm = (lambda c: f"{c} ({label.strip()})") if label.strip() else (lambda c: c)
        runs = experiment_galkva_runs(experiment, method=arm(method_cell),
                                      baseline=arm(baseline_cell), backbone=backbone,
                                      filter_string=filter_)
        source = f", {label.strip()}" if label.strip() else ""
        method_name = method_name or f"pipi {method_cell} vs {baseline_cell} ({backbone}{source})"
        description = description or (
            f"pipi cell {method_cell} ({CELLS[method_cell].description}) against the RGB "
            f"baseline cell {baseline_cell}, {backbone}, trained on Kvasir-Capsule and scored "
            f"zero-shot on Galar; " + (f"imported {label.strip()} checkpoints, " if source else "")
            + f"runs of MLflow experiment {experiment!r}.")
    else:
        if not method_name or not description:
            raise click.UsageError("--predictions needs --method-name and --description")
        runs = load_prediction_dir(predictions)
    rec = recompute(runs, benchmark_version=benchmark_version, n_resamples=n_resamples, rng=seed)
    doc = build_submission(
        rec,
        submitter=Submitter(name=submitter_name, affiliation=affiliation, email=email),
        method=MethodInfo(name=method_name, description=description, trained_on=trained_on,
                          code_url=code_url, preprint_url=preprint_url),
        notes=notes,
    )
    write_submission(doc, out)
    click.echo(score_predictions(rec, submission=doc).report())
    click.echo(f"\nwrote {out} (valid against the GalKva-2026 schema)")
