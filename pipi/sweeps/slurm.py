"""SLURM job-array executor for ``ablate`` (one array task per child run) and for
``calibrate mode=train`` (one array task per Optuna worker, :func:`run_calibrate_workers`).

The parent (the ``ablate`` process) creates each child's MLflow run nested under the sweep
run, writes one command line per child and submits them as one ``sbatch --array`` job. Each
task runs ::

    mlflow run <project> -e train --env-manager local --run-id <child run> \
        --experiment-id <experiment> -P cell=... -P seed=... -P backbone=... \
        -P profile=... -P weights=... -P data=<staged folder>

with ``MLFLOW_TRACKING_URI`` set to the sweep's tracking URI, so all children land on the
same server. Per-frame children form a first array; sequence children a second array that
starts after it (``--dependency=afterany``), so the base runs they build on exist by then.
The parent waits for the arrays (``squeue``), reads each task's state (``scontrol``), checks
the child runs in MLflow (FINISHED is what counts), resubmits failed children once as a new
array, and marks a child that failed twice FAILED with the tail of its task log as reason.

Sequence tasks of one seed run side by side, so each may train the C3 autoencoder when none
has FINISHED yet (harmless: each run records the one it used in ``pipi.c3_run_id``; later
runs reuse the newest).

A ``calibrate`` task runs ``entrypoints/calibrate.py --worker-spec worker-<i>.json``: an
Optuna worker that loads the study from its RDB storage, runs its share of the trials and
writes ``worker-<i>.result.json`` beside its spec (``$PIPI_SLURM_DIR/<calibrate run>/calibrate``).

Options come from the environment: ``PIPI_SLURM_PARTITION``, ``PIPI_SLURM_ARGS`` (extra
sbatch arguments, shell-split, e.g. ``--gres=gpu:1 --time=04:00:00``), ``PIPI_SLURM_DIR``
(scripts and logs; default ``$PIPI_HOME/slurm``), ``PIPI_SLURM_POLL`` (seconds).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from shutil import which

import optuna

from pipi import tracking
from pipi.calibration.trials import (
    WORKER_SPEC_OPTION,
    TrialSpec,
    WorkerResult,
    read_worker_result,
    result_path,
    spec_path,
    write_worker_specs,
)
from pipi.config import train_params
from pipi.errors import PipiError
from pipi.paths import PROJECT_ROOT, pipi_home
from pipi.runs.calibrate import end_lost_trial_runs, fail_running_trials
from pipi.sweeps.plan import find_done, result_of

log = logging.getLogger(__name__)

TERMINAL_OK = {"FINISHED"}


class SlurmError(PipiError):
    """sbatch/squeue/scontrol failed or is missing."""


@dataclass(frozen=True)
class Task:
    """One array task: the child run it fills and the command that fills it."""

    run_id: str
    label: str
    command: str


def _bin(name: str) -> str:
    path = which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        raise SlurmError(f"{name} not found: install SLURM (apt-get install slurm-wlm munge) "
                         "or use executor=local")
    return path


def _call(args: list[str]) -> str:
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SlurmError(f"{' '.join(args[:2])} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def train_command(cfg, *, run_id: str, experiment_id: str, data: Path) -> str:
    """The task's ``mlflow run`` command line for one child configuration (every option)."""
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    args = [str(mlflow_bin), "run", str(PROJECT_ROOT), "-e", "train", "--env-manager", "local",
            "--run-id", run_id, "--experiment-id", experiment_id]
    for k, v in train_params(cfg, data=str(data)).items():
        args += ["-P", f"{k}={v}"]
    if tracking.model_prefix() != tracking.DEFAULT_MODEL_PREFIX:   # an argument, not the env
        args += ["-P", f"model_prefix={tracking.model_prefix()}"]
    return shlex.join(args)


