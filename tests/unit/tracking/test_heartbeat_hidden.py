"""The heartbeat is bookkeeping: written under the ``mlflow.`` prefix that MLflow's UI hides
from users (issue 30), and still read from ``pipi.heartbeat`` on runs started before."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from pipi.tracking import liveness, tags


def _ui_hides(key: str) -> bool:
    # MLflow 3's UI (getVisibleTagValues / isUserFacingTag in its JS bundle) hides these
    return key.startswith(("mlflow.", "_mlflow_"))


def test_the_heartbeat_is_written_where_the_ui_hides_it(store, monkeypatch):
    monkeypatch.setenv("PIPI_HEARTBEAT_S", "0.2")
    c = MlflowClient()
    run = c.create_run(store)
    with liveness.heartbeat(run.info.run_id):
        time.sleep(0.5)
    t = c.get_run(run.info.run_id).data.tags
    written = [k for k, v in t.items() if v.startswith(liveness.ME)]
    assert written == [tags.HEARTBEAT_TAG] and _ui_hides(tags.HEARTBEAT_TAG)
    assert tags.TAG_HEARTBEAT not in t


@pytest.mark.parametrize("key", [tags.HEARTBEAT_TAG, tags.TAG_HEARTBEAT])
def test_another_process_heartbeat_is_seen_under_either_name(store, key):
    c = MlflowClient()
    run = c.create_run(store)
    c.set_tag(run.info.run_id, key, f"otherhost:1:abc {time.time():.3f}")
    holder = liveness.live_holder(c.get_run(run.info.run_id))
    assert holder is not None and holder[0] == "otherhost:1:abc"
