"""The ``aggregate`` workflow: the paper's tables, cross-seed statistics and a dashboard,
computed from the per-frame predictions of MLflow runs.

One MLflow read (:func:`pipi.tracking.load_runs`, every page of ``search_runs``), one
download per run of its ``predictions/`` artifact (cached by run id), then pure functions:

    load_runs -> select_runs -> build_evidence -> build_report -> write_report
    (tracking)   (analysis)     (analysis)        (report)        (files, logged as artifacts)

Every number is recomputed from the predictions (never from logged metrics) and every
table row carries the run ids it came from. The statistics are described in
:mod:`pipi.analysis.compare` and :mod:`pipi.stats`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.analysis import AggregateOptions, build_evidence, check_single_dataset, select_runs
from pipi.errors import DataError
from pipi.paths import pipi_home
from pipi.report import Report, build_report, dashboard
from pipi.report.tables import dump_json, table_markdown

__all__ = ["AggregateResult", "default_cache_dir", "fetch_predictions", "run_aggregate",
           "write_report"]

log = logging.getLogger(__name__)


def write_report(report: Report, folder: Path, *, aggregate_run_id: str = "",
                 aggregate_experiment_id: str = "") -> Path:
    """Write Markdown, CSV, JSON, figures and the dashboard into ``folder``."""

    folder = Path(folder)
    (folder / "tables").mkdir(parents=True, exist_ok=True)
    for t in report.tables:
        t.write(folder / "tables")
    fig_files = {}
    if report.figures:
        (folder / "figures").mkdir(exist_ok=True)
        for name, png in report.figures.items():
            (folder / "figures" / f"{name}.png").write_bytes(png)
            fig_files[name] = f"figures/{name}.png"
    meta = {**report.meta, "aggregate_run_id": aggregate_run_id,
            "aggregate_experiment_id": aggregate_experiment_id or report.meta["experiment_id"]}
    doc = {**meta, "summary": report.summary,
           "tables": {t.key: t.to_json() for t in report.tables},
           "figures": {n: {"file": f, "caption": report.captions.get(n, ""),
                           "run_ids": report.figure_runs.get(n, {})} for n, f in fig_files.items()},
           "curves": report.curves}
    dump_json(doc, folder / "aggregate.json")
    md = [f"# pipi aggregate: {meta.get('experiment', '')}", "", "```", report.summary, "```", ""]
    for t in report.tables:
        md.append(table_markdown(t))
    for n, f in fig_files.items():
        md += [f"![{report.captions.get(n, n)}]({f})", "", report.captions.get(n, ""), ""]
    (folder / "report.md").write_text("\n".join(md))
    (folder / "dashboard.html").write_text(dashboard.render_dashboard(report, meta=meta))
    return folder


# --------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class AggregateResult:
    run_id: str | None
    out: Path | None
    report: Report
    summary: str


def fetch_predictions(runs: pd.DataFrame, cache_dir: Path) -> tuple[dict[str, Path], pd.DataFrame]:
    """Download each run's ``predictions/`` once (cache by run id); runs without it excluded."""

    dirs, missing = {}, []
    for r in runs.itertuples(index=False):
        cached = Path(cache_dir) / r.run_id / "predictions" / "schema.json"
        if not cached.is_file() and not tracking.has_artifact(r.run_id, "predictions"):
            missing.append(r.run_id)
            continue
        dirs[r.run_id] = tracking.download_predictions(r.run_id, cache_dir)
    return dirs, runs[runs["run_id"].isin(missing)].assign(reason="no predictions artifact")


def default_cache_dir() -> Path:
    """Where predictions are cached by run id: ``$PIPI_HOME/cache/predictions``."""
    return pipi_home() / "cache" / "predictions"


def run_aggregate(*, experiment: str = "pipi", filter_string: str = "", out: Path | None = None,
                  cache_dir: Path | None = None, options: AggregateOptions | None = None,
                  log_run: bool = True) -> AggregateResult:
    """Query the runs, compute every table and figure, log them as an ``aggregate`` run.

    Parameters
    ----------
    experiment : str
        MLflow experiment whose runs are aggregated (the aggregate run is logged there too).
    filter_string : str
        MLflow search filter, e.g. ``"tags.`pipi.backbone` = 'efficientnet_b0'"``.
    out : Path, optional
        Also keep a local copy of everything logged (tables, JSON, figures, dashboard).
    cache_dir : Path, optional
        Where predictions are cached by run id (default ``$PIPI_HOME/cache/predictions``).
    options : AggregateOptions
    log_run : bool
        Log an MLflow run of entry point ``aggregate`` with the outputs as artifacts.

    Raises
    ------
    DataError
        No run to aggregate, or runs of different data digests / class lists / test frames.
    """

    runs = tracking.load_runs(experiment, filter_string)
    kept, excluded = select_runs(runs)
    if kept.empty:
        raise DataError(f"no FINISHED model runs in experiment {experiment!r}"
                        + (f" matching {filter_string!r}" if filter_string else "")
                        + f" ({len(runs)} runs seen, all excluded)")
    check_single_dataset(kept)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    dirs, no_preds = fetch_predictions(kept, cache)
    kept = kept[kept["run_id"].isin(dirs)].reset_index(drop=True)
    excluded = pd.concat([excluded, no_preds], ignore_index=True)
    if kept.empty:
        raise DataError(f"no run of experiment {experiment!r} has a predictions/ artifact")
    uri = tracking.current_tracking_uri()
    ev = build_evidence(kept, dirs, excluded=excluded, all_runs=runs, experiment=experiment,
                        experiment_id=str(runs["experiment_id"].iloc[0]), tracking_uri=uri,
                        filter_string=filter_string)
    report = build_report(ev, options)
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="pipi-aggregate-"))
    run_id = None
    try:
        if log_run:
            tags = {tracking.TAG_DATA_DIGEST: ev.data_digest, "pipi.aggregate.n_runs": len(kept)}
            # under `mlflow run` the run exists already (MLFLOW_RUN_ID), in the experiment
            # that `mlflow run` chose: attach to it instead of switching experiments
            attached = bool(os.environ.get("MLFLOW_RUN_ID"))
            with tracking.pipi_run(entry_point="aggregate",
                                   experiment=None if attached else experiment,
                                   run_name="aggregate", tags=tags) as run:
                run_id = run.info.run_id
                # prefixed: `mlflow run` has already logged its own experiment/filter/out
                tracking.log_params({f"aggregate.{k}": v for k, v in {
                    "experiment": experiment, "filter": filter_string, "n_runs": len(kept),
                    **report.meta["options"]}.items()})
                write_report(report, folder, aggregate_run_id=run_id,
                             aggregate_experiment_id=run.info.experiment_id)
                tracking.log_artifacts(folder)
        else:
            write_report(report, folder)
    finally:
        if not out:
            shutil.rmtree(folder, ignore_errors=True)
    summary = report.summary
    if run_id:
        summary += f"\naggregate run {run_id}: {tracking.ui_hint(run_id)}"
    if out:
        summary += f"\nlocal copy: {Path(out).resolve()}"
    log.info("aggregated %d runs into %d tables", len(kept), len(report.tables))
    return AggregateResult(run_id, Path(out) if out else None, report, summary)
