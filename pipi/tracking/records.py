"""What tracking hands out about a run: a frozen :class:`RunRecord`, never MLflow's ``Run``
(and about a registered model version, a :class:`VersionRecord`).

Every read of a run (``get_run``, ``usable_run``, ``find_finished_run(s)``, ``child_runs``,
the run ``pipi_run`` starts) comes back as a record: its id, name, experiment, status and
times, its params, tags and metrics (read-only mappings), and the run-contract tags callers
read by name (cell, backbone, seed, data digest, ...). The record is a snapshot: it does not
change when the run does; read the run again for what happened since.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from pipi.tracking.tags import (
    TAG_BACKBONE,
    TAG_BASE_RUN,
    TAG_CELL,
    TAG_CODE_VERSION,
    TAG_CONFIG_HASH,
    TAG_DATA_DIGEST,
    TAG_ENTRY_POINT,
    TAG_FAILURE,
    TAG_SEED,
)

__all__ = ["LIVE_STATUSES", "RunRecord", "VersionRecord", "resolved_param", "run_record",
           "unquote_param", "version_record"]

#: Statuses of a run that a process may still be filling.
LIVE_STATUSES = ("RUNNING", "SCHEDULED")


def unquote_param(value: str) -> str:
    """A param as the request said it: ``mlflow run`` logs each MLproject parameter
    shell-quoted (``''`` for an empty value, ``'a b'`` for a value with a space) and ``pipi
    train`` copies that form (:func:`pipi.tracking.runs.launch_params`); a value that is not
    exactly ``shlex.quote`` of something is returned as it is."""
    v = str(value)
    if not v.startswith("'"):
        return v
    try:
        parts = shlex.split(v)
    except ValueError:
        return v
    return parts[0] if len(parts) == 1 and shlex.quote(parts[0]) == v else v


def resolved_param(params: Mapping[str, str], key: str, default: str = "") -> str:
    """What a logged option resolved to: ``<key>.resolved`` where the request said
    otherwise (``profile=auto``), else ``<key>``."""
    return params.get(f"{key}.resolved", params.get(key, default))


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as pipi reads it (a snapshot; mappings are read-only). ``params`` are
    the request's values whichever launcher logged them (:func:`unquote_param`: ``''`` is
    empty)."""

    run_id: str
    run_name: str = ""
    experiment_id: str = ""
    #: RUNNING, SCHEDULED, FINISHED, FAILED or KILLED
    status: str = ""
    #: "active" or "deleted"
    lifecycle_stage: str = "active"
    #: milliseconds since the epoch (None: not started / not ended)
    start_time: int | None = None
    end_time: int | None = None
    artifact_uri: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    #: the latest value of each metric
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: ids of the models the run logged (its outputs), oldest first
    model_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("params", "tags", "metrics"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, _frozen(value))

    def __reduce__(self):
        """Picklable (a record may go to a worker process): its mappings travel as dicts."""
        values = (getattr(self, f.name) for f in fields(self))
        return (RunRecord, tuple(dict(v) if isinstance(v, MappingProxyType) else v
                                 for v in values))

    # ------------------------------------------------------------------ status
    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    @property
    def live(self) -> bool:
        """Still RUNNING or SCHEDULED (a process may be filling it)."""
        return self.status in LIVE_STATUSES

    @property
    def deleted(self) -> bool:
        return self.lifecycle_stage == "deleted"

    # ------------------------------------------------------------------ the run contract
    @property
    def entry_point(self) -> str:
        return self.tags.get(TAG_ENTRY_POINT, "")

    @property
    def cell(self) -> str:
        return self.tags.get(TAG_CELL, "")

    @property
    def backbone(self) -> str:
        return self.tags.get(TAG_BACKBONE, "")

    @property
    def seed(self) -> int | None:
        """The ``pipi.seed`` tag as an integer (None when absent or not an integer)."""
        s = self.tags.get(TAG_SEED)
        return int(s) if s not in (None, "") and s.lstrip("-").isdigit() else None

    @property
    def data_digest(self) -> str:
        return self.tags.get(TAG_DATA_DIGEST, "")

    @property
    def data_dir(self) -> str:
        """The staged folder the run logged as its ``data_dir`` param ("" when none)."""
        return self.params.get("data_dir", "")

    @property
    def config_hash(self) -> str:
        return self.tags.get(TAG_CONFIG_HASH, "")

    @property
    def code_version(self) -> str:
        return self.tags.get(TAG_CODE_VERSION, "")

    @property
    def base_run_id(self) -> str:
        return self.tags.get(TAG_BASE_RUN, "")

    @property
    def parent_run_id(self) -> str:
        """MLflow's parent run (``mlflow.parentRunId``; "" for a top-level run)."""
        return self.tags.get("mlflow.parentRunId", "")

    @property
    def failure_reason(self) -> str:
        return self.tags.get(TAG_FAILURE, "")

    @property
    def test_macro_auc(self) -> float:
        """The headline metric ``test/macro_auc`` (NaN when the run has none)."""
        return self.metrics.get("test/macro_auc", math.nan)

    def resolved_param(self, key: str, default: str = "") -> str:
        """What the run's option ``key`` resolved to (:func:`resolved_param`)."""
        return resolved_param(self.params, key, default)


def run_record(run: Any) -> RunRecord:
    """The record of an MLflow ``Run`` (or ``ActiveRun``); a record is returned as it is."""
    if isinstance(run, RunRecord):
        return run
    info, data = run.info, run.data
    outputs = getattr(run, "outputs", None)
    return RunRecord(
        run_id=info.run_id, run_name=info.run_name or "", experiment_id=info.experiment_id,
        status=info.status, lifecycle_stage=info.lifecycle_stage,
        start_time=info.start_time, end_time=info.end_time,
        artifact_uri=info.artifact_uri or "",
        params={k: unquote_param(v) for k, v in data.params.items()}, tags=data.tags,
        metrics=data.metrics,
        model_ids=tuple(o.model_id for o in (outputs.model_outputs if outputs else [])))


@dataclass(frozen=True)
class VersionRecord:
    """One registered model version as pipi reads it (a snapshot; tags read-only)."""

    name: str
    version: str
    run_id: str | None = None
    description: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tags, MappingProxyType):
            object.__setattr__(self, "tags", _frozen(self.tags))

    def __reduce__(self):
        return (VersionRecord, (self.name, self.version, self.run_id, self.description,
                                dict(self.tags)))


def version_record(mv: Any) -> VersionRecord:
    """The record of an MLflow ``ModelVersion`` (a record is returned as it is)."""
    if isinstance(mv, VersionRecord):
        return mv
    return VersionRecord(name=mv.name, version=str(mv.version), run_id=mv.run_id,
                         description=mv.description, tags=mv.tags or {})
