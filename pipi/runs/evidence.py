"""The evidence of a set of runs: one MLflow read, one download per run of its
``predictions/`` artifact (cached by run id), the Galar zero-shot children paired with the
Kvasir runs they scored. Shared by ``aggregate``, ``promote`` and ``galkva``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.analysis import build_evidence, check_single_dataset, mark_imported, select_runs
from pipi.analysis.loso import build_heldout, select_heldout_runs, split_heldout_runs
from pipi.analysis.retention import (
    CALIBRATED,
    ZERO_SHOT,
    build_cross_vendor,
    run_variants,
    select_galar_runs,
    split_galar_runs,
)
from pipi.errors import DataError, TrackingError
from pipi.paths import pipi_home

__all__ = ["EXAMPLE_ARTIFACTS", "default_cache_dir", "fetch_example_images", "fetch_predictions",
           "load_evidence"]

log = logging.getLogger(__name__)


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


#: The Grad-CAM runs' example figures shown in the report (fig:blood-kvasir, fig:gradcam).
EXAMPLE_ARTIFACTS = ("gradcam/overlay.png", "gradcam/prior.png")


def fetch_example_images(all_runs: pd.DataFrame, cache_dir: Path, digest: str) -> dict:
    """run id -> artifact path -> PNG bytes of the FINISHED Grad-CAM runs on ``digest``
    (downloaded once per run; a run without them is left out)."""
    if all_runs.empty or "study" not in all_runs:
        return {}
    sel = all_runs[(all_runs["study"] == "gradcam") & (all_runs["status"] == "FINISHED")]
    if digest and "data_digest" in sel:
        sel = sel[sel["data_digest"] == digest]
    out: dict = {}
    for rid in sel["run_id"]:
        got = {}
        for path in EXAMPLE_ARTIFACTS:
            local = Path(cache_dir) / rid / path
            try:
                if not local.is_file():
                    tracking.download_artifact(rid, path, Path(cache_dir) / rid)
                got[path] = local.read_bytes()
            except (TrackingError, OSError) as exc:
                log.info("Grad-CAM run %s: no %s (%s)", rid, path, exc)
        if got:
            out[rid] = got
    return out


def default_cache_dir() -> Path:
    """Where predictions are cached by run id: ``$PIPI_HOME/cache/predictions``."""
    return pipi_home() / "cache" / "predictions"


def load_evidence(experiment: str, filter_string: str = "", cache_dir: Path | None = None,
                  *, pair_imported: bool = False):
    """(evidence, kept runs): the MLflow read and the downloads.

    Imported runs (``import`` entry point) form arms of their own unless ``pair_imported``
    (:func:`pipi.analysis.mark_imported`). Galar zero-shot children (study ``galar``) never join the Kvasir arms: they are selected
    on their own and paired with the Kvasir runs they scored (``evidence.cross_vendor``).
    Runs trained with ``train_sources`` / ``test_sources`` never join them either: they are
    read per condition into ``evidence.held_out`` (:mod:`pipi.analysis.loso`).
    """
    all_runs = tracking.load_runs(experiment, filter_string)
    # under `mlflow run -e aggregate` this aggregate's own run (RUNNING) is in the experiment
    own = tracking.launched_run_id()
    if own and len(all_runs):
        all_runs = all_runs[all_runs["run_id"] != own].reset_index(drop=True)
    runs, galar = split_galar_runs(mark_imported(all_runs, pair=pair_imported))
    everywhere, heldout = split_heldout_runs(runs)  # train_sources / test_sources
    kept, excluded = select_runs(everywhere)
    # no run trained on every source: the held-out runs are the arms, as they always were
    # (one condition; several are refused as several recipes), and have no in-source side
    in_source = not kept.empty or heldout.empty
    if not in_source:
        kept, excluded = select_runs(heldout)
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
    ev = build_evidence(kept, dirs, excluded=excluded, all_runs=all_runs, experiment=experiment,
                        experiment_id=str(all_runs["experiment_id"].iloc[0]), tracking_uri=uri,
                        filter_string=filter_string)
    if not galar.empty:
        gkept, gexcluded = select_galar_runs(galar)  # per fold: all | evaluation
        gdirs, gmissing = fetch_predictions(gkept, cache)
        gkept = gkept[gkept["run_id"].isin(gdirs)]
        variant = run_variants(gkept)
        cv, gout = build_cross_vendor(gkept[variant == ZERO_SHOT], gdirs, ev,
                                      excluded=pd.concat([gexcluded, gmissing], ignore_index=True))
        ev = replace(ev, cross_vendor=cv,
                     excluded=pd.concat([ev.excluded, gout], ignore_index=True))
        if (variant == CALIBRATED).any():  # zero-shot vs calibrated, side by side
            try:
                cal, _ = build_cross_vendor(gkept, gdirs, ev, variant=CALIBRATED)
                ev = replace(ev, cross_vendor_calibrated=cal)
            except DataError as exc:
                ev = replace(ev, cross_vendor_calibrated_error=str(exc))
    if not heldout.empty:
        hkept, hexcluded = select_heldout_runs(heldout)  # per (train, test sources)
        hdirs, hmissing = fetch_predictions(hkept, cache)
        ho = build_heldout(hkept[hkept["run_id"].isin(hdirs)].reset_index(drop=True), hdirs,
                           ev, excluded=pd.concat([hexcluded, hmissing], ignore_index=True),
                           in_source=in_source)
        ev = replace(ev, held_out=ho, excluded=pd.concat(
            [ev.excluded, ho.excluded if in_source else None], ignore_index=True))
    images = fetch_example_images(all_runs, cache, ev.data_digest)
    return (replace(ev, images=images) if images else ev), kept
