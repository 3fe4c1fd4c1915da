"""An entry point started by ``mlflow run`` follows that process: when it dies without passing
a signal on, the entry point gets SIGTERM, so its run ends KILLED (docs/faults.md)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["attach_launched_run", "end_with_mlflow_run", "launched_run_id", "mlflow_run_ancestor",
           "remembering_launched_run"]


class _Launch:
    """The run ``mlflow run`` made for this process, as the command began, and whether pipi
    has attached to it yet."""

    def __init__(self, run_id: str | None):
        self.run_id, self.attached = run_id, False


#: Held by a command (:func:`remembering_launched_run`): ``MLFLOW_RUN_ID`` as it began.
#: MLflow clears the variable whenever a run ends, a side run's too (the default data staged
#: before the project's run starts); pipi remembers the id here instead of writing it back
#: into ``os.environ`` (issue 39).
_LAUNCHED: ContextVar[_Launch | None] = ContextVar("pipi_launched_run", default=None)


def launched_run_id() -> str | None:
    """The run ``mlflow run`` made for this process, while pipi has not attached to it yet:
    what the command remembered (:func:`remembering_launched_run`), else ``MLFLOW_RUN_ID``
    (the library called directly). None outside ``mlflow run``."""
    launch = _LAUNCHED.get()
    if launch is None:
        return os.environ.get("MLFLOW_RUN_ID") or None
    return None if launch.attached else launch.run_id


def attach_launched_run(run_id: str) -> None:
    """pipi's project run is ``run_id`` now: :func:`launched_run_id` says None from here on,
    as ``MLFLOW_RUN_ID`` does once MLflow has started the run it names."""
    launch = _LAUNCHED.get()
    if launch is not None and launch.run_id == run_id:
        launch.attached = True


@contextlib.contextmanager
def remembering_launched_run() -> Iterator[str | None]:
    """Remember ``MLFLOW_RUN_ID`` for the block (a command's invocation); yields it."""
    token = _LAUNCHED.set(_Launch(os.environ.get("MLFLOW_RUN_ID") or None))
    try:
        yield _LAUNCHED.get().run_id
    finally:
        _LAUNCHED.reset(token)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a Linux process from ``/proc``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()   # after "pid (comm) "
    return fields[0], int(fields[1])


def _is_mlflow_run(argv: list[str]) -> bool:
    """Whether a command line is ``mlflow run`` (``.../mlflow run``, ``python -m mlflow run``)."""
    for i, arg in enumerate(argv[:-1]):
        name = arg.replace(os.sep, "/").rsplit("/", 1)[-1]
        if name == "mlflow" or arg.endswith("mlflow/__main__.py"):
            return argv[i + 1] == "run"
    return False


def mlflow_run_ancestor(levels: int = 3) -> int | None:
    """The pid of the ``mlflow run`` process that started this one (through at most
    ``levels`` parents: MLflow may start the entry point through a shell); None elsewhere."""
    if not os.environ.get("MLFLOW_RUN_ID"):   # read as the process began (the command's door)
        return None
    pid = os.getpid()
    for _ in range(levels):
        stat = _proc_stat(pid)
        if stat is None or stat[1] <= 1:
            return None
        pid = stat[1]
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return None
        if _is_mlflow_run(argv.split("\0")):
            return pid
    return None


def end_with_mlflow_run(poll_s: float = 1.0) -> int | None:
    """Under ``mlflow run``: when that process dies without passing a signal on (a SIGTERM
    sent to it alone, e.g. ``docker stop`` of a container whose main process it is), this
    process gets SIGTERM, so its run ends KILLED instead of training on with nobody to see
    it. A daemon thread watches the ``mlflow run`` pid; returns it (None: not under it)."""
    parent = mlflow_run_ancestor()
    if parent is None:
        return None

    def watch() -> None:
        while True:
            stat = _proc_stat(parent)
            if stat is None or stat[0] in ("Z", "X"):   # exited (a zombie has exited too)
                log.warning("its `mlflow run` process %d has ended: stopping", parent)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(poll_s)

    threading.Thread(target=watch, name="pipi-mlflow-run-watch", daemon=True).start()
    return parent
