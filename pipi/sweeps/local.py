"""The local executor: children on this machine, reused when done.

``parallel=1`` trains the children one after the other in this process. ``parallel=N``
trains up to N at once, each in its own (spawned) process sharing the machine (and its GPU):
the parent creates each child's run nested under the sweep run, a worker process fills it
(:func:`_spawn_child`, with the tracking URI, code version and model prefix as arguments),
and the parent reads the result from MLflow, as the SLURM executor does. Either way a child
is the library's training service (:func:`pipi.runs.training.train`) on its configuration. Per-frame children (and bases) all finish before any
sequence child starts, so a sequence child always finds its base. Each child is seeded from
its own configuration and computes with the same number of CPU threads as this process
(float reductions depend on it), so the runs are bit-identical to ``parallel=1``; on a
CPU-only machine that oversubscribes the cores (``parallel`` is meant for sharing a GPU).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import torch

from pipi import tracking
from pipi.errors import ConfigError
from pipi.runs.training import train
from pipi.sweeps.plan import Child, ChildResult, find_or_run

log = logging.getLogger(__name__)


def run_local(children: Sequence[Child], *, data: Path, parent_run_id: str,
              retries: int = 1, parallel: int = 1, progress: bool = True
              ) -> list[ChildResult]:
    """Train each child not yet FINISHED (same config hash) on the staged folder ``data``
    -> its result, in plan order: in this process (``parallel=1``, nested under the sweep's
    active run ``parent_run_id``) or in worker processes (``parallel > 1``)."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"parallel={parallel!r}: must be an integer >= 1")
    if parallel == 1:
        return [find_or_run(child, lambda c=child: _train_child(
                    c, data=Path(data), progress=progress, parent_run_id=parent_run_id),
                    entry_point="train", retries=retries) for child in children]
    threads = torch.get_num_threads()  # fewer threads would change the float results
    # what a worker process needs, as arguments (issue 39: not through os.environ)
    kwargs = {"threads": threads, "data": str(data),
              "tracking_uri": tracking.current_tracking_uri(),
              "code_version": tracking.code_version(), "model_prefix": tracking.model_prefix()}
    phases = ([c for c in children if not c.cfg.cell_config.is_sequence],
              [c for c in children if c.cfg.cell_config.is_sequence])
    done: dict[int, ChildResult] = {}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=parallel, mp_context=ctx) as procs, \
            ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="pipi-child") as waiters:
        for phase in phases:
            def one(child: Child) -> ChildResult:
                return find_or_run(child, lambda: _in_process(procs, child, parent_run_id,
                                                              kwargs),
                                   entry_point="train", retries=retries)

            for child, result in zip(phase, waiters.map(one, phase)):
                done[id(child)] = result
                log.info("child %s: %s (%s)", child.label, result.status, result.run_id)
    return [done[id(c)] for c in children]


def _in_process(procs: ProcessPoolExecutor, child: Child, parent_run_id: str,
                kwargs: dict) -> str:
    """Create the child's run, fill it in a worker process; a crash marks it FAILED."""
    run_id = tracking.create_child_run(parent_run_id, run_name=child.label,
                                       tags={tracking.tags.TAG_SWEEP_ROLE: child.role,
                                             tracking.tags.TAG_PARENT_RUN: parent_run_id})
    try:
        return procs.submit(_spawn_child, child, run_id=run_id, **kwargs).result()
    except BaseException as exc:
        if tracking.get_run(run_id).live:
            tracking.terminate_run(run_id, "FAILED", f"{type(exc).__name__}: {exc}")
        raise


def _spawn_child(child: Child, *, run_id: str, threads: int, data: str,
                 tracking_uri: str, code_version: str, model_prefix: str) -> str:
    """A worker process of ``parallel > 1``: fill the child run ``run_id`` (created nested
    under the sweep by the parent) with the ordinary ``train`` run of its configuration,
    keyed with the parent's code version (the parent looks children up by that key) and
    registered under the parent's model prefix (both handed as arguments)."""
    torch.set_num_threads(threads)
    tracking.use_code_version(code_version)   # handed as arguments, not through os.environ
    tracking.configure(tracking_uri)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s [{child.label}] %(levelname)s %(name)s: %(message)s")
    with tracking.using_model_prefix(model_prefix):
        return train(child.cfg, data=data, progress=False, run_id=run_id).run_id


def _train_child(child: Child, *, data: Path, progress: bool, parent_run_id: str) -> str:
    summary = train(child.cfg, data=str(data), nested=True, progress=progress)
    tracking.set_run_tags(summary.run_id, {tracking.tags.TAG_PARENT_RUN: parent_run_id,
                                           tracking.tags.TAG_SWEEP_ROLE: child.role})
    return summary.run_id
