"""The lab server's artifact store lets no other local OS user in (issue 31).

Before, `weed mini`'s filer, master and volume HTTP ports (and its gRPC ports) answered any
local account with no key: a second user listed, read, wrote and deleted every artifact, and
the volume files were 0644. Now every SeaweedFS port but S3's requires a client certificate
of the lab's own CA, the S3 port needs the S3 keys, and the files are owner-only.

Every listening TCP port of every process the lab server started (found from the process
tree, not from a list) is tried as a second OS user made with `useradd`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import psutil
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(team_lab):
    """The session's full lab (tests/integration/conftest.py), shared with
    test_team_server."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    return team_lab.server


def _as(user: str, *cmd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "MLFLOW_", "PG", "WEED_"))}
    return subprocess.run(["runuser", "-u", user, "--", *cmd], capture_output=True, text=True,
                          env=env, cwd="/", timeout=60, check=False)


def _curl(user: str | None, *args: str) -> subprocess.CompletedProcess:
    cmd = ("curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", *args)
    if user is None:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return _as(user, *cmd)


def _listening(pids: list[int]) -> dict[int, str]:
    """Every listening TCP port of these processes and their children -> the owner's name."""
    ports = {}
    for pid in pids:
        top = psutil.Process(pid)
        for proc in (top, *top.children(recursive=True)):
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    ports[conn.laddr.port] = top.name()
    return ports


def test_another_local_user_is_refused_on_every_port_and_file(lab, other_user):
    ports = _listening(lab.pids())
    weed = sorted(p for p, owner in ports.items() if owner.startswith("weed"))
    assert lab.port in ports and lab.s3.port in weed and lab.pg.port in ports
    assert len(weed) >= 8, ports  # master, volume, filer, S3: HTTP and gRPC each (and admin)
    tls = lab.s3.tls
    for port in sorted(ports):
        where = f"port {port} ({ports[port]})"
        if port == lab.port:  # mlflow server: basic auth
            for path in ("/api/2.0/mlflow/experiments/search?max_results=1",
                         "/api/2.0/mlflow-artifacts/artifacts?path=",
                         "/ajax-api/2.0/mlflow/runs/search"):
                r = _curl(other_user, f"http://127.0.0.1:{port}{path}")
                assert r.stdout == "401", f"{where} {path}: {r.stdout} {r.stderr}"
        elif port == lab.pg.port:  # PostgreSQL: the password (tests/test_lab_postgres_auth.py)
            for password in (None, "wrong"):
                r = _as(other_user, "env", *([f"PGPASSWORD={password}"] if password else []),
                        str(lab.pg.bin / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U",
                        "postgres", "-w", "-d", "mlflow", "-tAc", "SELECT 1")
                assert r.returncode != 0, f"{where}: {r.stdout}"
                assert ("no password supplied" in r.stderr
                        or "password authentication failed" in r.stderr), r.stderr
        elif port == lab.s3.port:  # S3: signed requests with the keys only
            for path in ("/", f"/{lab.s3.bucket}/", f"/{lab.s3.bucket}/artifacts/x.txt"):
                r = _curl(other_user, f"http://127.0.0.1:{port}{path}")
                assert r.stdout == "403", f"{where} {path}: {r.stdout}"
            r = _curl(other_user, "-X", "PUT", "--data-binary", "x",
                      f"http://127.0.0.1:{port}/{lab.s3.bucket}/artifacts/probe.txt")
            assert r.stdout == "403", f"{where} PUT: {r.stdout}"
        else:  # every other SeaweedFS port: TLS that requires the lab's client certificate
            # TLS 1.2 checks the client certificate inside the handshake (1.3 after it, when
            # the refusal may reach the client as a reset instead of the alert)
            r = _curl(other_user, "-k", "--tls-max", "1.2", f"https://127.0.0.1:{port}/")
            assert r.returncode == 35 and "alert handshake failure" in r.stderr, \
                f"{where} without a client certificate: {r.stdout} {r.stderr}"
            r = _curl(other_user, "-k", f"https://127.0.0.1:{port}/")  # TLS 1.3: no answer
            assert r.returncode != 0 and r.stdout == "000", f"{where} TLS 1.3: {r.stdout}"
            for method in ("GET", "POST", "DELETE"):  # plain HTTP gets no answer but 400
                r = _curl(other_user, "-X", method, f"http://127.0.0.1:{port}/dir/assign")
                assert not r.stdout.startswith(("2", "3")), f"{where} plain {method}: {r.stdout}"
            r = _curl(other_user, "--http2-prior-knowledge", "-X", "POST", "-H",
                      "content-type: application/grpc",
                      f"http://127.0.0.1:{port}/master_pb.Seaweed/ListClusterNodes")
            assert r.stdout in ("000", "400"), f"{where} plaintext gRPC: {r.stdout}"
            # ... while the holder of the certificate gets through (so TLS is what refuses)
            r = _curl(None, "--tls-max", "1.2", "--cacert", str(tls.ca), "--cert",
                      str(tls.cert), "--key", str(tls.key), f"https://127.0.0.1:{port}/")
            assert r.returncode == 0 and r.stdout != "000", f"{where} with the cert: {r.stderr}"

    # the Unix sockets weed makes (in /tmp) are the server user's only
    sockets = lab.s3.unix_sockets()
    assert sockets
    for path in sockets:
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path
        r = _curl(other_user, "--unix-socket", path, "http://localhost/")
        assert r.stdout == "000" and r.returncode != 0, f"{path}: {r.stdout}"

    # the store works for its keys: mlflow server's S3 client writes and reads ...
    lab.s3.client().put_object(Bucket=lab.s3.bucket, Key="artifacts/secret.txt", Body=b"alice")
    assert lab.s3.client().get_object(Bucket=lab.s3.bucket,
                                      Key="artifacts/secret.txt")["Body"].read() == b"alice"
    # ... and its files are owner-only: another user reads none of them
    store = lab.root / "seaweedfs"
    paths = [store, *store.rglob("*")]
    assert any(p.suffix == ".dat" for p in paths), "no volume file found"
    files = []
    for p in paths:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        assert st.st_uid == os.geteuid(), p
        if stat.S_ISDIR(st.st_mode):  # every folder 0700: nothing below is reachable
            assert mode == 0o700, f"{p}: {oct(mode)}"
        else:
            files.append(str(p))
            # weed writes its volume-info files (.vif: version, replication; no data) 0644
            # whatever the umask; everything else is 0600
            assert mode & 0o077 == 0 or p.suffix == ".vif", f"{p}: {oct(mode)}"
    r = _as(other_user, "sh", "-c", 'for f; do cat -- "$f" >/dev/null 2>&1 && echo "$f"; done',
            "sh", *files)
    assert r.stdout == "", f"{other_user} read: {r.stdout}"
    for cmd in (("ls", str(store)), ("cat", str(store / "tls" / "node.key")),
                ("cat", str(next(p for p in paths if p.suffix == ".dat")))):
        r = _as(other_user, *cmd)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (cmd, r.stdout)
    # issue 41: nobody else lists the lab's folder (o+x only: the postgres user reaches its
    # cluster through it), and its server log and auth config are the lab account's only
    assert stat.S_IMODE(lab.root.stat().st_mode) == 0o711
    for name in ("mlflow-server.log", "basic_auth.ini"):
        assert stat.S_IMODE((lab.root / name).stat().st_mode) == 0o600, name
    r = _as(other_user, "cat", str(lab.root / "basic_auth.ini"))
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stdout
