"""The suite's own disk hygiene (tests/stores.py): a test store's artifacts go, its records
and everything outside the temporary folder stay."""

from __future__ import annotations

import sqlite3
from mlflow.tracking import MlflowClient

from stores import drop_artifacts, new_sqlite_store


def test_a_store_s_run_and_model_folders_go_and_its_records_stay(tmp_path):
    uri = new_sqlite_store(tmp_path / "s" / "mlflow.db")
    c = MlflowClient(uri)
    exp = c.create_experiment("e", artifact_location=str(tmp_path / "art"))
    kept = c.create_experiment("elsewhere", artifact_location=str(tmp_path / "kept"))
    runs = [c.create_run(exp).info.run_id for _ in range(2)]
    for rid in runs:
        (tmp_path / "f.txt").write_text(rid)
        c.log_artifact(rid, str(tmp_path / "f.txt"), "checkpoints")
    model = c.create_logged_model(exp)
    c.log_model_artifacts(model.model_id, str(tmp_path / "s"))   # any folder: a model's files
    # a run recorded in another store whose artifacts are outside the temporary folder
    (tmp_path / "kept" / "x").mkdir(parents=True)
    folders = {p.name for p in (tmp_path / "art").iterdir()}
    assert set(runs) <= folders and "models" in folders

    assert drop_artifacts(tmp_path / "s" / "mlflow.db", within=tmp_path) == 3
    assert not any((tmp_path / "art" / rid).exists() for rid in runs)
    assert not (tmp_path / "art" / "models" / model.model_id).exists()
    assert (tmp_path / "kept" / "x").is_dir()
    assert {r.info.run_id for r in c.search_runs([exp, kept])} == set(runs)


def test_a_file_that_is_no_store_and_a_folder_outside_the_session_s_stay(tmp_path):
    (tmp_path / "optuna.db").write_bytes(b"not a database")
    assert drop_artifacts(tmp_path / "optuna.db", within=tmp_path) == 0
    db = tmp_path / "fake.db"
    inside, outside = tmp_path / "session" / "run", tmp_path / "checkout" / "run"
    for folder in (inside, outside):
        (folder / "artifacts").mkdir(parents=True)
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE runs (artifact_uri TEXT)")
        con.executemany("INSERT INTO runs VALUES (?)",
                        [((outside / "artifacts").as_uri(),), (str(inside / "artifacts"),),
                         ("s3://bucket/run/artifacts",), (None,)])
    con.close()
    assert drop_artifacts(db, within=tmp_path / "session") == 1
    assert not inside.exists() and (outside / "artifacts").is_dir()
