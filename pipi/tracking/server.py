"""A lab tracking server: PostgreSQL, a SeaweedFS S3 artifact store and ``mlflow server``.

``pipi server`` (and the tests) start real processes: a PostgreSQL cluster on a loopback
port (``initdb``/``pg_ctl``, data kept under the server folder), SeaweedFS's ``weed mini``
as the S3 store, and ``mlflow server --serve-artifacts`` in front of both, optionally with
MLflow's basic-auth app (``--app-name basic-auth``). Clients then need only
``MLFLOW_TRACKING_URI`` (and, with auth, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``): the
artifacts go through the tracking server, so no client holds S3 credentials.

Secrets come from the environment only and are handed to the child processes through their
environment (or, for SeaweedFS's identity file, a 0600 file in the server folder); nothing
here logs or prints them. The one secret made here, PostgreSQL's password, is generated and
kept in ``postgres_password`` (0600) in the server folder and reaches ``mlflow server`` as
``PGPASSWORD``. SeaweedFS's JWT keys are made at each start and reach ``weed`` through its
environment; its TLS key (:mod:`pipi.tracking.tls`) is kept 0600 under ``seaweedfs/tls``.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pipi.errors import ConfigError, PipiError
from pipi.tracking.tls import node_certificates

__all__ = [
    "ADMIN_PASSWORD_VARS",
    "ADMIN_USER_VARS",
    "ARTIFACT_STORES",
    "BACKENDS",
    "PG_HBA",
    "S3_KEY_VARS",
    "LabServer",
    "Postgres",
    "SeaweedS3",
    "ServerError",
    "free_port",
    "pg_bin",
    "secret_file",
    "wait_http",
]

log = logging.getLogger(__name__)

BACKENDS = ("sqlite", "postgres")
ARTIFACT_STORES = ("local", "s3")
#: Server-side admin credentials: MLflow's own variables, else the client's.
ADMIN_USER_VARS = ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_TRACKING_USERNAME")
ADMIN_PASSWORD_VARS = ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_TRACKING_PASSWORD")
S3_KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


class ServerError(PipiError):
    """A server component did not start or stopped."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, *, timeout: float = 90.0, proc: subprocess.Popen | None = None,
              ok=(200,)) -> None:
    """Wait until ``url`` answers one of the ``ok`` statuses (or ``proc`` exits)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                if r.status in ok:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in ok:
                return
            time.sleep(0.3)
        except OSError:
            time.sleep(0.3)
    raise ServerError(f"{url} did not answer within {timeout:.0f} s")


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        raise ServerError(f"`{name}` not found: install the server extra (pip install "
                          "'pipi[server]') or put it on PATH")
    return found


def _stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process group (mlflow server runs workers), SIGKILL when it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def _first_env(names) -> str | None:
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return None


# --------------------------------------------------------------------------- PostgreSQL
def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


#: Every connection, over the socket or TCP, proves the password (no trust, no peer).
PG_HBA = ("# written by pipi: every connection needs the password (scram-sha-256)\n"
          "local all all scram-sha-256\n"
          "host all all 127.0.0.1/32 scram-sha-256\n"
          "host all all ::1/128 scram-sha-256\n")


def secret_file(path: Path) -> str:
    """The secret kept in ``path`` (mode 0600, made with a random value when absent)."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    os.chmod(path, 0o600)
    return path.read_text().strip()


