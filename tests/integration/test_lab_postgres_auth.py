"""The lab server's PostgreSQL lets no other local OS user in (issue 24).

Before, the cluster trusted every connection from 127.0.0.1: any local user could open
`mlflow_auth` and make themselves admin. Now every connection proves a generated password
(scram-sha-256) kept 0600 in the server folder, and only `mlflow server` is given it.
"""

from __future__ import annotations

import base64
import os
import pwd
import secrets
import stat
import subprocess
import urllib.request

import pytest

pytestmark = pytest.mark.slow


def _psql_as(user: str, pg, host: str, password: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        ["runuser", "-u", user, "--", str(pg.bin / "psql"), "-h", host, "-p", str(pg.port),
         "-U", "postgres", "-w", "-d", "mlflow_auth", "-tAc", "SELECT count(*) FROM users"],
        capture_output=True, text=True, env=env, cwd="/", timeout=60)


def test_another_local_user_is_refused_while_the_server_works(auth_lab, other_user):
    pg = auth_lab.server.pg
    assert pwd.getpwnam(other_user).pw_uid != os.geteuid()
    # the secret: 0600, owned by the user running the server, unreadable to the other user
    mode = os.stat(pg.password_file)
    assert stat.S_IMODE(mode.st_mode) == 0o600 and mode.st_uid == os.geteuid()
    assert subprocess.run(["runuser", "-u", other_user, "--", "cat", str(pg.password_file)],
                          capture_output=True).returncode != 0
    for host in ("127.0.0.1", str(pg.root)):  # TCP and the Unix socket
        for password in (None, "wrong-" + secrets.token_hex(4)):
            r = _psql_as(other_user, pg, host, password)
            assert r.returncode != 0, f"{other_user} read mlflow_auth via {host}: {r.stdout}"
            assert ("no password supplied" in r.stderr
                    or "password authentication failed" in r.stderr), r.stderr
    # the right password works (so the refusals above are about the password) ...
    ok = _psql_as(other_user, pg, "127.0.0.1", pg.password)
    assert ok.returncode == 0 and int(ok.stdout.strip()) >= 1, ok.stderr
    # ... and the tracking server, which holds it, serves an authenticated request
    token = base64.b64encode(f"{auth_lab.admin}:{auth_lab.password}".encode()).decode()
    req = urllib.request.Request(auth_lab.uri + "/api/2.0/mlflow/experiments/search?max_results=1",
                                 headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
