"""SIGTERM and Ctrl-C end a training run KILLED with a reason (issue 24), under ``pipi`` and
under ``mlflow run``; real processes, real signals, the run read back from the store."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from stores import new_sqlite_store

from pipi import tracking

ROOT = Path(__file__).resolve().parents[2]
LONG = ["--cell", "a", "--profile", "smoke", "--weights", "none", "--epochs", "200",
        "--patience", "200"]
PIPI = [sys.executable, "-c", "from pipi.cli import main; main()"]


def _running_run(client: MlflowClient, proc: subprocess.Popen, experiment: str,
                 timeout: float = 600) -> str:
    """The id of the run ``proc`` trains, once it has logged an epoch and a checkpoint."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1][-3000:])
        exp = client.get_experiment_by_name(experiment)
        if exp is not None:
            for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'"):
                if "train/loss" in r.data.metrics and client.list_artifacts(r.info.run_id,
                                                                             "checkpoints"):
                    return r.info.run_id
        time.sleep(1)
    raise TimeoutError("no epoch logged")


def _env(uri: str, **extra) -> dict:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT), **extra}


def _mlflow_run_train(uri: str, staged: Path, cwd: Path, experiment: str, out
                      ) -> subprocess.Popen:
    """`mlflow run . -e train` of a long smoke training, in a process group of its own."""
    params = [x for k, v in zip(LONG[::2], LONG[1::2])
              for x in ("-P", f"{k.removeprefix('--').replace('-', '_')}={v}")]
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", "train",
         "--env-manager", "local", "--experiment-name", experiment, *params,
         "-P", f"data={staged}"],
        stdout=out, stderr=out, text=True, cwd=cwd, env=_env(uri), start_new_session=True)


@pytest.mark.slow
def test_resume_of_a_live_run_is_refused_then_sigterm_ends_it_killed_with_the_resume_command(
        tiny_staged, tmp_path):
    """One long ``pipi train`` serves two checks (they were two tests, each paying the launch
    and its first epoch): while it trains, a second process's ``pipi train --resume`` of its
    run is refused in one line, the first one's heartbeat read from the store (issue 24,
    liveness; was test_liveness.py); then SIGTERM ends the run KILLED with the resume
    command."""
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    env = _env(uri, PIPI_HEARTBEAT_S="2")
    proc = subprocess.Popen(
        [*PIPI, "train", *LONG, "--data", str(tiny_staged), "--experiment", "sigterm"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        rid = _running_run(client, proc, "sigterm")
        # liveness: the resume is refused, the first process goes on untouched
        second = subprocess.run([*PIPI, "train", "--resume", rid], check=False,
                                capture_output=True, text=True, cwd=tmp_path, env=env,
                                timeout=300)
        assert second.returncode != 0
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, second.stderr[-3000:]
        assert lines[0].startswith(f"error: resume={rid}: the run is still being trained by "
                                   "process "), lines[0]
        assert proc.poll() is None
        assert client.get_run(rid).info.status == "RUNNING"
        steps = [m.step for m in client.get_metric_history(rid, "train/loss")]
        assert len(steps) == len(set(steps))
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    # SIGTERM: the run ends KILLED, with the resume command
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    run = client.get_run(rid)
    assert run.info.status == "KILLED"
    reason = run.data.tags[tracking.tags.TAG_FAILURE]
    assert "SIGTERM" in reason and f"-P resume={rid}" in reason, reason
    assert "Traceback" not in err, err[-3000:]
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith(f"train run {rid} KILLED: terminated by SIGTERM"), last
    assert f"pipi train --resume {rid}" in last
    # stopped: its run is no longer held by anyone
    assert tracking.liveness.live_holder(run) is None


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "scancel"])
def test_signal_to_mlflow_run_ends_its_run_killed(tiny_staged, tmp_path, sig):
    """Ctrl-C in a terminal (SIGINT) and SLURM's scancel (SIGTERM) signal every process of the
    job: ``mlflow run`` and its entry point; the run must end KILLED, not FAILED."""
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    proc = _mlflow_run_train(uri, tiny_staged, tmp_path, "signals", subprocess.PIPE)
    try:
        rid = _running_run(client, proc, "signals")
        os.killpg(proc.pid, sig)  # the whole process group, as a terminal or SLURM does
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say what each process was doing
            ps = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,args"], capture_output=True,
                                text=True).stdout.splitlines()
            tree = "\n".join(ln for ln in ps[1:] if ln.split()[2] == str(proc.pid))
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"still running 120 s after {sig.name}:\n{tree}\n"
                                 f"{proc.communicate()[1][-4000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # `mlflow run` marks the run FAILED after its child exits (an MLflow bug, see
    # pipi.tracking.finalise); pipi's finaliser puts KILLED back once it has exited
    deadline = time.time() + 60
    while (run := client.get_run(rid)).info.status != "KILLED" and time.time() < deadline:
        time.sleep(1)
    assert run.info.status == "KILLED", (run.data.tags.get(tracking.tags.TAG_FAILURE), err[-3000:])
    reason = run.data.tags[tracking.tags.TAG_FAILURE]
    assert ("SIGINT" if sig == signal.SIGINT else "SIGTERM") in reason, reason
    assert f"resume={rid}" in reason


