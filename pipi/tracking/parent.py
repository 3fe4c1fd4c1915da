"""An entry point started by ``mlflow run`` follows that process: when it dies without passing
a signal on, the entry point gets SIGTERM, so its run ends KILLED (docs/faults.md)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["end_with_mlflow_run", "mlflow_run_ancestor"]


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
    if not os.environ.get("MLFLOW_RUN_ID"):
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
