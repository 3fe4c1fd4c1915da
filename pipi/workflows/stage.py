"""The ``stage`` workflow: synthesize or read a release, stage it, log the MLflow run.

Staging the default synthetic release is idempotent: a staged folder whose manifest is
complete is reused (the data digest in its manifest identifies it), whoever asks for it.
The staging itself lives in :mod:`pipi.runs.data`, which every workflow shares.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pipi import tracking
from pipi.data.staging import ImageStageRequest, StageResult, load_staged
from pipi.errors import DataError
from pipi.runs.data import (
    SYNTHETIC_PRESETS,
    default_images_out,
    default_staged,
    run_stage,
    run_stage_galar,
    run_stage_images,
    synthetic_release,
)


def stage_source(source: str, *, metadata: str | None, out: str | None,
                 images: ImageStageRequest | None = None, **kw) -> StageResult | Path:
    """The MLproject ``stage`` entry point: ``source`` is 'synthetic[-preset]', 'images' (a
    folder or table of images: ``images`` says which, its ``out`` filled in here when empty)
    or a release.

    The default synthetic staging (no ``out``) is reused when it exists: the staged folder is
    returned and a line says so.
    """
    if source.startswith("synthetic"):
        preset = source.partition("-")[2] or "demo"
        if preset not in SYNTHETIC_PRESETS:
            raise DataError(f"source={source!r}: unknown synthetic preset {preset!r}; use "
                            + " or ".join(f"synthetic-{p}" for p in SYNTHETIC_PRESETS))
        target = Path(out) if out else default_staged(preset, 0)
        if not out and (target / "manifest.json").is_file():
            _, manifest = load_staged(target)
            print(f"reusing the staged synthetic-{preset} release at {target} "
                  f"(data digest {manifest['data_digest'][:12]}); nothing to do", flush=True)
            tracking.tag_project_run(
                {tracking.tags.TAG_ENTRY_POINT: "stage",
                tracking.tags.TAG_REUSED_STAGED: str(target),
                 **tracking.data_tags(manifest)},
                note=f"reused the staged synthetic-{preset} release at {target}; nothing staged",
                name=f"stage synthetic-{preset} (reused, no-op)")
            return target
        release = synthetic_release(preset, 0)
        return run_stage(
            images=release / "labelled_images", metadata=release / "metadata.csv",
            out=target, dataset=f"kvasir-synthetic-{preset}", **kw,
        )
    if source == "images":
        if images is None:
            raise DataError("source=images needs root=<the dataset folder>")
        if images.out is None:
            images = replace(images, out=default_images_out(images.root))
        return run_stage_images(images)
    if source.startswith("galar:"):
        if out is None:
            raise DataError("source=galar:DIR needs out=<staged folder>")
        return run_stage_galar(root=Path(source.removeprefix("galar:")), out=Path(out),
                               seed=kw.get("seed", 0), link=kw.get("link", "hardlink"))
    src = Path(source)
    if metadata is None:
        cand = (src if src.is_dir() else src.parent) / "metadata.csv"
        if not cand.is_file():
            raise DataError(f"{source}: pass --metadata (no metadata.csv beside the images)")
        metadata = str(cand)
    if out is None:
        raise DataError("pass --out for a real release")
    return run_stage(images=src, metadata=Path(metadata), out=Path(out), **kw)
