"""``python -m pipi.tracking.finalise PARENT_PID RUN_ID TRACKING_URI``: keep a run KILLED.

Started detached by a training process that ended its ``mlflow run`` run KILLED after Ctrl-C
(``pipi.tracking.runs.keep_killed_after_parent``): waits until ``mlflow run`` (the parent)
has exited, then, if the parent marked the run FAILED over pipi's KILLED (an MLflow bug:
``_maybe_set_run_terminated`` compares a status string with integer constants), sets KILLED
again. It touches nothing else and gives up after a few minutes.
"""

from __future__ import annotations

import os
import sys
import time

from mlflow.tracking import MlflowClient

from pipi.tracking.tags import TAG_FAILURE

__all__ = [
    "restore_killed",
]

#: reasons that pipi writes when a signal ends a run (``signals.interrupt_reason``)
_SIGNAL_REASONS = ("interrupted by SIGINT", "terminated by SIGTERM")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def restore_killed(client: MlflowClient, run_id: str) -> bool:
    """KILLED again if the run is FAILED with pipi's signal reason; True when it changed."""
    run = client.get_run(run_id)
    reason = run.data.tags.get(TAG_FAILURE, "")
    if run.info.status == "FAILED" and reason.startswith(_SIGNAL_REASONS):
        client.set_terminated(run_id, "KILLED")
        return True
    return False


def main(parent: int, run_id: str, uri: str, *, wait_s: float = 300.0) -> None:
    deadline = time.time() + wait_s
    while _alive(parent) and time.time() < deadline:
        time.sleep(0.5)
    client = MlflowClient(uri)
    # the parent's last write lands before it exits; look a few more times to be sure
    for _ in range(10):
        if restore_killed(client, run_id):
            return
        time.sleep(0.5)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
