"""The run as a value (issue 39): a handle bound to one run, handed to whoever logs.

An entry point opens its run with :func:`pipi.tracking.pipi_run`, which yields a
:class:`~pipi.tracking.mlflow_run.MlflowRun`; the workflow passes that handle down, and every param, metric, tag,
artifact, figure and dataset input goes to the run it names (``run_id`` on every MLflow call),
never to "whatever run is active in this process". :class:`MemoryRun` is the same interface
over dictionaries: a workflow step, or a test, that is not about the store logs into one and
reads back a :class:`~pipi.tracking.records.RunRecord`, as it would from MLflow.

Both follow the same rules (held by ``tests/unit/tracking/test_handle.py``, which logs one
script into each and compares the records): params are strings, and a param already logged
with another value keeps its value while the new one goes to ``<key>.resolved``; metrics are
floats, with their history by step; tags are strings; artifacts are files under a folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, Self

import yaml

from pipi.tracking.records import RunRecord

__all__ = ["FIGURES_DIR", "MAX_FIGURE_BYTES", "NOTE_TAG", "MemoryRun", "Run",
           "folder_of", "kept_figures", "merge_params", "where"]

#: The run tag the UI shows (and edits) as the run's Description (Markdown).
NOTE_TAG = "mlflow.note.content"
#: Artifact folder of a run's figures.
FIGURES_DIR = "figures"
#: The figures of one run together stay below this (a few hundred KB: the UI loads them).
MAX_FIGURE_BYTES = 800_000

log = logging.getLogger(__name__)


def param_value(v: Any) -> str:
    """A param's one logged form: booleans ``true``/``false`` (as MLproject defaults and
    ``-P`` values write them), None as empty, anything else ``str``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def _same_param(logged: str, new: str) -> bool:
    # `mlflow run` logs an empty MLproject default as the shell-quoted string "''", and a
    # boolean as typed (-P compile=False)
    return (logged == new or (logged == "''" and new == "")
            or (new in ("true", "false") and logged.lower() == new))


def merge_params(existing: Mapping[str, str], params: Mapping[str, Any]) -> dict[str, str]:
    """What logging ``params`` adds to a run that has ``existing``: a param logged already
    with the same value is left out; one logged with another value (a sentinel such as 0 that
    pipi resolved, a launcher's request) keeps its value and the new one goes to
    ``<key>.resolved``."""
    items: dict[str, str] = {}
    for k, v in params.items():
        v = param_value(v)
        if k in existing:
            if _same_param(existing[k], v):
                continue
            k = f"{k}.resolved"
        items[k] = v
    return items


class Run(Protocol):
    """What a workflow logs to its run (an MLflow run, ``pipi.tracking.mlflow_run``, or a
    :class:`MemoryRun`). The module is light (no mlflow): the in-memory run needs none."""

    run_id: str
    experiment_id: str

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], *, step: int | None = None) -> None: ...
    def set_tags(self, tags: Mapping[str, Any]) -> None: ...
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...
    def log_artifacts(self, path: Path, artifact_path: str | None = None) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_dict(self, obj: Any, artifact_file: str) -> None: ...
    def log_figures(self, figures: Mapping[str, bytes], artifact_dir: str = ...) -> list[str]: ...
    def set_description(self, text: str) -> None: ...
    def delete_artifact(self, artifact_path: str) -> None: ...
    def log_dataset(self, frames, *, source: str, name: str, digest: str,
                    context: str) -> None: ...
    def record(self) -> RunRecord: ...


def kept_figures(figures: Mapping[str, bytes]) -> dict[str, bytes]:
    """The figures a run keeps: each must be a PNG; one that would take the run's figures past
    :data:`MAX_FIGURE_BYTES` is left out with a warning naming it (figures are pictures of what
    the run logged already, so they never fail a run)."""
    kept, total = {}, 0
    for name, png in figures.items():
        if not png.startswith(b"\x89PNG"):
            raise ValueError(f"figure {name!r} is not a PNG")
        if total + len(png) > MAX_FIGURE_BYTES:
            log.warning("figure %s (%d bytes) left out: the run's figures would exceed %d bytes",
                        name, len(png), MAX_FIGURE_BYTES)
            continue
        kept[name], total = png, total + len(png)
    return kept


def where(name: str, folder: str | None) -> str:
    """An artifact's path in words: ``folder/name``."""
    return f"{folder}/{name}" if folder else name


