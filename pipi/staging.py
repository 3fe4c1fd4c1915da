"""The ``stage`` workflow: synthesize or read a release, stage it, log the MLflow run."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pipi import tracking
from pipi.data.kvasir import StageResult, format_count_table, load_staged, stage_kvasir
from pipi.errors import DataError
from pipi.paths import pipi_home

log = logging.getLogger(__name__)

#: Split seed of the embedded default data (the paper's headline seed).
DEFAULT_SPLIT_SEED = 42


def synthetic_release(preset: str, seed: int) -> Path:
    """Path of the synthetic Kvasir-format release for (preset, seed), built if missing."""
    from pipi.data.synthetic import synthesize_kvasir

    release = pipi_home() / "releases" / f"kvasir-synthetic-{preset}-s{seed}"
    if not (release / "metadata.csv").is_file():
        log.info("synthesizing the %s release (seed %d) into %s", preset, seed, release)
        synthesize_kvasir(release, preset=preset, seed=seed)
    return release


def default_staged(preset: str = "demo", seed: int = 0) -> Path:
    return pipi_home() / "data" / f"kvasir-synthetic-{preset}-s{seed}"


def ensure_synthetic_staged(preset: str = "demo", seed: int = 0, *, log_run: bool = True) -> Path:
    """The staged synthetic release, staging (and logging a ``stage`` run) when missing."""
    out = default_staged(preset, seed)
    if not (out / "manifest.json").is_file():
        release = synthetic_release(preset, seed)
        run_stage(
            images=release / "labelled_images", metadata=release / "metadata.csv", out=out,
            dataset=f"kvasir-synthetic-{preset}", log_run=log_run, nested=log_run,
        )
    return out


def run_stage(
    *,
    images: Path,
    metadata: Path,
    out: Path,
    split_manifest: Path | None = None,
    seed: int = DEFAULT_SPLIT_SEED,
    link: str = "hardlink",
    dataset: str = "kvasir-capsule",
    log_run: bool = True,
    nested: bool = False,
    experiment: str | None = None,
    progress: bool = True,
) -> StageResult:
    """Stage a Kvasir-format release and record it as an MLflow ``stage`` run."""
    result = stage_kvasir(
        images, metadata, out, split_manifest=split_manifest, seed=seed, link=link,
        progress=progress,
    )
    table = format_count_table(result.counts)
    print(table, flush=True)
    if log_run:
        with tracking.pipi_run(
            entry_point="stage", experiment=experiment, nested=nested,
            run_name=f"stage-{dataset}",
            tags={
                tracking.TAG_DATASET: dataset,
                tracking.TAG_DATA_DIGEST: result.data_digest,
                tracking.TAG_SPLIT_SHA: result.manifest["content_sha256"],
            },
        ) as run:
            # prefixed: `mlflow run -e stage` already logs its own raw parameters
            tracking.log_params({
                "stage.images": images, "stage.metadata": metadata, "stage.out": out,
                "stage.seed": seed, "stage.split_manifest": split_manifest or "",
                "stage.link": link,
            })
            tracking.log_metrics({f"frames_{s}": n for s, n in result.manifest["n_frames"].items()})
            tracking.log_artifact(out / "manifest.json")
            tracking.log_artifact(out / "counts.md")
            tracking.log_artifact(out / "counts.csv")
            tracking.log_dataset(
                result.frames, source=str(out.resolve()), name=dataset,
                digest=result.data_digest, context="staging",
            )
            print(f"stage run {run.info.run_id}; {tracking.ui_hint(run.info.run_id)}", flush=True)
    return result


def resolve_data(data: str | None, *, preset: str = "demo") -> Path:
    """A staged folder from a user's ``data`` parameter ('synthetic' or empty: the default)."""
    if not data or data in ("synthetic", f"synthetic-{preset}"):
        return ensure_synthetic_staged(preset)
    if data.startswith("synthetic-"):
        return ensure_synthetic_staged(data.removeprefix("synthetic-"))
    path = Path(data).expanduser().resolve()
    load_staged(path)  # clear error if it is not a staged folder
    return path


def stage_source(source: str, *, metadata: str | None, out: str | None, **kw) -> StageResult:
    """The MLproject ``stage`` entry point: ``source`` is 'synthetic[-preset]' or a release."""
    if source.startswith("synthetic"):
        preset = source.partition("-")[2] or "demo"
        release = synthetic_release(preset, 0)
        return run_stage(
            images=release / "labelled_images", metadata=release / "metadata.csv",
            out=Path(out) if out else default_staged(preset, 0),
            dataset=f"kvasir-synthetic-{preset}", **kw,
        )
    src = Path(source)
    if metadata is None:
        cand = (src if src.is_dir() else src.parent) / "metadata.csv"
        if not cand.is_file():
            raise DataError(f"{source}: pass --metadata (no metadata.csv beside the images)")
        metadata = str(cand)
    if out is None:
        raise DataError("pass --out for a real release")
    return run_stage(images=src, metadata=Path(metadata), out=Path(out), **kw)
