"""Small messages that left users stuck (issue 24, "Messages")."""

from __future__ import annotations


def test_aggregate_does_not_list_its_own_run_as_excluded(sqlite_tracking, tmp_path,
                                                         monkeypatch):
    """Under `mlflow run -e aggregate`, MLflow's run for it (MLFLOW_RUN_ID, RUNNING) is in
    the experiment being aggregated; it is not one of the study's excluded runs."""
    import mlflow
    from fakes import log_fake_run, make_frames, write_run

    from pipi.runs.evidence import load_evidence

    client = mlflow.tracking.MlflowClient()
    exp_id = client.create_experiment(f"own-{tmp_path.name}")
    test, val = make_frames(2, 20, 0), make_frames(1, 20, 1, split="val")
    for cell in ("a", "pi"):
        log_fake_run(client, exp_id, write_run(tmp_path / cell, test, val, 1.5, 41),
                     cell=cell, seed=41)
    failed = log_fake_run(client, exp_id, None, cell="pi", seed=42, status="FAILED")
    own = client.create_run(exp_id, tags={"mlflow.project.entryPoint": "aggregate"})
    monkeypatch.setenv("MLFLOW_RUN_ID", own.info.run_id)
    ev, kept = load_evidence(f"own-{tmp_path.name}", cache_dir=tmp_path / "cache")
    excluded = set(ev.excluded["run_id"])
    assert failed in excluded  # the other exclusions are still listed
    assert own.info.run_id not in excluded
    assert len(kept) == 2
