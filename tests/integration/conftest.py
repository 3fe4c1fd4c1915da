"""The integration tier's shared smoke study: trained once per session, read by every module
that needs finished runs (aggregate, galar, robustness/transplant, calibrate, serving) instead
of each training its own."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, missing_tools

#: The study's cells and seeds. ResNet-18: an EfficientNet-B0 trained for two smoke batches is
#: nearly input-independent in eval mode, so perturbations and prior channels would barely
#: move its predictions.
SMOKE_CELLS = ("a", "pi", "distill", "b_plus")
SMOKE_SEEDS = (41, 42)
SMOKE_BACKBONE = "resnet18"
SMOKE_EXPERIMENT = "smoke-study"


@dataclass(frozen=True)
class SmokeStudy:
    """Finished, registered smoke runs on the tiny release, on the session's `mlflow server`."""

    uri: str
    experiment: str
    data: Path
    backbone: str
    runs: dict[tuple[str, int], str] = field(default_factory=dict)    # (cell, seed) -> run id
    summaries: dict[tuple[str, int], dict] = field(default_factory=dict)

    def run(self, cell: str, seed: int = SMOKE_SEEDS[0]) -> str:
        return self.runs[(cell, seed)]

    def model(self, cell: str) -> str:
        """The registered model name of a cell's family."""
        return f"pipi-{self.backbone}-{cell}"


@pytest.fixture(scope="session")
def smoke_study(mlflow_server, tiny_staged) -> SmokeStudy:
    """a, pi, distill and b_plus x seeds 41, 42 (smoke profile, no pretrained weights), each
    trained once per session and registered; b_plus reuses the pi run of its seed as its base.

    Tests read these runs and log their own children into their own experiments; they never
    add runs to ``smoke-study`` (aggregate reads that experiment whole)."""
    import mlflow

    from pipi.config import make_config
    from pipi.runs.training import train

    mlflow.set_tracking_uri(mlflow_server.uri)
    study = SmokeStudy(mlflow_server.uri, SMOKE_EXPERIMENT, tiny_staged, SMOKE_BACKBONE)
    try:
        for cell in SMOKE_CELLS:
            for seed in SMOKE_SEEDS:
                cfg = make_config(cell=cell, seed=seed, backbone=SMOKE_BACKBONE, profile="smoke",
                                  weights="none")
                s = train(cfg, data=str(tiny_staged), experiment=SMOKE_EXPERIMENT, progress=False)
                study.runs[(cell, seed)] = s.run_id
                study.summaries[(cell, seed)] = s
    finally:
        while mlflow.active_run():
            mlflow.end_run()
    return study


@dataclass(frozen=True)
class AuthLab:
    """A `pipi server --auth` lab server (PostgreSQL backend) and its admin's credentials."""

    server: object  # pipi.tracking.server.LabServer
    admin: str
    password: str

    @property
    def uri(self) -> str:
        return self.server.uri


@pytest.fixture(scope="session")
def auth_lab():
    """One lab server with auth on PostgreSQL for the modules that need team members
    (started once: a server start costs ~10 s)."""
    import os
    import secrets
    import shutil
    import tempfile

    from pipi.tracking.server import LabServer, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (make test installs it: scripts/system-deps.sh)")
    admin, password = f"admin-{secrets.token_hex(3)}", f"pw-{secrets.token_hex(12)}"
    creds = {"MLFLOW_AUTH_ADMIN_USERNAME": admin, "MLFLOW_AUTH_ADMIN_PASSWORD": password}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    root = Path(tempfile.mkdtemp(prefix="pipi-authlab-"))  # the postgres user must reach it
    os.chmod(root, 0o755)
    try:
        server = LabServer(root, backend="postgres", artifacts="local", auth=True)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        server.start()
        yield AuthLab(server, admin, password)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class TeamLab:
    """`pipi server`'s full lab (PostgreSQL, a SeaweedFS S3 store with mutual TLS, MLflow's
    basic-auth app) and the secrets it was started with, which no client holds."""

    server: object  # pipi.tracking.server.LabServer
    secrets: dict[str, str]


@pytest.fixture(scope="session")
def team_lab():
    """One full lab for the modules that check it from outside (test_team_server: a client's
    train/aggregate/load and no secret anywhere; test_lab_store_auth: no other OS user in),
    started once: a start and stop cost ~40 s."""
    import secrets as tokens
    import tempfile

    from pipi.tracking.server import LabServer, pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (make test installs it: scripts/system-deps.sh)")
    secrets = {
        "MLFLOW_TRACKING_USERNAME": f"lab-admin-{tokens.token_hex(4)}",
        "MLFLOW_TRACKING_PASSWORD": f"pw-{tokens.token_hex(12)}",
        "AWS_ACCESS_KEY_ID": f"ak{tokens.token_hex(8)}",
        "AWS_SECRET_ACCESS_KEY": f"sk-{tokens.token_hex(16)}",
    }
    saved = {k: os.environ.get(k) for k in secrets}
    os.environ.update(secrets)
    # outside pytest's 0700 tmp tree: the postgres user must reach its data folder
    root = Path(tempfile.mkdtemp(prefix="pipi-lab-"))
    os.chmod(root, 0o755)
    try:
        server = LabServer(root, backend="postgres", artifacts="s3", auth=True)
    finally:  # the server holds them now; clients get only what they need
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        server.start()
        yield TeamLab(server, secrets)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def other_user():
    """A second local OS user (made with useradd, removed after)."""
    import secrets
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("needs root to create a second local OS user (useradd); run as root")
    name = f"pipi-other-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture()
def slurm(tmp_path_factory, monkeypatch):
    """A one-node SLURM cluster of the test's own (slurmctld + slurmd, 2 CPUs); SLURM_CONF
    and pipi's job folder point at it."""
    gone = missing_tools()
    if gone:
        pytest.skip(f"SLURM not installed ({', '.join(gone)} missing); "
                    "scripts/system-deps.sh installs slurm-wlm and munge")
    if os.geteuid() != 0:
        pytest.skip("the one-node test cluster runs slurmd as root")
    root = Path(str(tmp_path_factory.mktemp("slurm", numbered=True)))
    cluster = SlurmCluster(root, cpus=2)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("PIPI_SLURM_DIR", str(root / "jobs"))
    monkeypatch.setenv("PIPI_SLURM_POLL", "1")
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def galar_staged(tmp_path_factory, pipi_home) -> Path:
    """A tiny synthetic Galar-format release, staged (read-only for the tests)."""
    from pipi.data import synth
    from pipi.data.staging import stage_galar

    rel = synth.synthesize_galar(tmp_path_factory.mktemp("galar") / "rel", preset="tiny",
                                     seed=3, progress=False)
    out = tmp_path_factory.mktemp("galar-st") / "staged"
    stage_galar(rel, out, progress=False)
    return out


@pytest.fixture()
def training_store(sqlite_tracking, monkeypatch):
    """The module's SQLite store for a test that trains in this process: outside any
    `mlflow run` (no MLFLOW_RUN_ID to attach to) and under the default model prefix."""
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv("PIPI_MODEL_PREFIX", "pipi")
    return sqlite_tracking
