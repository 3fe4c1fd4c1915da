"""Fast checks of the lab server's configuration and of the lost-run records (no outage here:
the real restart is tests/test_faults.py, the real auth server tests/test_team_server.py)."""

from __future__ import annotations

import json

import mlflow
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from stores import new_sqlite_store

from pipi import tracking
from pipi.errors import ConfigError
from pipi.tracking.server import LabServer

CRED_VARS = ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD",
             "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture()
def no_credentials(monkeypatch):
    for v in CRED_VARS:
        monkeypatch.delenv(v, raising=False)


def test_auth_and_s3_need_their_secrets_from_the_environment(no_credentials, tmp_path,
                                                             monkeypatch):
    with pytest.raises(ConfigError, match="MLFLOW_AUTH_ADMIN_USERNAME and "
                                          "MLFLOW_AUTH_ADMIN_PASSWORD"):
        LabServer(tmp_path, auth=True)
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        LabServer(tmp_path, artifacts="s3")
    with pytest.raises(ConfigError, match="backend='mysql'"):
        LabServer(tmp_path, backend="mysql")
    # the client's variables serve as the admin account; nothing secret is written to disk
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "boss")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw-not-on-disk")
    lab = LabServer(tmp_path, auth=True)
    lab._write_auth_config()
    assert "--app-name" in lab.command() and "--serve-artifacts" in lab.command()
    for f in tmp_path.rglob("*"):
        assert b"pw-not-on-disk" not in f.read_bytes() and b"boss" not in f.read_bytes()
    assert all("pw-not-on-disk" not in line for line in lab.client_env_lines())


def test_pipi_server_refuses_auth_without_credentials_in_one_line(no_credentials, tmp_path):
    from pipi.cli import main

    r = CliRunner().invoke(main, ["server", "--auth", "--backend", "sqlite", "--artifacts",
                                  "local", "--root", str(tmp_path)])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: auth needs the admin credentials")


def test_lost_runs_are_marked_failed_once_the_store_answers(tmp_path, pipi_home, monkeypatch):
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("lost")
    running = client.create_run(exp).info.run_id
    finished = client.create_run(exp).info.run_id
    client.set_terminated(finished, "FINISHED")
    other = tracking.store.record_lost_run("0" * 32, "http://elsewhere:5000", "not this store")
    for rid in (running, finished):
        path = tracking.store.record_lost_run(rid, uri, "server stopped answering")
        assert json.loads(path.read_text())["run_id"] == rid
    assert sorted(tracking.store.flush_lost_runs(uri)) == sorted([running, finished])
    run = client.get_run(running)
    assert run.info.status == "FAILED"
    assert run.data.tags[tracking.tags.TAG_FAILURE] == "server stopped answering"
    run = client.get_run(finished)  # resumed and finished meanwhile: left alone
    assert run.info.status == "FINISHED" and tracking.tags.TAG_FAILURE not in run.data.tags
    assert tracking.store.flush_lost_runs(uri) == []
    assert other.exists()  # another server's record waits for that server
    other.unlink()

    # a resumed run keeps the reason as pipi.previous_failure, not as a failure reason
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    with tracking.pipi_run(entry_point="train", run_id=running):
        pass
    run = client.get_run(running)
    assert run.info.status == "FINISHED"
    assert tracking.tags.TAG_FAILURE not in run.data.tags
    assert run.data.tags[tracking.tags.TAG_PREVIOUS_FAILURE] == "server stopped answering"
