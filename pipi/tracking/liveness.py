"""Is a RUNNING run still being trained? A heartbeat tag, and a claim before resuming.

MLflow keeps no lease on a run: a run whose process was killed with SIGKILL, or lost its
server, stays RUNNING, exactly like one that is training right now. The process that trains
a run therefore refreshes ``mlflow.pipi.heartbeat`` (``<host>:<pid>:<nonce> <unix time>``;
bookkeeping, under the prefix MLflow's UI hides) every ``PIPI_HEARTBEAT_S`` seconds
(default 30) from a daemon thread; ``resume`` refuses a RUNNING
run whose heartbeat is younger than four intervals, and claims the run (writes its own
heartbeat, waits, reads it back) so that of two resumes started together only one goes on.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

from mlflow.tracking import MlflowClient

from pipi.errors import ConfigError
from pipi.tracking.records import RunRecord, run_record
from pipi.tracking.tags import HEARTBEAT_TAG, TAG_HEARTBEAT

#: who this process is, in a heartbeat: host, pid and a nonce (pids are reused)
ME = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def heartbeat_interval() -> float:
    try:
        return max(0.5, float(os.environ.get("PIPI_HEARTBEAT_S", "30")))
    except ValueError:
        return 30.0


def _beat() -> str:
    return f"{ME} {time.time():.0f}"


def _parse(value: str) -> tuple[str, float]:
    who, _, t = value.rpartition(" ")
    try:
        return who, float(t)
    except ValueError:
        return "", 0.0


def _heartbeat_of(run: RunRecord) -> str:
    """The run's heartbeat (the hidden tag; ``pipi.heartbeat`` on a run started before)."""
    t = run.tags
    return t.get(HEARTBEAT_TAG) or t.get(TAG_HEARTBEAT, "")


def live_holder(run) -> tuple[str, float] | None:
    """(who, seconds since its heartbeat) when another process is training ``run`` (a
    :class:`RunRecord`, or MLflow's ``Run``)."""
    run = run_record(run)
    if run.status != "RUNNING":
        return None
    who, t = _parse(_heartbeat_of(run))
    age = time.time() - t
    if not who or who == ME or age > 4 * heartbeat_interval():
        return None
    return who, max(age, 0.0)


def claim_for_resume(run_id: str) -> None:
    """Refuse a run that another process is training; else make it this process's run.

    The claim is a tag write read back after a pause longer than a tag write takes: MLflow
    has no compare-and-set, so of two processes claiming together the last writer wins and
    the other one sees a heartbeat that is not its own and stops.
    """
    c = MlflowClient()
    holder = live_holder(c.get_run(run_id))
    if holder:
        raise ConfigError(
            f"resume={run_id}: the run is still being trained by process {holder[0]} "
            f"(heartbeat {holder[1]:.0f} s ago); wait for it to end, or stop it (Ctrl-C or "
            "kill -TERM) and resume then")
    c.set_tag(run_id, HEARTBEAT_TAG, _beat())
    time.sleep(min(2.0, heartbeat_interval()))
    who, _ = _parse(_heartbeat_of(run_record(c.get_run(run_id))))
    if who != ME:
        raise ConfigError(f"resume={run_id}: process {who} resumed the run at the same time; "
                          "it goes on, this one stops")


def release_claim(run_id: str) -> None:
    """Undo :func:`claim_for_resume` (a resume that failed before training): remove the
    heartbeat when it is this process's, so the run does not look trained by a dead resumer."""
    with contextlib.suppress(Exception):  # best effort: the failure is already being reported
        c = MlflowClient()
        who, _ = _parse(c.get_run(run_id).data.tags.get(TAG_HEARTBEAT, ""))
        if who == ME:
            c.delete_tag(run_id, TAG_HEARTBEAT)


@contextlib.contextmanager
def heartbeat(run_id: str) -> Iterator[None]:
    """Refresh the run's heartbeat tag from a daemon thread while the block runs."""
    stop = threading.Event()
    c = MlflowClient()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a lost server is the run's business
                c.set_tag(run_id, HEARTBEAT_TAG, _beat())
            if stop.wait(heartbeat_interval()):
                return

    thread = threading.Thread(target=beat, name=f"pipi-heartbeat-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


__all__ = ["claim_for_resume", "heartbeat", "heartbeat_interval",
           "live_holder", "release_claim"]