def write_array_script(tasks: Sequence[Task], folder: Path, *, name: str,
                       tracking_uri: str) -> Path:
    """Write the task list and the sbatch script; returns the script path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.tasks").write_text("".join(t.command + "\n" for t in tasks))
    (folder / f"{name}.json").write_text(json.dumps([t.__dict__ for t in tasks], indent=1))
    env = {"MLFLOW_TRACKING_URI": tracking_uri, "MLFLOW_DISABLE_TELEMETRY": "true",
           # the job keys its run as this sweep does, whatever git says on the compute node
           tracking.CODE_VERSION_ENV: tracking.code_version()}
    if os.environ.get("PIPI_HOME"):
        env["PIPI_HOME"] = os.environ["PIPI_HOME"]
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script = folder / f"{name}.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name=pipi-{name}\n"
        f"#SBATCH --output={folder}/{name}_%a.log\n"
        "set -eo pipefail\n"
        "unset MLFLOW_RUN_ID MLFLOW_EXPERIMENT_ID MLFLOW_EXPERIMENT_NAME\n"
        f"{exports}"
        f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH\n"
        f"cd {shlex.quote(str(PROJECT_ROOT))}\n"
        f'cmd=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {shlex.quote(str(folder / (name + ".tasks")))})\n'
        'echo "task $SLURM_ARRAY_TASK_ID: $cmd"\n'
        'eval "$cmd"\n')
    script.chmod(0o755)
    return script


def submit_array(script: Path, n: int, *, after: str | None = None) -> str:
    """``sbatch --array=0-(n-1)``; returns the job id."""
    args = [_bin("sbatch"), "--parsable", f"--array=0-{n - 1}"]
    if os.environ.get("PIPI_SLURM_PARTITION"):
        args.append(f"--partition={os.environ['PIPI_SLURM_PARTITION']}")
    args += shlex.split(os.environ.get("PIPI_SLURM_ARGS", ""))
    if after:
        args.append(f"--dependency=afterany:{after}")
    args.append(str(script))
    job = _call(args).strip().split(";")[0]
    log.info("submitted SLURM array job %s (%d tasks)", job, n)
    return job


def wait_for(job_ids: Sequence[str], *, poll: float | None = None,
             timeout: float | None = None) -> None:
    """Block until none of ``job_ids`` is pending or running (``squeue``)."""
    poll = float(os.environ.get("PIPI_SLURM_POLL", "2")) if poll is None else poll
    deadline = None if timeout is None else time.time() + timeout
    while True:
        out = _call([_bin("squeue"), "-h", "-o", "%i %T", "-j", ",".join(job_ids)])
        if not out.strip():
            return
        if deadline is not None and time.time() > deadline:
            raise SlurmError(f"SLURM jobs {job_ids} still queued after {timeout} s")
        time.sleep(poll)


def task_states(job_id: str) -> dict[int, str]:
    """``{array index: JobState}`` from ``scontrol show job`` (empty when forgotten)."""
    r = subprocess.run([_bin("scontrol"), "-o", "show", "job", job_id], capture_output=True,
                       text=True, check=False)
    states = {}
    for line in r.stdout.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("ArrayTaskId", "").isdigit():
            states[int(f["ArrayTaskId"])] = f.get("JobState", "?")
    return states


def log_tail(folder: Path, name: str, i: int, n: int = 800) -> str:
    path = folder / f"{name}_{i}.log"
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return f"(no task log {path})"


def run_slurm(children, *, data: Path, parent_run_id: str, retries: int = 1,
              folder: Path | None = None) -> list:
    """Run the children of a sweep as SLURM job arrays; returns their ``ChildResult``s."""
    folder = Path(folder or os.environ.get("PIPI_SLURM_DIR") or pipi_home() / "slurm")
    folder = folder / parent_run_id
    uri = tracking.current_tracking_uri()
    experiment_id = tracking.get_run(parent_run_id).experiment_id
    results: dict[int, object] = {}
    pending: list[int] = []
    for i, child in enumerate(children):
        done = find_done(child, entry_point="train")
        if done is not None:
            results[i] = done
        else:
            pending.append(i)
    errors: dict[int, list[str]] = {i: [] for i in pending}
    for attempt in range(1, retries + 2):
        if not pending:
            break
        runs: dict[int, str] = {}
        jobs: list[tuple[str, str, list[int]]] = []
        after = None
        phases = ([i for i in pending if not children[i].cfg.cell_config.is_sequence],
                  [i for i in pending if children[i].cfg.cell_config.is_sequence])
        for phase, idx in zip(("frame", "sequence"), phases):
            if not idx:
                continue
            tasks = []
            for i in idx:
                c = children[i]
                rid = tracking.create_child_run(parent_run_id, run_name=c.cfg.cell + "-"
                                                + f"{c.cfg.backbone}-s{c.cfg.seed}",
                                                tags={tracking.tags.TAG_PARENT_RUN: parent_run_id,
                                                      tracking.tags.TAG_SWEEP_ROLE: c.role,
                                                      tracking.tags.TAG_SLURM_ATTEMPT: attempt})
                runs[i] = rid
                tasks.append(Task(rid, c.label, train_command(
                    c.cfg, run_id=rid, experiment_id=experiment_id, data=data)))
            name = f"{phase}-try{attempt}"
            script = write_array_script(tasks, folder, name=name, tracking_uri=uri)
            job = submit_array(script, len(tasks), after=after)
            after = job
            jobs.append((job, name, idx))
        wait_for([j for j, _, _ in jobs])
        still = []
        for job, name, idx in jobs:
            states = task_states(job)
            for k, i in enumerate(idx):
                tracking.set_run_tags(runs[i], {tracking.tags.TAG_SLURM_JOB: f"{job}_{k}"})
                run = tracking.get_run(runs[i])
                if run.status in TERMINAL_OK:
                    status = "trained" if attempt == 1 else "retried"
                    results[i] = result_of(children[i], run, status, attempt,
                                         "; ".join(errors[i]))
                    continue
                reason = run.tags.get(tracking.tags.TAG_FAILURE) or log_tail(folder, name, k)
                errors[i].append(f"attempt {attempt} (SLURM {job}_{k} "
                                 f"{states.get(k, '?')}): {reason.strip()}")
                if run.live:
                    tracking.terminate_run(runs[i], "FAILED", reason)
                log.error("child %s failed on SLURM (attempt %d): %s", children[i].label,
                          attempt, reason[-300:])
                still.append(i)
        pending = still
    for i in pending:
        results[i] = result_of(children[i], None, "failed", retries + 1, "; ".join(errors[i]))
    return [results[i] for i in range(len(children))]


def run_calibrate_workers(specs: Sequence[TrialSpec], *, storage,
                          folder: Path | None = None) -> list[WorkerResult]:
    """The workers of one ``calibrate`` call as one SLURM job array: task i runs
    ``entrypoints/calibrate.py --worker-spec worker-i.json`` (an Optuna worker on the RDB
    study). A task that ends without its result file is an error naming its SLURM state and
    log tail (the call's RUNNING trials FAIL, and their runs end FAILED)."""
    base = Path(folder or os.environ.get("PIPI_SLURM_DIR") or pipi_home() / "slurm")
    folder = base / specs[0].parent_run_id / "calibrate"
    tasks = [Task("", f"calibrate-worker-{spec.index}", shlex.join(
        [sys.executable, str(PROJECT_ROOT / "entrypoints" / "calibrate.py"),
         WORKER_SPEC_OPTION, str(path)])) for spec, path in zip(
             specs, write_worker_specs(specs, folder), strict=True)]
    script = write_array_script(tasks, folder, name="workers",
                                tracking_uri=specs[0].tracking_uri)
    job = submit_array(script, len(tasks))
    wait_for([job])
    states = task_states(job)
    results, errors = [], []
    for k, spec in enumerate(specs):
        got = result_path(spec_path(folder, spec.index))
        if got.is_file():
            results.append(read_worker_result(got))
            continue
        tail = log_tail(folder, "workers", k)
        errors.append(f"SLURM task {job}_{k} ({states.get(k, '?')}): {tail.strip()[-300:]}")
    if errors:
        fail_running_trials(storage, specs[0].study, calibrate_run=specs[0].parent_run_id)
        end_lost_trial_runs(optuna.load_study(study_name=specs[0].study, storage=storage))
        raise PipiError("calibrate workers failed: " + "; ".join(errors))
    return results


__all__ = ["SlurmError", "Task", "log_tail", "run_calibrate_workers", "run_slurm",
           "submit_array", "task_states", "train_command", "wait_for", "write_array_script"]
