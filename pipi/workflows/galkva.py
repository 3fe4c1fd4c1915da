"""GalKva-2026 input from an MLflow experiment: the Kvasir runs of a (baseline, method) pair and
their ``galar`` zero-shot children, read exactly as ``aggregate`` reads them."""

from __future__ import annotations

from pathlib import Path

from pipi.analysis.retention import galkva_runs
from pipi.galkva import DatasetRuns
from pipi.runs.evidence import default_cache_dir, load_evidence

__all__ = ["experiment_galkva_runs"]


def experiment_galkva_runs(experiment: str, *, method: str, baseline: str, backbone: str,
                           filter_string: str = "", cache_dir: Path | None = None
                           ) -> dict[str, DatasetRuns]:
    """Per dataset, the paired per-frame predictions of ``baseline`` and ``method``, seed by
    seed, with their run ids (for :func:`pipi.galkva.recompute` and its provenance block)."""
    ev, _ = load_evidence(experiment, filter_string, cache_dir or default_cache_dir())
    return galkva_runs(ev, ev.cross_vendor, backbone=backbone, baseline=baseline, method=method)
