"""Shared fixtures: a real `mlflow server` process, the tiny synthetic release, staging."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see pipi/__init__.py
import shutil  # noqa: E402
import signal  # noqa: E402
import time

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # started as a background job of a non-interactive shell: SIGINT is ignored and every
    # process the tests start would inherit that; the signal tests act as a terminal's Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow 3's server starts seven huey job consumers (GenAI jobs pipi never submits), each a
# Python process importing mlflow: on 2 cores that is seconds of CPU per server the tests start.
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
ROOT = Path(__file__).resolve().parent.parent

from servers import MlflowServer  # noqa: E402  (tests/ is on sys.path before conftest loads)
from stores import drop_artifacts, new_sqlite_store

# What a run hands to another used to travel through: MLflow's experiment and run, pipi's model
# prefix. Issue 39: pipi passes them as arguments and writes none of them, so nothing resets
# them between tests any more; a test or a fixture that leaves one behind fails instead.
_RUN_ENV = ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID",
            "PIPI_MODEL_PREFIX")


def _process_state() -> dict:
    """The hand-off variables in os.environ and MLflow's process-wide active experiment."""
    import sys

    fluent = sys.modules.get("mlflow.tracking.fluent")
    return {**{k: os.environ.get(k) for k in _RUN_ENV},
            "mlflow's active experiment (set_experiment)": getattr(
                fluent, "_active_experiment_id", None) if fluent is not None else None}


def _left_behind(before: dict, what: str) -> None:
    after = _process_state()
    moved = {k: (before[k], after[k]) for k in after if after[k] != before[k]}
    assert not moved, (f"{what} left process-wide state behind (was, now): {moved}; pass the "
                       "experiment, run or prefix as an argument, or use monkeypatch")


@pytest.fixture(autouse=True, scope="module")
def _a_module_leaves_nothing_behind(request):
    """A module's fixtures (a session fixture's trainings run inside the first module that
    needs them) leave no hand-off variable and no active experiment to the next module."""
    before = _process_state()
    yield
    _left_behind(before, f"module {request.module.__name__}")


@pytest.fixture(autouse=True)
def _a_test_leaves_nothing_behind(request):
    """Nor does a test, to the next one (issue 39: the fixtures that reset them are gone)."""
    before = _process_state()
    yield
    _left_behind(before, request.node.nodeid)


@pytest.fixture(autouse=True, scope="session")
def _work_in_a_temporary_folder(tmp_path_factory):
    """Each test process works in a folder of its own: MLflow gives an experiment created on a
    SQLite store the working directory's ./mlruns as its artifact root, so tests run from the
    repository filled its ./mlruns (34 GB after one session; CI's disk filled up)."""
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(here)


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _empty_tmp_path_of_a_passed_test(request, tmp_path_factory):
    """A passed test's tmp_path is emptied when the test ends (make test wrote about 14 GB there
    and CI's disk is the machine's). The folder itself stays: pytest numbers the next folder
    of the same name after the existing ones, and a reused path would reach MLflow's store
    cached for that SQLite file (pytest's own "failed" retention policy removes it)."""
    yield
    path = request.node.funcargs.get("tmp_path")
    if path is None or request.node.stash.get(_FAILED, False):
        return
    # the artifacts of the test's own stores live in the working folder's ./mlruns
    for db in Path(path).rglob("*.db"):
        drop_artifacts(db, within=tmp_path_factory.getbasetemp())
    for child in list(Path(path).iterdir()) if Path(path).is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (SQLite backend, local artifacts) on a free loopback port."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server
    server.stop()


@pytest.fixture()
def tracking(mlflow_server, monkeypatch):
    """Point mlflow (in-process and in subprocesses) at the session's server."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    mlflow.set_tracking_uri(mlflow_server.uri)
    yield mlflow_server.uri
    while mlflow.active_run():
        mlflow.end_run()


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory, request) -> str:
    """A SQLite tracking and registry store of one test module (a registry needs no server):
    a copy of the process's new store (tests/stores.py: MLflow's migrations run once)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    uri = new_sqlite_store(tmp_path_factory.mktemp(f"{name}-store") / "mlflow.db")
    yield uri
    drop_artifacts(Path(uri.removeprefix("sqlite:///")), within=tmp_path_factory.getbasetemp())