def folder_of(artifact_file: str) -> str | None:
    """The folder of an artifact file's path (None at the run's root)."""
    return os.path.dirname(artifact_file) or None


class MemoryRun:
    """A run held in this process: the same interface as the MLflow run, over
    dictionaries and a temporary folder of artifacts (removed with :meth:`close`, or at exit
    of a ``with`` block). For workflow steps and tests that are not about the store."""

    def __init__(self, *, run_name: str = "", experiment_id: str = "0",
                 params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None):
        self.run_id = uuid.uuid4().hex
        self.run_name, self.experiment_id = run_name, experiment_id
        self.params: dict[str, str] = {k: param_value(v) for k, v in (params or {}).items()}
        self.tags: dict[str, str] = {k: str(v) for k, v in (tags or {}).items()}
        #: metric -> [(step, value)], in the order logged
        self.history: dict[str, list[tuple[int, float]]] = {}
        #: (name, digest, context) of each dataset input, in the order logged
        self.datasets: list[tuple[str, str, str]] = []
        self.start_time = int(time.time() * 1000)
        self._dir = Path(tempfile.mkdtemp(prefix="pipi-memory-run-"))

    def __repr__(self) -> str:
        return f"MemoryRun({self.run_id!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ values
    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(merge_params(self.params, params))

    def log_metrics(self, metrics: Mapping[str, float], *, step: int | None = None) -> None:
        for k, v in metrics.items():
            self.history.setdefault(k, []).append((step or 0, float(v)))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.tags.update({k: str(v) for k, v in tags.items()})

    def set_description(self, text: str) -> None:
        self.tags[NOTE_TAG] = text

    # ------------------------------------------------------------------ files
    @property
    def artifact_dir(self) -> Path:
        """Where the artifacts are (the run's artifact root)."""
        return self._dir

    def _target(self, folder: str | None) -> Path:
        target = (self._dir / folder) if folder else self._dir
        if not target.resolve().is_relative_to(self._dir.resolve()):
            raise ValueError(f"artifact path {folder!r} leaves the run's artifacts")
        target.mkdir(parents=True, exist_ok=True)
        return target

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        shutil.copy2(path, self._target(artifact_path) / Path(path).name)

    def log_artifacts(self, path: Path, artifact_path: str | None = None) -> None:
        shutil.copytree(path, self._target(artifact_path), dirs_exist_ok=True)

    def log_text(self, text: str, artifact_file: str) -> None:
        (self._target(folder_of(artifact_file)) / Path(artifact_file).name).write_text(text)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        # MLflow's rule: JSON for .json, YAML for anything else
        if artifact_file.endswith(".json"):
            text = json.dumps(obj, indent=2)
        else:
            text = yaml.safe_dump(obj, default_flow_style=False)
        self.log_text(text, artifact_file)

    def log_figures(self, figures: Mapping[str, bytes], artifact_dir: str | None = None
                    ) -> list[str]:
        folder = artifact_dir or FIGURES_DIR
        kept = kept_figures(figures)
        for name, png in kept.items():
            (self._target(folder) / f"{name}.png").write_bytes(png)
        return [f"{folder}/{name}.png" for name in kept]

    def delete_artifact(self, artifact_path: str) -> None:
        path = self._dir / artifact_path
        if not path.resolve().is_relative_to(self._dir.resolve()):
            raise ValueError(f"artifact path {artifact_path!r} leaves the run's artifacts")
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        for parent in path.parents:   # and the folders it leaves empty
            if parent == self._dir or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()

    def log_dataset(self, frames, *, source: str, name: str, digest: str, context: str) -> None:
        self.datasets.append((name, digest[:32], context))

    # ------------------------------------------------------------------ reading
    def artifacts(self) -> list[str]:
        """Every artifact file, as a path relative to the run's root, sorted."""
        return sorted(p.relative_to(self._dir).as_posix()
                      for p in self._dir.rglob("*") if p.is_file())

    def record(self) -> RunRecord:
        return RunRecord(run_id=self.run_id, run_name=self.run_name,
                         experiment_id=self.experiment_id, status="RUNNING",
                         start_time=self.start_time, artifact_uri=self._dir.as_uri(),
                         params=self.params, tags=self.tags,
                         metrics={k: v[-1][1] for k, v in self.history.items()})
