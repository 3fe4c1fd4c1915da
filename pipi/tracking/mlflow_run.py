"""The MLflow run as a value (issue 39): :class:`MlflowRun` names its run on every call, so
what a workflow logs through it cannot reach another run, whichever is active in the process.
The rules it shares with the in-memory run (params merged, the figure budget) are in
:mod:`pipi.tracking.handle`."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.data.dataset_source_registry import get_registered_sources, resolve_dataset_source
from mlflow.entities import DatasetInput, InputTag, RunTag
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from pipi.tracking.handle import (
    FIGURES_DIR,
    NOTE_TAG,
    folder_of,
    kept_figures,
    merge_params,
    where,
)
from pipi.tracking.records import RunRecord, run_record
from pipi.tracking.uploads import guarded_upload

__all__ = ["MlflowRun"]


class MlflowRun:
    """One MLflow run, named by id on every call (MLflow's fluent functions with ``run_id``,
    or its client): what it logs cannot reach another run, whichever is active.

    ``started`` is the run's record as it started; :meth:`record` reads it again."""

    def __init__(self, started: RunRecord):
        self.started = started

    def __repr__(self) -> str:
        return f"MlflowRun({self.run_id!r})"

    @property
    def run_id(self) -> str:
        return self.started.run_id

    @property
    def experiment_id(self) -> str:
        return self.started.experiment_id

    @property
    def run_name(self) -> str:
        return self.started.run_name

    @property
    def artifact_uri(self) -> str:
        return self.started.artifact_uri

    # ------------------------------------------------------------------ values
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params in chunks of 100 (MLflow's per-call limit), by :func:`merge_params`
        against what the run has (``mlflow run`` logs the request before pipi starts)."""
        items = list(merge_params(mlflow.get_run(self.run_id).data.params, params).items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]), run_id=self.run_id)

    def log_metrics(self, metrics: Mapping[str, float], *, step: int | None = None) -> None:
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step,
                           run_id=self.run_id)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        MlflowClient().log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def set_description(self, text: str) -> None:
        """The run's Description in the UI (Markdown)."""
        MlflowClient().set_tag(self.run_id, NOTE_TAG, text)

    # ------------------------------------------------------------------ files
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        guarded_upload(lambda: mlflow.log_artifact(str(path), artifact_path, run_id=self.run_id),
                       path=path, what=where(Path(path).name, artifact_path),
                       folder=artifact_path, run_id=self.run_id)

    def log_artifacts(self, path: Path, artifact_path: str | None = None) -> None:
        self._uploadfolder_of(Path(path), artifact_path,
                            what=f"{artifact_path or 'the run'}/ (a folder)")

    def log_text(self, text: str, artifact_file: str) -> None:
        guarded_upload(lambda: mlflow.log_text(text, artifact_file, run_id=self.run_id),
                       what=artifact_file, folder=folder_of(artifact_file), run_id=self.run_id)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        guarded_upload(lambda: mlflow.log_dict(obj, artifact_file, run_id=self.run_id),
                       what=artifact_file, folder=folder_of(artifact_file), run_id=self.run_id)

    def log_figures(self, figures: Mapping[str, bytes], artifact_dir: str | None = None
                    ) -> list[str]:
        """Log PNG figures (name -> PNG bytes) as ``<artifact_dir>/<name>.png`` (those
        :func:`kept_figures` keeps); return the artifact paths logged."""
        folder, kept = artifact_dir or FIGURES_DIR, kept_figures(figures)
        if not kept:
            return []
        with tempfile.TemporaryDirectory(prefix="pipi-figures-") as tmp:
            for name, png in kept.items():
                (Path(tmp) / f"{name}.png").write_bytes(png)
            self._uploadfolder_of(Path(tmp), folder, what=f"{folder}/ (figures)")
        return [f"{folder}/{name}.png" for name in kept]

    def delete_artifact(self, artifact_path: str) -> None:
        """Remove one artifact (file or folder) from the run's store, through the run's own
        artifact repository (a local folder, the tracking server's proxy, S3), and the
        folders it leaves empty (the UI would list them)."""
        repo = get_artifact_repository(self.artifact_uri)
        repo.delete_artifacts(artifact_path)
        parent = folder_of(artifact_path)
        while parent and not repo.list_artifacts(parent):
            repo.delete_artifacts(parent)
            parent = folder_of(parent)

    def _uploadfolder_of(self, path: Path, folder: str | None, *, what: str) -> None:
        guarded_upload(lambda: mlflow.log_artifacts(str(path), folder, run_id=self.run_id),
                       path=path, what=what, folder=folder, run_id=self.run_id)

    def log_dataset(self, frames, *, source: str, name: str, digest: str, context: str) -> None:
        """Record a staged frame index as an MLflow dataset input of the run (the staged
        folder as its local-file source).

        MLflow's schema inference hints that integer columns cannot hold missing values; that
        hint is about model signatures, and a frame index has no missing values, so the schema
        of this dataset record is inferred without it."""
        # a bare path is resolved by every registered local source class at once, and MLflow
        # warns that it is ambiguous; naming the (last registered) local class resolves it once
        local = [s for s in get_registered_sources() if s.__name__ == "LocalArtifactDatasetSource"]
        src = resolve_dataset_source(Path(source).resolve().as_uri(),
                                     candidate_sources=local[-1:] or None)
        with warnings.catch_warnings():   # the schema is inferred when the entity is made
            warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
            ds = mlflow.data.from_pandas(frames, source=src, name=name, digest=digest[:32])
            entity = ds._to_mlflow_entity()
        MlflowClient().log_inputs(self.run_id, datasets=[DatasetInput(
            entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])])

    # ------------------------------------------------------------------ reading
    def record(self) -> RunRecord:
        return run_record(MlflowClient().get_run(self.run_id))
