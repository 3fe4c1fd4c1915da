"""The local executor: children on this machine, reused when done.

``parallel=1`` trains the children one after the other in this process. ``parallel=N``
trains up to N at once, each in its own (spawned) process sharing the machine (and its GPU):
the parent creates each child's run nested under the sweep run, a worker process fills it
(``spawn_child``, a picklable top-level function), and the parent reads the result from
MLflow, as the SLURM executor does. Per-frame children (and bases) all finish before any
sequence child starts, so a sequence child always finds its base. Each child is seeded from
its own configuration and computes with the same number of CPU threads as this process
(float reductions depend on it), so the runs are bit-identical to ``parallel=1``; on a
CPU-only machine that oversubscribes the cores (``parallel`` is meant for sharing a GPU).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import torch

from pipi import tracking
from pipi.errors import ConfigError
from pipi.sweeps.plan import Child, ChildResult, find_or_run

log = logging.getLogger(__name__)


def run_local(children: Sequence[Child], *, train_child: Callable[[Child], str],
              retries: int = 1, parallel: int = 1,
              spawn_child: Callable[..., str] | None = None,
              parent_run_id: str | None = None, spawn_kwargs: dict | None = None
              ) -> list[ChildResult]:
    """Train each child not yet FINISHED (same config hash) -> its result, in plan order.

    ``train_child(child) -> run id`` trains in this process (``parallel=1``);
    ``spawn_child(child, run_id=..., threads=..., **spawn_kwargs) -> run id`` fills a run
    created under ``parent_run_id`` in a worker process (``parallel > 1``).
    """
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"parallel={parallel!r}: must be an integer >= 1")
    if parallel == 1:
        return [find_or_run(child, lambda c=child: train_child(c), entry_point="train",
                            retries=retries) for child in children]
    if spawn_child is None or parent_run_id is None:
        raise ConfigError("parallel > 1 needs spawn_child and parent_run_id")
    threads = torch.get_num_threads()  # fewer threads would change the float results
    kwargs = {"threads": threads, **(spawn_kwargs or {})}
    phases = ([c for c in children if not c.cfg.cell_config.is_sequence],
              [c for c in children if c.cfg.cell_config.is_sequence])
    done: dict[int, ChildResult] = {}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=parallel, mp_context=ctx) as procs, \
            ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="pipi-child") as waiters:
        for phase in phases:
            def one(child: Child) -> ChildResult:
                return find_or_run(child, lambda: _in_process(procs, spawn_child, child,
                                                              parent_run_id, kwargs),
                                   entry_point="train", retries=retries)

            for child, result in zip(phase, waiters.map(one, phase)):
                done[id(child)] = result
                log.info("child %s: %s (%s)", child.label, result.status, result.run_id)
    return [done[id(c)] for c in children]


def _in_process(procs: ProcessPoolExecutor, spawn_child, child: Child, parent_run_id: str,
                kwargs: dict) -> str:
    """Create the child's run, fill it in a worker process; a crash marks it FAILED."""
    run_id = tracking.create_child_run(parent_run_id, run_name=child.label,
                                       tags={tracking.TAG_SWEEP_ROLE: child.role,
                                             tracking.TAG_PARENT_RUN: parent_run_id})
    try:
        return procs.submit(spawn_child, child, run_id=run_id, **kwargs).result()
    except BaseException as exc:
        if tracking.get_run(run_id).live:
            tracking.terminate_run(run_id, "FAILED", f"{type(exc).__name__}: {exc}")
        raise
