"""The whole report of one aggregation: every table, the figures and their captions, the
metadata and the printed summary (pure: no MLflow, no files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipi.analysis import (
    AggregateOptions,
    Analysis,
    Evidence,
    mixed_profile_note,
    reason_kind,
    seeds_text,
)
from pipi.report import (
    breakdown,
    calibration,
    channels,
    deployment,
    figures,
    headline,
    paper_figures,
    per_class,
    pi_tta,
    run_tables,
)
from pipi.report import robustness, transplant
from pipi.report.curves import curve_data
from pipi.report.loso import loso_table
from pipi.report.retention import retention_tables
from pipi.report.sources import per_source_table
from pipi.report.tables import Table, fmt_mean_sd

__all__ = ["AGGREGATE_FORMAT", "Report", "build_report"]

#: the format of aggregate's summary document and of its output folder's marker
AGGREGATE_FORMAT = "pipi.aggregate"


@dataclass(frozen=True)
class Report:
    """All outputs of one aggregation, before they are written."""

    tables: tuple[Table, ...]
    figures: Mapping[str, bytes]            # name -> PNG bytes
    captions: Mapping[str, str]
    figure_runs: Mapping[str, dict]         # name -> arm -> seed -> run id
    meta: dict
    summary: str
    curves: dict

    def table(self, key: str) -> Table:
        for t in self.tables:
            if t.key == key:
                return t
        raise KeyError(f"no table {key!r}; tables: {[t.key for t in self.tables]}")


def build_report(evidence: Evidence, options: AggregateOptions | None = None) -> Report:
    """Every table and figure the evidence allows (pure: no MLflow, no network)."""
    options = options or AggregateOptions()
    an = Analysis(evidence, options)
    tables: list[Table] = [run_tables.coverage_table(an), headline.per_frame_table(an),
                           *headline.imported_per_frame_tables(an),
                           headline.eight_cell_table(an), headline.limitation_table(an),
                           *headline.paired_tests_tables(an),
                           *per_class.per_class_tables(an), breakdown.per_patient_table(an),
                           *[t for t in (per_source_table(an), loso_table(an))
                             if t is not None],
                           breakdown.operating_points_table(an), breakdown.calibration_table(an),
                           calibration.calibration_per_class_table(an),
                           headline.cross_backbone_table(an), *channels.channel_tables(an),
                           deployment.deployment_table(an),
                           pi_tta.pi_tta_table(an),
                           robustness.robustness_table(an), transplant.transplant_conv_table(an),
                           transplant.transplant_table(an), transplant.gradcam_table(an),
                           *retention_tables(an),
                           *run_tables.other_study_tables(an), run_tables.runs_table(an),
                           run_tables.excluded_table(an)]
    curves = curve_data(an)
    figs, captions, fig_runs = {}, {}, {}
    if options.figures:
        figs, captions, fig_runs = figures.all_figures(an, tables, curves)
        by = {t.key: t for t in tables}
        for more in (robustness.robustness_figures(by["robustness"]),
                     paper_figures.mechanism_figures(by["transplant"]),
                     paper_figures.example_figures(an)):
            for acc, extra in zip((figs, captions, fig_runs), more, strict=True):
                acc.update(extra)
    meta = _meta(an)
    return Report(tuple(tables), figs, captions, fig_runs, meta, _summary(an, tables), curves)


def _meta(an: Analysis) -> dict:
    ev = an.evidence
    arms = {}
    for b in ev.backbones():
        uni = ev.seed_universe(b)
        for c in ev.cells(b):
            arm = ev.arm(b, c)
            arms[f"{b}/{c}"] = {"backbone": b, "cell": c, "seeds": arm.runs(),
                                "missing_seeds": sorted(set(uni) - set(arm.seeds))}
    return {
        "format": AGGREGATE_FORMAT, "version": 1, "experiment": ev.experiment,
        "experiment_id": ev.experiment_id, "filter": ev.filter_string,
        "tracking_uri": ev.tracking_uri, "data_digest": ev.data_digest,
        "headline_backbone": an.headline, "classes": list(ev.names),
        "evaluable_classes": ev.class_names, "headline_classes": ev.class_names,
        "class_source": ev.class_source, "n_test_frames": int(ev.labels.size),
        "test_videos": sorted(set(ev.videos)),
        "bootstrap_unit": an.bootstrap_unit, "resample": an.options.resample,
        "options": {k: getattr(an.options, k) for k in an.options.__dataclass_fields__},
        "arms": arms,
        "runs": [{"run_id": r.run_id, "backbone": r.backbone, "cell": r.cell, "seed": int(r.seed)}
                 for r in ev.runs.itertuples()],
        "excluded": ([{"run_id": r.run_id, "status": r.status, "cell": r.cell,
                       "reason": r.reason} for r in ev.excluded.itertuples()]
                     if ev.excluded is not None and not ev.excluded.empty else []),
    }


def _summary(an: Analysis, tables: Sequence[Table]) -> str:
    ev = an.evidence
    lines = [f"aggregate: {len(ev.runs)} runs of experiment {ev.experiment or '?'!r}"
             + (f" (filter {ev.filter_string!r})" if ev.filter_string else "")
             + f", data digest {ev.data_digest[:16] or '?'}, {ev.labels.size} test frames in "
             f"{len(set(ev.videos))} videos, bootstrap over test {an.bootstrap_unit}",
             (f"{len(ev.classes)} headline classes (from {ev.class_source}): "
              f"{', '.join(ev.class_names)}")]
    mixed = mixed_profile_note(ev.runs)
    if mixed:
        lines.append(f"WARNING: {mixed}")
    if ev.excluded is not None and not ev.excluded.empty:
        reasons = reason_kind(ev.excluded["reason"])
        lines.append("excluded: " + ", ".join(f"{n} {r}" for r, n in reasons.value_counts().items()))
    for b in ev.backbones():
        uni = ev.seed_universe(b)
        for c in ev.cells(b):
            arm = ev.arm(b, c)
            miss = sorted(set(uni) - set(arm.seeds))
            lines.append(f"  {b:16s} {c:16s} seeds {seeds_text(arm.seeds):24s} macro-AUC "
                         f"{fmt_mean_sd(arm.macro.mean(), arm.macro.std(ddof=1) if len(arm.seeds) > 1 else float('nan'))}"
                         + (f"  MISSING seeds {miss}" if miss else ""))
    built = [t.key for t in tables if t.ok]
    empty = [t.key for t in tables if not t.ok]
    lines.append(f"tables built: {', '.join(built)}")
    if empty:
        lines.append(f"tables without runs: {', '.join(empty)}")
    absent: dict[str, list[str]] = {}
    for t in tables:
        for n in t.notes:
            if n.endswith(": no runs"):
                absent.setdefault(n[: -len(": no runs")], []).append(t.key)
    if absent:
        lines.append("arms with no runs (tables that expect them): " + ", ".join(
            f"{arm} ({'/'.join(dict.fromkeys(keys))})" for arm, keys in absent.items()))
    return "\n".join(lines)
