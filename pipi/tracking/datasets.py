"""The dataset inputs of a training run, one per split, and metrics linked to them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import mlflow

from pipi.tracking.handle import Run

__all__ = ["SPLIT_CONTEXTS", "DatasetRef", "log_model_metrics", "log_split_datasets",
           "split_datasets"]


@dataclass(frozen=True)
class DatasetRef:
    """A dataset input of a run as MLflow identifies it (a metric links to it by name and
    digest)."""

    name: str
    digest: str
    context: str


#: The MLflow input context of each split.
SPLIT_CONTEXTS = {"train": "training", "val": "validation", "test": "testing"}


def split_datasets(name: str, digest: str) -> dict[str, DatasetRef]:
    """The dataset of each split of the staged data ``name`` (digest ``digest``): named
    ``<name>-<split>``, with a digest of the data digest and the split."""
    return {split: DatasetRef(f"{name}-{split}",
                              hashlib.sha256(f"{digest}:{split}".encode()).hexdigest()[:32],
                              context)
            for split, context in SPLIT_CONTEXTS.items()}


def log_split_datasets(run: Run, frames, *, source: str, name: str, digest: str
                       ) -> dict[str, DatasetRef]:
    """Log the train, validation and test rows of a staged frame index as three dataset
    inputs of ``run`` (contexts ``training``, ``validation``, ``testing``)."""
    refs = split_datasets(name, digest)
    for split, ref in refs.items():
        rows = frames[frames["split"] == split].reset_index(drop=True)
        run.log_dataset(rows, source=source, name=ref.name, digest=ref.digest, context=ref.context)
    return refs


def log_model_metrics(run_id: str, model_id: str, metrics: Mapping[str, float], *,
                      dataset: DatasetRef | None = None) -> None:
    """Log metrics of run ``run_id`` linked to a logged model (and to a dataset input)."""
    # run_id given: MLflow then reads the run's inputs from the store and finds the dataset
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, model_id=model_id,
                       dataset=dataset, run_id=run_id)