@pytest.fixture()
def sqlite_tracking(sqlite_store, monkeypatch):
    """Point mlflow (in-process and in subprocesses) at the module's SQLite store."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store)
    mlflow.set_tracking_uri(sqlite_store)
    yield sqlite_store


@pytest.fixture(scope="session")
def pipi_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("pipi-home")
    os.environ["PIPI_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory) -> Path:
    from pipi.data.synth import synthesize_kvasir

    return synthesize_kvasir(tmp_path_factory.mktemp("rel") / "kvasir-tiny", preset="tiny",
                             seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_staged(tiny_release, tmp_path_factory, pipi_home) -> Path:
    from pipi.data.staging import stage_kvasir

    out = tmp_path_factory.mktemp("staged") / "tiny"
    stage_kvasir(tiny_release / "labelled_images", tiny_release / "metadata.csv", out, seed=42,
                 progress=False)
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``make test`` runs the tiers on two pytest-xdist workers (``--dist loadgroup``). Each
    integration module stays on one worker (its module fixtures train once), and every test of
    an expensive session fixture (:data:`SHARED_GROUPS`) shares one worker, so that fixture is
    built once per run (the smoke study trains eight runs; the auth lab starts PostgreSQL and
    an auth server)."""
    groups = {}
    for item in items:
        path = Path(str(item.fspath))
        if "integration" not in path.parts:
            continue
        mark = item.get_closest_marker("xdist_group")
        shared = [g for f, g in SHARED_GROUPS.items() if f in item.fixturenames]
        group = mark.args[0] if mark else shared[0] if shared else path.stem
        if not mark:
            item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = group
    # xdist (with --no-loadscope-reorder) hands out one group at a time, in this order, to
    # whichever worker is free: the longest integration groups first, the many short unit
    # tests last to fill the gaps, so that no worker is left alone with a long group at the
    # end (a stable sort: each group's tests keep their order)
    items.sort(key=lambda it: len(LONG_GROUPS) + 1 if it.nodeid not in groups else (
        LONG_GROUPS.index(groups[it.nodeid]) if groups[it.nodeid] in LONG_GROUPS
        else len(LONG_GROUPS)))


def pytest_configure(config):
    """``--dist loadgroup`` groups tests by their id, into which pytest-xdist writes the group
    (``item._nodeid += "@group"``). pytest 9.2 reads the id from elsewhere, so every test
    became its own group and module fixtures and the smoke study were trained once per
    worker: refuse to run like that."""
    if config.getoption("dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    from _pytest.nodes import Node

    probe = object.__new__(Node)
    probe._nodeid = "test@group"
    try:
        seen = Node.nodeid.fget(probe)
    except AttributeError:
        seen = None
    if seen != "test@group":
        raise pytest.UsageError(
            f"pytest {pytest.__version__} hides pytest-xdist's loadgroup groups (each test would "
            "be its own group): install the pytest that pyproject.toml's test extra pins "
            "(make test does)")


_WORKERS_DOWN: dict[str, float] = {}


def pytest_sessionstart(session):
    session.config._pipi_started = time.monotonic()
    session.config._pipi_had_mlruns = (ROOT / "mlruns").exists()


def pytest_sessionfinish(session, exitstatus):
    """Fail a session whose tests wrote MLflow artifacts into the repository's ./mlruns (a
    store opened without an artifact location from the repository: see
    ``_work_in_a_temporary_folder``)."""
    if hasattr(session.config, "workerinput") or session.config._pipi_had_mlruns:
        return
    if (ROOT / "mlruns").exists():
        session.config._pipi_leak = ROOT / "mlruns"
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: when each worker ran out of work (seconds since the session started)."""
    started = getattr(node.config, "_pipi_started", None)
    if started is not None:
        _WORKERS_DOWN[node.gateway.id] = time.monotonic() - started


def pytest_terminal_summary(terminalreporter):
    """A leak into the repository's ./mlruns; under pytest-xdist, when each worker finished (a
    worker that ends long after the other ran a group alone at the end: rebalance
    ``LONG_GROUPS``)."""
    leak = getattr(terminalreporter.config, "_pipi_leak", None)
    if leak is not None:
        terminalreporter.write_line(
            f"FAILED: the tests wrote {leak} (MLflow artifacts in the repository): a test opened "
            "a store from the repository's folder", red=True)
    if len(_WORKERS_DOWN) > 1:
        ends = sorted(_WORKERS_DOWN.items(), key=lambda kv: kv[1])
        terminalreporter.write_line(
            "xdist workers finished at: " + ", ".join(f"{w} {t:.0f} s" for w, t in ends)
            + f" (the last {ends[-1][1] - ends[0][1]:.0f} s on one worker)")


#: session fixtures too costly to build on both workers -> the xdist group of their tests (a
#: test using both goes with the first)
SHARED_GROUPS = {"smoke_study": "smoke-study", "auth_lab": "auth-lab", "team_lab": "team-lab"}

#: integration groups by measured duration, longest first (``make test`` prints the slowest)
LONG_GROUPS = ("test_serve-virtualenv",   # make test-envs' longest (141 s), first there
               "smoke-study", "test_readme", "test_mechanisms", "test_faults",
               "test_calibrate_train", "test_galar", "test_signals", "auth-lab",
               "test_sequence_cells", "test_ablate", "test_runtime_runs", "test_train")
