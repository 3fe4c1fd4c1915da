"""A `calibrate mode=train` worker killed with SIGKILL (or a lost node) cannot end its trial's
run: Optuna's heartbeat fails the trial once its grace period is over, and the next
`calibrate` of the study ends the run FAILED with the reason (``end_lost_trial_runs``).

The kill itself is stood in for by a trial whose heartbeat stops (what a SIGKILLed worker
leaves behind); the storage, the heartbeat check and the MLflow store are real (SQLite)."""

from __future__ import annotations

import time

import optuna
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.runs.calibrate import end_lost_trial_runs


def test_a_trial_whose_worker_died_ends_its_run_failed_and_nothing_else(sqlite_tracking,
                                                                        tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}",
                                         heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="lost", storage=storage, direction="maximize")
    client = MlflowClient(sqlite_tracking)
    exp = client.create_experiment("calibrate-lost")

    def trial_with_run(worker: str, *, reused: bool = False):
        trial = study.ask()
        run = client.create_run(exp, run_name=f"trial-{trial.number}")
        trial.set_user_attr("run_id", run.info.run_id)
        trial.set_user_attr("worker", worker)
        trial.set_user_attr("reused", reused)
        return trial, run.info.run_id

    killed, killed_run = trial_with_run("node1:4242")   # its worker got SIGKILL mid-training
    storage.record_heartbeat(killed._trial_id)
    done, done_run = trial_with_run("node1:4243")
    study.tell(done, 0.7)
    client.set_terminated(done_run, "FINISHED")
    reused, reused_run = trial_with_run("node2:7", reused=True)  # another trial's run
    study.tell(reused, state=optuna.trial.TrialState.FAIL)
    client.set_terminated(reused_run, "FINISHED")
    alive, alive_run = trial_with_run("node2:8")        # still training, heartbeat fresh

    time.sleep(3)                                       # past the grace period
    storage.record_heartbeat(alive._trial_id)
    assert client.get_run(killed_run).info.status == "RUNNING"

    assert end_lost_trial_runs(study) == [killed_run]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {killed.number: "FAIL", done.number: "COMPLETE",
                      reused.number: "FAIL", alive.number: "RUNNING"}
    run = client.get_run(killed_run)
    assert run.info.status == "FAILED"
    reason = run.data.tags[tracking.tags.TAG_FAILURE]
    assert f"trial {killed.number} of study lost" in reason and "node1:4242" in reason
    assert [client.get_run(r).info.status for r in (done_run, reused_run, alive_run)] == [
        "FINISHED", "FINISHED", "RUNNING"]
    assert end_lost_trial_runs(study) == []             # a second restart finds nothing
