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

import contextlib
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.analysis import AggregateOptions
from pipi.errors import ConfigError
from pipi.report import Report, build_report, dashboard
from pipi.report.build import AGGREGATE_FORMAT
from pipi.report.descriptions import aggregate_description
from pipi.report.tables import dump_json, table_markdown
from pipi.runs.evidence import load_evidence

__all__ = ["MARKER", "AggregateResult", "OutFolder", "prepare_out", "run_aggregate", "write_report"]

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


# --------------------------------------------------------------------------- the out folder
#: Marker file of a report folder: what aggregate wrote there (and may replace next time).
MARKER = ".pipi-report.json"


def _cannot_write(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(f"out={path}: cannot write there ({exc.strerror or exc}); choose a "
                       "writable folder")


@dataclass
class OutFolder:
    """The user's ``out`` folder, checked before anything is computed.

    ``previous`` lists the files of a previous pipi report there (from its marker): only
    those may be replaced. ``created`` are the folders this run made (removed again if the
    run writes nothing).
    """

    path: Path
    previous: tuple[str, ...] = ()
    created: tuple[Path, ...] = ()
    installed: bool = False

    def install(self, folder: Path) -> None:
        """Copy the report in ``folder`` here: drop the previous report's files, never
        touch other files (ConfigError naming any file that would be overwritten)."""
        new = sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())
        clash = [f for f in new if (self.path / f).exists() and f not in self.previous]
        if clash:
            raise ConfigError(f"out={self.path}: refusing to overwrite {clash[:5]}, which no "
                              "pipi report wrote; choose a new or empty folder")
        try:
            for f in self.previous:
                target = self.path / f
                if target.is_file() and target.resolve().is_relative_to(self.path.resolve()):
                    target.unlink()
            for f in new:
                (self.path / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(folder / f, self.path / f)
            dump_json({"format": AGGREGATE_FORMAT, "files": new}, self.path / MARKER)
        except OSError as exc:
            raise _cannot_write(Path(exc.filename or self.path), exc) from None
        self.installed = True

    def discard_if_unused(self) -> None:
        """Remove the folders this run created when nothing was written into them."""
        if self.installed:
            return
        for d in reversed(self.created):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty


def prepare_out(out: Path) -> OutFolder:
    """Check (and create) ``out`` before the runs are read.

    Refuses, with one ConfigError line naming the path: a file; a non-empty folder that is
    not a previous pipi report (no :data:`MARKER`); a folder that cannot be created or
    written.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={out}: exists and is not a folder; choose a new folder")
    previous: tuple[str, ...] = ()
    try:
        if out.is_dir() and any(out.iterdir()):
            marker = out / MARKER
            if not marker.is_file():
                raise ConfigError(f"out={out}: the folder is not empty and is not a previous "
                                  f"pipi report (no {MARKER}); aggregate never overwrites other "
                                  "files: choose a new or empty folder")
            try:
                previous = tuple(str(f) for f in json.loads(marker.read_text())["files"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"out={out}: unreadable {MARKER} ({exc}); choose a new "
                                  "folder") from None
        missing = [p for p in (out, *out.parents) if not p.exists()]
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".pipi-write-test-"):
            pass
    except OSError as exc:
        raise _cannot_write(out, exc) from None
    return OutFolder(out, previous, tuple(reversed(missing)))


# --------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class AggregateResult:
    run_id: str | None
    out: Path | None
    report: Report
    summary: str


def run_aggregate(*, experiment: str | None = None, filter_string: str = "",
                  out: Path | None = None, resample: str = "video",
                  cache_dir: Path | None = None, options: AggregateOptions | None = None,
                  log_run: bool = True, pair_imported: bool = False,
                  channel_family: str | None = None) -> AggregateResult:
    """Query the runs, compute every table and figure, log them as an ``aggregate`` run.

    Parameters
    ----------
    experiment : str, optional
        MLflow experiment whose runs are aggregated (the aggregate run is logged there too);
        default ``tracking.tags.DEFAULT_EXPERIMENT``.
    filter_string : str
        MLflow search filter, e.g. ``"tags.`pipi.backbone` = 'efficientnet_b0'"``.
    out : Path, optional
        Also keep a local copy of everything logged (tables, JSON, figures, dashboard).
        Checked before anything is computed: it must be new, empty or a previous pipi
        report (marker file ``.pipi-report.json``), and writable; only the files of the
        previous report are replaced, never other files.
    resample : {"video", "frame"}
        Bootstrap unit: test videos (clustered; the paper) or frames (the published code).
        Overrides ``options.resample``.
    cache_dir : Path, optional
        Where predictions are cached by run id (default ``$PIPI_HOME/cache/predictions``).
    options : AggregateOptions, optional
    log_run : bool
        Log an MLflow run of entry point ``aggregate`` with the outputs as artifacts.
    pair_imported : bool
        Let runs of the ``import`` entry point (``pipi.source=external``) join the arm of
        their cell. By default they form arms of their own, ``<cell> (<label>)`` (e.g.
        ``a (released)``), never paired with trained runs (``analysis.mark_imported``).
    channel_family : {"paper", "vs_pi"}, optional
        BH family of the training-time channel ablation: the paper's five paired tests, or
        only the three against full +PI. Overrides ``options.channel_family`` when given.

    Raises
    ------
    ConfigError
        A bad ``resample``; an ``out`` that is not writable, is a file, or is a non-empty
        folder that is not a previous pipi report.
    DataError
        No run to aggregate; runs of different data digests / class lists / test frames;
        an arm with runs of several recipes.
    """
    options = replace(options or AggregateOptions(), resample=resample)
    if channel_family is not None:
        options = replace(options, channel_family=channel_family)
    experiment = experiment or tracking.tags.DEFAULT_EXPERIMENT
    target = prepare_out(Path(out)) if out else None
    try:
        report, ev, kept = _compute(experiment, filter_string, cache_dir, options,
                                    pair_imported)
        run_id = _write_and_log(report, ev, kept, experiment, filter_string, target, log_run,
                                pair_imported)
    finally:
        if target is not None:
            target.discard_if_unused()
    summary = report.summary
    if run_id:
        summary += (f"\naggregate run {run_id}: {tracking.ui_hint(run_id)}"
                    f"\ndashboard in the MLflow UI: {tracking.artifact_url(run_id, 'dashboard.html')}")
    if target is not None:
        summary += f"\nlocal copy: {target.path.resolve()}"
    log.info("aggregated %d runs into %d tables", len(kept), len(report.tables))
    return AggregateResult(run_id, target.path if target else None, report, summary)


def _compute(experiment: str, filter_string: str, cache_dir: Path | None,
             options: AggregateOptions, pair_imported: bool = False):
    """(report, evidence, kept runs): the MLflow read, the downloads, the report."""
    ev, kept = load_evidence(experiment, filter_string, cache_dir, pair_imported=pair_imported)
    return build_report(ev, options), ev, kept


def _write_and_log(report: Report, ev, kept: pd.DataFrame, experiment: str, filter_string: str,
                   target: OutFolder | None, log_run: bool, pair_imported: bool = False
                   ) -> str | None:
    """Write the report into a fresh folder, log it as the aggregate run, copy it to ``out``."""
    folder = Path(tempfile.mkdtemp(prefix="pipi-aggregate-"))
    run_id = None
    try:
        if log_run:
            tags = {tracking.tags.TAG_DATA_DIGEST: ev.data_digest,
                    tracking.tags.TAG_AGGREGATE_N_RUNS: len(kept)}
            # under `mlflow run` the run exists already (MLFLOW_RUN_ID), in the experiment
            # that `mlflow run` chose: attach to it instead of switching experiments
            attached = bool(tracking.launched_run_id())
            name = tracking.experiment_name(experiment)   # `mlflow run` may pass its id
            with tracking.pipi_run(entry_point="aggregate",
                                   experiment=None if attached else experiment,
                                   run_name=f"aggregate {name} ({len(kept)} runs)",
                                   tags=tags) as run:
                run_id = run.run_id
                # prefixed: `mlflow run` has already logged its own experiment/filter/out
                run.log_params({f"aggregate.{k}": v for k, v in {
                    "experiment": name, "filter": filter_string, "n_runs": len(kept),
                    "pair_imported": pair_imported,
                    **report.meta["options"]}.items()})
                write_report(report, folder, aggregate_run_id=run_id,
                             aggregate_experiment_id=run.experiment_id)
                run.log_artifacts(folder)
                run.set_description(aggregate_description(
                    report, n_runs=len(kept), dashboard_url=tracking.artifact_url(
                        run_id, "dashboard.html", run.experiment_id)))
        else:
            write_report(report, folder)
        if target is not None:
            target.install(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return run_id
