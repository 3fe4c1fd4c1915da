"""Staged data for every workflow: load a ``data`` option (:func:`load_data`), stage a release,
log a ``stage`` run.

Staging the default synthetic release is idempotent: a staged folder whose manifest is
complete is reused (the data digest in its manifest identifies it), whoever asks for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.calibration.options import TARGET_KVASIR, parse_target
from pipi.data.staging import (
    ImageStageRequest,
    StageResult,
    load_staged,
    stage_galar,
    stage_images,
    stage_kvasir,
)
from pipi.data.synth import GALAR_PRESETS, KVASIR_PRESETS, synthesize_galar, synthesize_kvasir
from pipi.errors import ConfigError
from pipi.paths import pipi_home

log = logging.getLogger(__name__)

#: Split seed of the embedded default data (the paper's headline seed).
DEFAULT_SPLIT_SEED = 42
SYNTHETIC_PRESETS = tuple(KVASIR_PRESETS)
GALAR_SYNTHETIC_PRESETS = tuple(GALAR_PRESETS)


def synthetic_release(preset: str, seed: int) -> Path:
    """Path of the synthetic Kvasir-format release for (preset, seed), built if missing."""
    release = pipi_home() / "releases" / f"kvasir-synthetic-{preset}-s{seed}"
    if not (release / "metadata.csv").is_file():
        log.info("synthesizing the %s release (seed %d) into %s", preset, seed, release)
        synthesize_kvasir(release, preset=preset, seed=seed)
    return release


def default_staged(preset: str = "demo", seed: int = 0) -> Path:
    return pipi_home() / "data" / f"kvasir-synthetic-{preset}-s{seed}"


def data_short_name(root: Path) -> str:
    """The data's short name in run names: the staged folder's name, ``synthetic-<preset>``
    for the embedded synthetic data (``-s<seed>`` when not the default seed 0)."""
    name = Path(root).name
    preset, sep, seed = name.removeprefix("kvasir-synthetic-").rpartition("-s")
    if name.startswith("kvasir-synthetic-") and sep and preset in SYNTHETIC_PRESETS \
            and seed.isdigit():
        return f"synthetic-{preset}" + (f"-s{seed}" if int(seed) else "")
    return name


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
    split: str = "auto",
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
        images, metadata, out, split_manifest=split_manifest, split=split, seed=seed, link=link,
        progress=progress,
    )
    _log_stage_run(result, dataset=dataset, out=out, log_run=log_run, nested=nested,
                   experiment=experiment, params={
                       "stage.images": images, "stage.metadata": metadata, "stage.out": out,
                       "stage.seed": seed, "stage.split_manifest": split_manifest or "",
                       "stage.split": split, "stage.split_source": result.manifest["split_source"],
                       "stage.link": link})
    return result


def _log_stage_run(result: StageResult, *, dataset: str, out: Path, log_run: bool,
                   nested: bool, experiment: str | None, params: dict) -> None:
    """Print the count table and record the staging as an MLflow ``stage`` run."""
    print((Path(out) / "counts.md").read_text(), flush=True)  # with its counting rule
    if not log_run:
        return
    with tracking.pipi_run(entry_point="stage", experiment=experiment, nested=nested,
                           run_name=f"stage {dataset}", tags=tracking.data_tags(result.manifest)
                           ) as run:
        # prefixed: `mlflow run -e stage` already logs its own raw parameters
        run.log_params(params)
        run.log_metrics({f"frames_{s}": n for s, n in result.manifest["n_frames"].items()})
        for name in ("manifest.json", "counts.md", "counts.csv"):
            run.log_artifact(out / name)
        run.log_dataset(result.frames, source=str(Path(out).resolve()), name=dataset,
                             digest=result.data_digest, context="staging")
        print(f"stage run {run.run_id}; {tracking.ui_hint(run.run_id)}", flush=True)


def run_stage_galar(*, root: Path, out: Path, mapping: Path | None = None,
                    frames_per_class: int | None = None, capsule_systems: str | None = None,
                    videos: str | None = None, multilabel: str = "priority", seed: int = 0,
                    link: str = "hardlink", log_run: bool = True, nested: bool = False,
                    experiment: str | None = None, progress: bool = True,
                    calibration_fraction: float = 0.5, preset: str | None = None
                    ) -> StageResult:
    """Stage a Galar release (zero-shot test data with vendor folds) and log a ``stage`` run."""
    result = stage_galar(Path(root), Path(out), mapping=mapping,
                         frames_per_class=frames_per_class, capsule_systems=capsule_systems,
                         videos=videos, seed=seed, link=link, multilabel=multilabel,
                         calibration_fraction=calibration_fraction, progress=progress,
                         preset=preset)
    _log_stage_run(result, dataset="galar", out=Path(out), log_run=log_run, nested=nested,
                   experiment=experiment, params={
                       "stage.root": root, "stage.out": out, "stage.mapping": mapping or "",
                       "stage.frames_per_class": frames_per_class or "",
                       "stage.capsule_systems": capsule_systems or "",
                       "stage.videos": videos or "", "stage.multilabel": multilabel,
                       "stage.calibration_fraction": calibration_fraction,
                       "stage.seed": seed, "stage.link": link,
                       **({"stage.preset": preset} if preset else {})})
    return result


def default_images_out(root: Path) -> Path:
    """Where ``stage -P source=images`` stages a dataset without ``out``:
    ``$PIPI_HOME/data/images-<root folder name>``."""
    return pipi_home() / "data" / f"images-{Path(root).resolve().name}"


def run_stage_images(req: ImageStageRequest, *, log_run: bool = True, nested: bool = False,
                     experiment: str | None = None, progress: bool = True) -> StageResult:
    """Stage a folder or table of images (``pipi stage images``) and log a ``stage`` run."""
    result = stage_images(req, progress=progress)
    man = result.manifest
    _log_stage_run(result, dataset=f"images-{Path(req.root).resolve().name}", out=req.out,
                   log_run=log_run, nested=nested, experiment=experiment, params={
                       "stage.root": req.root, "stage.out": req.out,
                       "stage.labels": req.labels or "",
                       "stage.classes": ",".join(req.classes or ()),
                       "stage.class_map": req.class_map or "",
                       "stage.multilabel": req.multilabel,
                       "stage.group_pattern": " ".join(req.group_patterns),
                       "stage.layout": man["layout"], "stage.split_rule": man["split_rule"][:500],
                       "stage.seed": req.seed, "stage.link": req.link})
    return result


def is_synthetic(data: str | None) -> bool:
    """Whether a ``data`` option names the embedded synthetic data (empty, ``synthetic[-preset]``)."""
    return not data or data == "synthetic" or data.startswith("synthetic-")


def _locate(data: str | None, preset: str) -> Path:
    """The staged folder of a ``data`` option; the synthetic release is staged when missing."""
    if not data or data in ("synthetic", f"synthetic-{preset}"):
        return ensure_synthetic_staged(preset)
    if data.startswith("synthetic-"):
        preset = data.removeprefix("synthetic-")
        if preset not in SYNTHETIC_PRESETS:
            raise ConfigError(f"data={data!r}: unknown synthetic preset; use a staged folder, "
                              "'synthetic', " + " or ".join(f"'synthetic-{p}'" for p in SYNTHETIC_PRESETS))
        return ensure_synthetic_staged(preset)
    path = Path(data).expanduser().resolve()
    if not (path / "manifest.json").is_file():
        raise ConfigError(f"data={data!r}: {path} is not a staged folder (no manifest.json); "
                          "stage a release first (`pipi stage kvasir ...` or "
                          "`mlflow run . -e stage`), or pass data=synthetic")
    return path


@dataclass(frozen=True)
class StagedData:
    """A staged folder and its index, loaded once: what a workflow trains or scores on."""

    root: Path
    frames: pd.DataFrame = field(repr=False, compare=False)
    manifest: dict = field(repr=False, compare=False)

    @property
    def digest(self) -> str:
        return self.manifest["data_digest"]


def load_data(data: str | None, *, preset: str = "demo") -> StagedData:
    """The staged folder of a user's ``data`` parameter ('synthetic' or empty: the default,
    staged when missing; ``synthetic-<preset>``; a staged folder) and its index (frames,
    manifest), read once; a damaged staged folder is a clear error."""
    root = _locate(data, preset)
    frames, manifest = load_staged(root)
    return StagedData(root, frames, manifest)


# --------------------------------------------------------------------------- Galar
def synthetic_galar_staged(preset: str = "demo", seed: int = 0, *, log_run: bool = True) -> Path:
    """The staged synthetic Galar release (``pipi synthesize galar``), built once.

    The release is written to a temporary folder and renamed into place; staging moves its
    folder into place only when complete, so an interrupted call leaves nothing half-made.
    """
    out = pipi_home() / "data" / f"galar-synthetic-{preset}-s{seed}"
    if (out / "manifest.json").is_file():
        return out
    release = pipi_home() / "releases" / f"galar-synthetic-{preset}-s{seed}"
    if not (release / "metadata.csv").is_file():
        release.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{release.name}-", dir=release.parent))
        try:
            log.info("synthesizing the %s Galar release (seed %d) into %s", preset, seed, release)
            synthesize_galar(tmp / "release", preset=preset, seed=seed)
            shutil.rmtree(release, ignore_errors=True)
            os.replace(tmp / "release", release)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    run_stage_galar(root=release, out=out, seed=seed, log_run=log_run, nested=log_run)
    return out


def load_galar_data(data: str | None, *, param: str = "data") -> StagedData:
    """The staged Galar folder of a ``data`` option ('synthetic[-tiny|-demo]' or a path) and its
    index, read once; ``param`` names the option in the errors (``target_data`` for
    calibrate)."""
    if not data or data == "synthetic":
        path = synthetic_galar_staged("demo")
    elif data.startswith("synthetic-"):
        preset = data.removeprefix("synthetic-")
        if preset not in GALAR_SYNTHETIC_PRESETS:
            raise ConfigError(f"{param}={data!r}: unknown synthetic preset; use a staged Galar "
                              "folder, 'synthetic', 'synthetic-tiny' or 'synthetic-demo'")
        path = synthetic_galar_staged(preset)
    else:
        path = Path(data).expanduser().resolve()
        if not (path / "manifest.json").is_file():
            raise ConfigError(f"{param}={data!r}: {path} is not a staged Galar folder (no "
                              "manifest.json); stage one with `pipi stage galar --root RELEASE "
                              f"--out DIR`, or pass {param}=synthetic")
    frames, manifest = load_staged(path)
    if manifest.get("dataset") != "galar":
        raise ConfigError(f"{param}={data!r}: {path} holds dataset {manifest.get('dataset')!r}, "
                          "not galar; stage Galar with `pipi stage galar`")
    return StagedData(path, frames, manifest)


def galar_target_data(target: str, target_data: str | None) -> StagedData | None:
    """The staged Galar folder ``target_data`` of a ``galar:<system>`` target (``calibrate
    mode=train`` trains on ``data`` and scores there); None for ``kvasir-val``, whose fold is
    the validation split of ``data``."""
    if parse_target(target)[0] == TARGET_KVASIR:
        if target_data:
            raise ConfigError(f"target_data={target_data}: only for target=galar:<system>; "
                              "kvasir-val is the validation split of data=")
        return None
    if not target_data:
        raise ConfigError(f"target={target}: mode=train needs target_data=<a staged Galar "
                          "folder, or synthetic[-tiny|-demo]> (`pipi stage galar`)")
    return load_galar_data(target_data, param="target_data")
