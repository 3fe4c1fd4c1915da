"""Model replicas on a CPU: ``pipi predict``'s frames scored by several forked processes, each
decoding its own batches and running the model on one thread.

On a CPU with few cores, DataLoader workers decoding beside a multi-threaded forward take
cores from it: a worker preempts one of the forward's threads and the other waits for it at
the operator's barrier (EfficientNet-B0, 2 cores: the forward ran 23% slower for decoding
that costs 11% of its time). Replicas share nothing while they work: each takes the next
batch (a shared counter), decodes it, scores it and sends the probabilities back, and no
core waits for another. The module is inherited through ``fork`` (its weights are shared
copy-on-write, never written by a forward). A replica runs exactly one torch thread:
GNU OpenMP's thread pool does not survive ``fork``, and a forked process that opened a team
of several threads would wait for threads that are not there.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from pipi.errors import ConfigError
from pipi.options.runtime import auto_or_count

__all__ = ["auto_replicas", "replica_map", "resolve_replicas"]

#: How long the scoring process waits for a result before it checks that every replica lives.
_POLL_S = 1.0


def auto_replicas(device: torch.device) -> int:
    """``replicas=auto``: on a CPU of 2 to 4 usable cores, one replica per core (the case
    measured: docs/benchmarks.md); otherwise one process (a GPU, or cores enough for the
    DataLoader's workers to decode beside the forward's threads)."""
    if device.type != "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores if 2 <= (cores or 1) <= 4 else 1


def resolve_replicas(replicas: str | int, device: torch.device) -> int:
    """``replicas``: ``auto`` (:func:`auto_replicas`) or a count, at least 1; more than one
    only on a CPU."""
    n = auto_or_count(replicas, "replicas", "one per core on a CPU of 2-4 cores")
    if n is None:
        return auto_replicas(device)
    if n > 1 and device.type != "cpu":
        raise ConfigError(f"replicas={n}: replicas score on a CPU; on {device.type} use 1 "
                          "(or auto)")
    return n


def _replica(fn: Callable[[Any], Any], tasks: Sequence, counter, lock, results) -> None:
    """One replica: the next task until none is left; each result (or the error) is sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the scoring process's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # and it stops the replicas with SIGTERM
    torch.set_num_threads(1)
    try:
        while True:
            with lock:
                i = counter.value
                counter.value += 1
            if i >= len(tasks):
                break
            results.put(("ok", i, fn(tasks[i])))
    except Exception as exc:  # noqa: BLE001  (the scoring process re-raises it)
        try:
            results.put(("error", os.getpid(), exc))
        except Exception:  # noqa: BLE001  (an exception that does not pickle: its text)
            results.put(("error", os.getpid(), RuntimeError(f"{type(exc).__name__}: {exc}")))
    results.put(("done", os.getpid(), None))


def replica_map(fn: Callable[[Any], Any], tasks: Sequence, replicas: int
                ) -> Iterator[tuple[Any, Any]]:
    """``(task, fn(task))`` for every task, computed by ``replicas`` forked processes, in the
    order they finish. An exception raised by ``fn`` is raised here (its own type: a
    :class:`~pipi.errors.DataError` stays one); a replica that dies is a ``RuntimeError``
    with its exit status; the replicas are stopped when the caller stops early (an error,
    Ctrl-C, a ``break``)."""
    if not tasks:
        return
    ctx = mp.get_context("fork")
    counter, lock, results = ctx.Value("q", 0, lock=False), ctx.Lock(), ctx.Queue()
    procs = [ctx.Process(target=_replica, args=(fn, tasks, counter, lock, results),
                         name=f"pipi-replica-{r}", daemon=True)
             for r in range(min(replicas, len(tasks)))]
    for p in procs:
        p.start()
    running = {p.pid for p in procs}
    try:
        while running:
            try:
                kind, who, value = results.get(timeout=_POLL_S)
            except queue_mod.Empty:
                dead = [p for p in procs if p.pid in running and p.exitcode is not None]
                if dead:
                    raise RuntimeError(f"a scoring replica (pid {dead[0].pid}) ended with exit "
                                       f"status {dead[0].exitcode} before its work was done "
                                       "(out of memory?); run again to resume from the parts "
                                       "written, or with --replicas 1") from None
                continue
            if kind == "ok":
                yield tasks[who], value
            elif kind == "error":
                raise value
            else:
                running.discard(who)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
