"""Runs logged from worker processes: one nested run per finished Optuna trial; model URIs."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from pipi.errors import ConfigError, TrackingError
from pipi.tracking.runs import create_child_run, usable_run
from pipi.tracking.signals import signals_deferred, signals_live

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def optimize_study(study: Any, objective: Callable[[Any], float], **kwargs: Any) -> None:
    """``study.optimize(objective, **kwargs)`` where a Ctrl-C or SIGTERM acts only inside
    ``objective`` (Optuna then records the trial FAILED and re-raises it). One arriving in
    Optuna's own bookkeeping (``ask``, ``tell``, the callbacks that log child runs) waits for
    the next trial's objective, or for the end of the study: Optuna 5.0's ``_run_trial``
    turns a KeyboardInterrupt raised inside its ``tell`` into an ``UnboundLocalError``, and a
    trial cut there is left RUNNING in the study."""
    def live(trial: Any) -> float:
        with signals_live():
            return objective(trial)

    with signals_deferred():
        study.optimize(live, **kwargs)


def log_finished_child(parent_run_id: str, *, run_name: str, params: Mapping[str, Any],
                       metrics: Mapping[str, float], tags: Mapping[str, Any],
                       series: Mapping[str, Sequence[tuple[int, float]]] | None = None,
                       status: str = "FINISHED") -> str:
    """Create a run nested under ``parent_run_id``, log everything in one batch, end it.

    For processes that do not hold the parent as their active run (Optuna workers); returns
    the child's run id. A Ctrl-C or SIGTERM arriving meanwhile acts once the child is ended.
    """
    with signals_deferred():
        return _log_finished_child(parent_run_id, run_name=run_name, params=params,
                                   metrics=metrics, tags=tags, series=series, status=status)


def _log_finished_child(parent_run_id, *, run_name, params, metrics, tags, series,
                        status) -> str:
    run_id = create_child_run(parent_run_id, run_name=run_name, tags=tags)
    now = int(time.time() * 1000)
    ms = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for key, points in (series or {}).items():
        ms += [Metric(key, float(v), now, int(step)) for step, v in points]
    c = MlflowClient()
    try:
        c.log_batch(run_id, metrics=ms[:1000],
                    params=[Param(k, str(v)) for k, v in list(params.items())[:100]],
                    tags=[RunTag(k, str(v)) for k, v in list(tags.items())[:100]])
    except BaseException as exc:  # a second Ctrl-C / SIGTERM mid-way: not left RUNNING
        with contextlib.suppress(Exception):
            c.set_terminated(run_id, "KILLED" if isinstance(exc, KeyboardInterrupt)
                             else "FAILED")
        raise
    c.set_terminated(run_id, status)
    return run_id


def model_run_id(spec: str) -> str:
    """The run behind a run id or a ``models:/`` URI (``name/version``, ``name@alias``, ``m-<id>``)."""
    spec = (spec or "").strip()
    if _RUN_ID.match(spec):
        usable_run(spec, what=f"run={spec}")
        return spec
    if not spec.startswith("models:/"):
        raise ConfigError(f"run={spec!r}: pass a run id (32 hex characters) or a models:/ URI "
                          "(models:/pipi-efficientnet_b0-pi@candidate)")
    body = spec.removeprefix("models:/")
    c = MlflowClient()
    try:
        if body.startswith("m-"):
            run_id = mlflow.get_logged_model(body).source_run_id
        elif "@" in body:
            name, alias = body.split("@", 1)
            run_id = c.get_model_version_by_alias(name, alias).run_id
        elif "/" in body:
            name, version = body.rsplit("/", 1)
            run_id = c.get_model_version(name, version).run_id
        else:
            raise ConfigError(f"run={spec}: a models:/ URI needs a version or an alias "
                              "(models:/NAME/3 or models:/NAME@champion)")
    except ConfigError:
        raise
    except Exception as exc:
        raise TrackingError(f"run={spec}: cannot resolve the model on "
                            f"{mlflow.get_tracking_uri()} ({str(exc).splitlines()[0]})") from None
    if not run_id:
        raise TrackingError(f"run={spec}: the model version is linked to no run")
    usable_run(run_id, what=f"run={spec}")
    return run_id


__all__ = ["log_finished_child", "model_run_id", "optimize_study"]