@pytest.mark.slow
def test_sigterm_to_mlflow_run_alone_ends_the_entry_point_and_its_run_killed(tiny_staged,
                                                                             tmp_path):
    """``docker stop`` of a container whose main process is ``mlflow run`` signals that
    process alone; MLflow dies at once without passing it on. The entry point follows its
    ``mlflow run`` parent (``tracking.end_with_mlflow_run``): it ends its run KILLED and exits,
    instead of training on orphaned."""
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    proc = _mlflow_run_train(uri, tiny_staged, tmp_path, "alone", subprocess.DEVNULL)
    pgid = proc.pid
    try:
        rid = _running_run(client, proc, "alone")
        proc.send_signal(signal.SIGTERM)               # `mlflow run` only, not its group
        proc.wait(timeout=60)
        deadline = time.time() + 90
        while (run := client.get_run(rid)).info.status == "RUNNING" and time.time() < deadline:
            time.sleep(1)
        assert run.info.status == "KILLED", run.data.tags.get(tracking.tags.TAG_FAILURE)
        assert "SIGTERM" in run.data.tags[tracking.tags.TAG_FAILURE]
        while time.time() < deadline:                  # the entry point has exited too
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the entry point is still running after its run ended")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_ends_calibrate_killed_in_one_line_with_no_child_left_running(tiny_staged,
                                                                             tmp_path):
    from pipi.config import make_config
    from pipi.runs import training as runner

    uri = new_sqlite_store(tmp_path / "mlflow.db")
    import mlflow

    mlflow.set_tracking_uri(uri)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        src = runner.train(make_config(cell="pi", backbone="resnet18", profile="smoke",
                                       weights="none", seed=5), data=str(tiny_staged),
                           experiment="cal-src", progress=False, register=False).run_id
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    client = MlflowClient(uri)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from pipi.cli import main; main()", "calibrate", "--run", src,
         "--trials", "500", "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--data",
         str(tiny_staged), "--experiment", "cal"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(uri))
    deadline = time.time() + 600
    runs = []
    while len(runs) < 3 and time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        exp = client.get_experiment_by_name("cal")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith("calibrate run ") and "KILLED: terminated by SIGTERM" in last, last
    exp = client.get_experiment_by_name("cal")
    statuses = [r.info.status for r in client.search_runs([exp.experiment_id])]
    assert "RUNNING" not in statuses, statuses
    assert statuses.count("KILLED") >= 1


@pytest.mark.slow
def test_scancel_of_an_ablate_sweep_ends_the_parent_and_its_children_killed(tiny_staged,
                                                                            tmp_path):
    """SIGTERM to the job's process group (what scancel does): the sweep's parent run and
    the children its process pool trains all end KILLED with the reason."""
    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from pipi.cli import main; main()", "ablate", "--study",
         "eight_cell", "--cells", "a", "--seeds", "1,2", *LONG[2:], "--data", str(tiny_staged),
         "--parallel", "2", "--experiment", "abl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(uri),
        start_new_session=True)
    try:
        deadline, training = time.time() + 600, []
        while len(training) < 2 and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            exp = client.get_experiment_by_name("abl")
            training = client.search_runs([exp.experiment_id],
                                          "metrics.`train/loss` > 0") if exp else []
            time.sleep(1)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    runs = client.search_runs([client.get_experiment_by_name("abl").experiment_id])
    by_entry = sorted((r.data.tags.get(tracking.tags.TAG_ENTRY_POINT), r.info.status) for r in runs)
    assert by_entry == [("ablate", "KILLED"), ("train", "KILLED"), ("train", "KILLED")], by_entry
    assert all("SIGTERM" in r.data.tags[tracking.tags.TAG_FAILURE] for r in runs)