class Postgres:
    """A PostgreSQL cluster on a loopback port, data in ``root`` (kept across restarts).

    Run as root, the cluster belongs to the ``postgres`` user (``runuser``). Every connection
    (TCP on 127.0.0.1 or the socket in ``root``) authenticates with scram-sha-256 as
    ``postgres`` with a generated password kept in ``password_file`` (mode 0600, owned by
    the user running this; default ``<root>.password``), so another local OS user cannot
    reach the tracking or auth tables. The password never goes on a command line: clients
    get it through ``PGPASSWORD`` (:meth:`env`). A cluster made earlier with trust
    authentication gets the password (single-user mode) and the rules above on its next start.
    """

    def __init__(self, root: Path, *, port: int | None = None, databases=("mlflow",),
                 password_file: Path | None = None):
        self.bin = pg_bin()
        if self.bin is None:
            raise ServerError("PostgreSQL is not installed (apt-get install postgresql)")
        self.root = Path(root)
        self.data = self.root / "pgdata"
        self.port = port or free_port()
        self.root.mkdir(parents=True, exist_ok=True)
        self.password_file = Path(password_file or self.root.with_name(self.root.name +
                                                                       ".password"))
        self.password = secret_file(self.password_file)
        self._as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as_pg:
            shutil.chown(self.root, "postgres", "postgres")
            if subprocess.run([*self._as_pg, "test", "-w", str(self.root)]).returncode != 0:
                raise ServerError(f"the postgres user cannot write {self.root} (every parent "
                                  "folder needs o+x): choose a server folder it can reach")
        hba = self.data / "pg_hba.conf"
        if not (self.data / "PG_VERSION").exists():
            # trust only in the file: the cluster is started after it is replaced below
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        if hba.read_text() != PG_HBA:  # new, or made with trust by an older pipi
            # single-user mode reads its stdin: the password is on no command line or file
            self._run("postgres", "--single", "-D", str(self.data), "postgres",
                      input=f"ALTER ROLE postgres PASSWORD '{self.password}';\n")
        hba.write_text(PG_HBA)  # the cluster's own file (root writes it as it is)
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "pg.log"), "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")
        for db in databases:
            r = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                          "-tAc", f"SELECT 1 FROM pg_database WHERE datname='{db}'")
            if r.stdout.strip() != "1":
                self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                          db)

    def env(self) -> dict:
        """This process's environment plus ``PGPASSWORD``, for libpq clients and tools."""
        return {**os.environ, "PGPASSWORD": self.password}

    def _run(self, tool: str, *args: str, input: str | None = None
             ) -> subprocess.CompletedProcess:
        r = subprocess.run([*self._as_pg, str(self.bin / tool), *args], capture_output=True,
                           text=True,
                           input=input, env=self.env())
        if r.returncode != 0:
            raise ServerError(f"PostgreSQL {tool} failed ({r.stderr.strip()[-300:]}); "
                              f"log: {self.root / 'pg.log'}")
        return r

    def uri(self, db: str = "mlflow", *, with_password: bool = False) -> str:
        """The SQLAlchemy URI; without the password (give :meth:`env`'s ``PGPASSWORD``)
        unless ``with_password`` (for a client that takes only a URL, e.g. Optuna workers)."""
        user = f"postgres:{self.password}" if with_password else "postgres"
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{db}"

    def pid(self) -> int | None:
        """The postmaster's process id (pg_ctl detaches it), from its ``postmaster.pid``."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        subprocess.run([*self._as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m",
                        "fast", "stop"], capture_output=True)


# --------------------------------------------------------------------------- SeaweedFS
#: SeaweedFS components whose gRPC (and, for master/volume/filer/admin, HTTP) ports take mTLS.
_GRPC_PARTS = ("master", "volume", "filer", "s3", "admin", "worker", "msg_broker", "msg_agent",
               "mq")
_HTTPS_PARTS = ("master", "volume", "filer", "admin")
#: SeaweedFS's JWT keys (write and read, volume servers and filer), given through the environment.
_JWT_VARS = ("WEED_JWT_SIGNING_KEY", "WEED_JWT_SIGNING_READ_KEY", "WEED_JWT_FILER_SIGNING_KEY",
             "WEED_JWT_FILER_SIGNING_READ_KEY")


def _security_toml(tls) -> str:
    """SeaweedFS's security.toml: mutual TLS on every port but S3's (keys in the environment)."""
    q = json.dumps  # TOML basic strings take JSON's escapes
    lines = ["# written by pipi: every SeaweedFS port but S3's needs the lab's client certificate",
             "[access]", "ui = false",
             "[filer.expose_directory_metadata]", "enabled = false",
             "[grpc]", f"ca = {q(str(tls.ca))}"]
    for part in _GRPC_PARTS + ("client",):
        lines += [f"[grpc.{part}]", f"cert = {q(str(tls.cert))}", f"key = {q(str(tls.key))}"]
    lines += ["[https.client]", "enabled = true", f"cert = {q(str(tls.cert))}",
              f"key = {q(str(tls.key))}", f"ca = {q(str(tls.ca))}"]
    for part in _HTTPS_PARTS:
        lines += [f"[https.{part}]", f"cert = {q(str(tls.cert))}", f"key = {q(str(tls.key))}",
                  f"ca = {q(str(tls.ca))}"]
    return "\n".join(lines) + "\n"


def _owner_only(root: Path) -> None:
    """chmod a tree to 0700 folders / 0600 files (folders made by an older pipi were 0755)."""
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o700)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


class SeaweedS3:
    """SeaweedFS ``weed mini`` with its S3 gateway, one identity (the given keys), one bucket.

    Only the S3 port takes requests from anyone, and it needs the S3 keys (signed requests).
    Every other port of ``weed mini`` (master, volume, filer and admin, HTTP and gRPC) is TLS
    that requires a client certificate signed by the lab's own CA (:mod:`pipi.tracking.tls`),
    which only the SeaweedFS process holds; on top of that, writes and reads on the volume
    servers and filer need SeaweedFS's JWTs, signed with random keys made at each start and
    passed through the environment. Everything under ``root`` is owner-only (0700/0600,
    ``weed`` runs with umask 077), and so are the Unix sockets it makes in /tmp (removed
    at :meth:`stop`).
    """

    def __init__(self, root: Path, *, access_key: str, secret_key: str, bucket: str = "pipi",
                 port: int | None = None):
        self.root = Path(root)
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        self.access_key, self.secret_key = access_key, secret_key
        for sub in ("data", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        _owner_only(self.root)
        cfg = self.root / "s3.json"
        cfg.touch(mode=0o600)
        os.chmod(cfg, 0o600)
        cfg.write_text(json.dumps({"identities": [{"name": "pipi", "credentials": [
            {"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        self.tls = node_certificates(self.root / "tls")
        # weed reads ./security.toml first: its working folder is this one
        (self.root / "security.toml").write_text(_security_toml(self.tls))
        os.chmod(self.root / "security.toml", 0o600)
        env = {**os.environ, **{v: secrets.token_urlsafe(32) for v in _JWT_VARS}}
        self.log = os.fdopen(os.open(self.root / "weed.log", os.O_WRONLY | os.O_CREAT |
                                     os.O_APPEND, 0o600), "ab")
        self.proc = subprocess.Popen(
            [_tool("weed"), f"-logdir={self.root / 'logs'}", "mini", f"-dir={self.root / 'data'}",
             "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={self.port}", f"-s3.config={cfg}",
             f"-bucket={bucket}", "-master.telemetry=false", "-admin.ui=false", "-webdav=false",
             "-s3.port.iceberg=0", "-s3.port.lance=0", f"-master.port={free_port()}",
             f"-volume.port={free_port()}", f"-filer.port={free_port()}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
            cwd=self.root, umask=0o077)
        try:
            self._wait_bucket()
        except BaseException:
            self.stop()
            raise

    def _wait_bucket(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                self.client().head_bucket(Bucket=self.bucket)
                return
            except Exception as exc:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise ServerError(f"SeaweedFS S3 on {self.endpoint} not ready "
                                      f"({type(exc).__name__}); log: {self.root / 'weed.log'}")
                time.sleep(0.5)

    def env(self) -> dict:
        """What ``mlflow server`` needs to write to the bucket (never given to clients)."""
        return {"MLFLOW_S3_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self, secret: str | None = None):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=secret or self.secret_key,
                            region_name="us-east-1")

    def keys(self) -> list[str]:
        """Every object key of the bucket."""
        out, token = [], None
        while True:
            kw = {"ContinuationToken": token} if token else {}
            page = self.client().list_objects_v2(Bucket=self.bucket, **kw)
            out += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def unix_sockets(self) -> list[str]:
        """The Unix sockets ``weed`` listens on (it puts them in /tmp and leaves them there)."""
        import psutil

        try:
            proc = psutil.Process(self.proc.pid)
            return sorted({c.laddr for p in (proc, *proc.children(recursive=True))
                           for c in p.net_connections(kind="unix") if c.laddr})
        except psutil.Error:
            return []

    def stop(self) -> None:
        sockets = [s for s in self.unix_sockets() if Path(s).name.startswith("seaweedfs-")]
        _stop_group(self.proc)
        self.log.close()
        for path in sockets:
            Path(path).unlink(missing_ok=True)


# --------------------------------------------------------------------------- the lab server
@dataclass
class LabServer:
    """``mlflow server`` on a backend and artifact store that it starts itself.

    ``start()`` brings up the components, ``stop_tracking()``/``start_tracking()`` stop and
    restart only the tracking server on the same address, ``stop()`` stops everything.
    """

    root: Path
    backend: str = "sqlite"
    artifacts: str = "local"
    auth: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    workers: int = 1
    allowed_hosts: str = ""
    bucket: str = "pipi"
    pg: Postgres | None = field(default=None, init=False)
    s3: SeaweedS3 | None = field(default=None, init=False)
    proc: subprocess.Popen | None = field(default=None, init=False)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend={self.backend!r}: one of {', '.join(BACKENDS)}")
        if self.artifacts not in ARTIFACT_STORES:
            raise ConfigError(f"artifacts={self.artifacts!r}: one of {', '.join(ARTIFACT_STORES)}")
        self.port = self.port or free_port()
        self._env: dict[str, str] = {}
        if self.auth:
            self._env.update(self._auth_env())
        self._s3_keys = tuple(os.environ.get(v, "") for v in S3_KEY_VARS)
        if self.artifacts == "s3" and not all(self._s3_keys):
            raise ConfigError("artifacts=s3 needs the S3 keys in the environment: set "
                              f"{' and '.join(S3_KEY_VARS)} (SeaweedFS is started with them)")

    @property
    def uri(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    def _auth_env(self) -> dict:
        user, password = _first_env(ADMIN_USER_VARS), _first_env(ADMIN_PASSWORD_VARS)
        if not user or not password:
            raise ConfigError(
                "auth needs the admin credentials in the environment: set "
                f"{ADMIN_USER_VARS[0]} and {ADMIN_PASSWORD_VARS[0]} (or {ADMIN_USER_VARS[1]} and "
                f"{ADMIN_PASSWORD_VARS[1]})")
        key = os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY")
        if not key:
            kfile = self.root / "flask_secret_key"
            if not kfile.exists():
                self.root.mkdir(parents=True, exist_ok=True)
                kfile.touch(mode=0o600)
                kfile.write_text(secrets.token_hex(32))
            key = kfile.read_text().strip()
        return {"MLFLOW_AUTH_ADMIN_USERNAME": user, "MLFLOW_AUTH_ADMIN_PASSWORD": password,
                "MLFLOW_FLASK_SERVER_SECRET_KEY": key}

    def start(self) -> LabServer:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.auth:   # nobody else lists the lab's folder (its files are 0600); o+x stays:
            os.chmod(self.root, 0o711)   # the postgres user reaches its cluster through it
        try:
            if self.backend == "postgres":
                dbs = ("mlflow", "mlflow_auth") if self.auth else ("mlflow",)
                self.pg = Postgres(self.root / "postgres", databases=dbs,
                                   password_file=self.root / "postgres_password")
                self._env["PGPASSWORD"] = self.pg.password
            if self.artifacts == "s3":
                self.s3 = SeaweedS3(self.root / "seaweedfs", bucket=self.bucket,
                                    access_key=self._s3_keys[0], secret_key=self._s3_keys[1])
                self._env.update(self.s3.env())
            if self.auth:
                self._write_auth_config()
            self.start_tracking()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def backend_uri(self) -> str:
        return self.pg.uri() if self.pg else f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def artifacts_destination(self) -> str:
        if self.s3:
            return f"s3://{self.s3.bucket}/artifacts"
        return str(self.root / "artifacts")

    def _write_auth_config(self) -> None:
        db = self.pg.uri("mlflow_auth") if self.pg else f"sqlite:///{self.root / 'auth.db'}"
        path = self.root / "basic_auth.ini"
        # no secrets in the file: the admin credentials reach MLflow through its environment
        path.touch(mode=0o600)
        os.chmod(path, 0o600)
        path.write_text("[mlflow]\ndefault_permission = READ\n"
                        f"database_uri = {db}\n"
                        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                        # one PBKDF2 check per user and minute, not per request (a run makes
                        # thousands); a password change reaches other workers within 60 s
                        "auth_cache_ttl_seconds = 60\n")
        self._env["MLFLOW_AUTH_CONFIG_PATH"] = str(path)

    def command(self) -> list[str]:
        cmd = [_tool("mlflow"), "server", "--backend-store-uri", self.backend_uri,
               "--artifacts-destination", self.artifacts_destination, "--serve-artifacts",
               "--host", self.host, "--port", str(self.port), "--workers", str(self.workers)]
        if self.auth:
            cmd += ["--app-name", "basic-auth"]
        if self.allowed_hosts:
            cmd += ["--allowed-hosts", self.allowed_hosts]
        return cmd

    def start_tracking(self, timeout: float = 300) -> None:
        """Start ``mlflow server`` (again, on the same address) and wait until it is healthy."""
        log = self.root / "mlflow-server.log"
        self._log = open(log, "ab")
        if self.auth:   # it logs request paths and user names
            os.chmod(log, 0o600)
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **self._env}
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)
        try:
            wait_http(self.uri + "/health", proc=self.proc, timeout=timeout)
        except ServerError as exc:
            self.stop_tracking()
            raise ServerError(f"{exc}; log: {self.root / 'mlflow-server.log'}") from None

    def stop_tracking(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc)
            self._log.close()
            self.proc = None

    def stop(self) -> None:
        self.stop_tracking()
        if self.s3 is not None:
            self.s3.stop()
            self.s3 = None
        if self.pg is not None:
            self.pg.stop()
            self.pg = None

    def pids(self) -> list[int]:
        """The process ids of the components started here (each may have children)."""
        found = [self.proc.pid if self.proc else None, self.s3.proc.pid if self.s3 else None,
                 self.pg.pid() if self.pg else None]
        return [p for p in found if p is not None]

    def failed_component(self) -> str | None:
        """The name of a component that exited on its own, else None."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"mlflow server (log {self.root / 'mlflow-server.log'})"
        if self.s3 is not None and self.s3.proc.poll() is not None:
            return f"SeaweedFS (log {self.root / 'seaweedfs' / 'weed.log'})"
        return None

    def client_env_lines(self) -> list[str]:
        """How a lab points every entry point at this server (no secret values)."""
        lines = [f"export MLFLOW_TRACKING_URI={self.uri}"]
        if self.auth:
            lines.append("export MLFLOW_TRACKING_USERNAME=<user> "
                         "MLFLOW_TRACKING_PASSWORD=<password>")
        return lines

    def serve(self, poll: float = 1.0) -> None:
        """Block until Ctrl-C / SIGTERM (then stop everything) or until a component exits."""
        def _term(signum, frame):
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGTERM, _term)
        try:
            while True:
                dead = self.failed_component()
                if dead:
                    raise ServerError(f"{dead} stopped; the lab server is shut down")
                time.sleep(poll)
        except KeyboardInterrupt:
            log.info("stopping the lab server")
        finally:
            signal.signal(signal.SIGTERM, old)
            self.stop()
