"""`aggregate`: run selection, evidence, the video bootstrap, comparisons, tables, and the
entry point against a real `mlflow server` (generated predictions in the v1 format, plus a
slow integration test on real `train` runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import QUALITY, log_fake_run, make_frames, write_run

from pipi import analysis
from pipi.errors import DataError
from pipi.workflows import aggregate as workflow

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- generated data


@pytest.fixture(scope="module")
def server_runs(mlflow_server, tmp_path_factory):
    """An experiment with 2 arms x 3 seeds, a FAILED run, a run without predictions, a stage run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server.uri)
    tmp_path = tmp_path_factory.mktemp("server-runs")
    name = f"agg-{tmp_path.name}"
    exp_id = client.create_experiment(name)
    test, val = make_frames(5, 40, 0), make_frames(2, 30, 1, split="val")
    ids = {}
    for cell in ("a", "pi"):
        for s in (41, 42, 43):
            folder = write_run(tmp_path / f"{cell}{s}", test, val, QUALITY[cell], s)
            ids[(cell, s)] = log_fake_run(client, exp_id, folder, cell=cell, seed=s)
    ids["failed"] = log_fake_run(client, exp_id, write_run(tmp_path / "f", test, val, 1.0, 9),
                                 cell="pi", seed=44, status="FAILED")
    ids["nopred"] = log_fake_run(client, exp_id, None, cell="distill", seed=41)
    ids["stage"] = log_fake_run(client, exp_id, None, cell="", seed=0, entry_point="stage")
    return name, exp_id, ids


@pytest.mark.slow  # starts an mlflow server
def test_load_runs_reads_every_page(server_runs, tracking):
    from pipi import tracking

    name, _, ids = server_runs
    runs = tracking.load_runs(name, page_size=2)
    assert sorted(runs["run_id"]) == sorted(ids.values())
    assert list(runs.columns) == list(tracking.queries.RUN_COLUMNS)
    pi42 = runs.set_index("run_id").loc[ids[("pi", 42)]]
    assert (pi42["cell"], pi42["seed"], pi42["status"]) == ("pi", 42, "FINISHED")
    sub = tracking.load_runs(name, "tags.`pipi.cell` = 'a'", page_size=1)
    assert sorted(sub["run_id"]) == sorted(ids[("a", s)] for s in (41, 42, 43))
    with pytest.raises(Exception, match="not found"):
        tracking.load_runs("no-such-experiment")


@pytest.mark.slow  # starts an mlflow server
def test_predictions_are_downloaded_once_per_run(server_runs, tracking, tmp_path, monkeypatch):
    from pipi import tracking

    _, _, ids = server_runs
    calls = []
    real = tracking.download_artifact
    monkeypatch.setattr("pipi.tracking.queries.download_artifact",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    first = tracking.download_predictions(ids[("a", 41)], tmp_path / "cache")
    again = tracking.download_predictions(ids[("a", 41)], tmp_path / "cache")
    assert first == again == tmp_path / "cache" / ids[("a", 41)] / "predictions"
    assert len(calls) == 1 and (first / "test.parquet").is_file()


@pytest.mark.slow  # starts an mlflow server
def test_run_aggregate_logs_every_output_and_writes_the_same_locally(server_runs, tracking,
                                                                   tmp_path):
    from mlflow.tracking import MlflowClient

    from pipi import tracking

    name, exp_id, ids = server_runs
    out = tmp_path / "out"
    res = workflow.run_aggregate(experiment=name, out=out, cache_dir=tmp_path / "cache",
                            options=analysis.AggregateOptions(n_resamples=100))
    client = MlflowClient()
    run = client.get_run(res.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[tracking.tags.TAG_ENTRY_POINT] == "aggregate"
    # issue 38: the run says what it is; the experiment by name under both launchers
    n = int(run.data.params["aggregate.n_runs"])
    assert run.info.run_name == f"aggregate {name} ({n} runs)"
    assert run.data.params["aggregate.experiment"] == name

    def listing(path=None):
        files = []
        for f in client.list_artifacts(res.run_id, path):
            files += listing(f.path) if f.is_dir else [f.path]
        return files

    local = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(listing()) == [f for f in local if f != workflow.MARKER]
    assert json.loads((out / workflow.MARKER).read_text())["files"] == sorted(listing())
    assert {"dashboard.html", "aggregate.json", "report.md", "tables/per_frame.csv",
            "figures/roc.png"} <= set(local)
    doc = json.loads((out / "aggregate.json").read_text())
    assert doc["aggregate_run_id"] == res.run_id
    assert doc["arms"]["efficientnet_b0/pi"]["seeds"] == {str(s): ids[("pi", s)]
                                                         for s in (41, 42, 43)}
    why = {e["run_id"]: e["reason"] for e in doc["excluded"]}
    assert why[ids["failed"]] == "status FAILED"
    assert why[ids["nopred"]] == "no predictions artifact"
    assert why[ids["stage"]].startswith("not a model run")
    pf = doc["tables"]["per_frame"]["rows"]
    assert [r["cell"] for r in pf] == ["a", "pi", "distill"] and pf[2]["n_seeds"] == 0
    logged = {r: client.get_run(r).data.metrics["test/macro_auc"] for r in
              (ids[("a", s)] for s in (41, 42, 43))}
    runs_rows = {r["run_id"]: r for r in doc["tables"]["runs"]["rows"]}
    for rid, val in logged.items():
        assert runs_rows[rid]["macro_auc"] == pytest.approx(val, abs=1e-9)
    html = (out / "dashboard.html").read_text()
    assert f"{tracking.current_tracking_uri()}/#/experiments/{exp_id}/runs/{ids[('pi', 41)]}" in html
    assert "arms with no runs" in res.summary and "distill (efficientnet_b0) (" in res.summary


@pytest.mark.slow  # starts an mlflow server
def test_cli_refuses_mixed_digests_with_one_line(tracking, tmp_path):
    from click.testing import CliRunner
    from mlflow.tracking import MlflowClient

    from pipi.cli import ENTRY_POINTS

    client = MlflowClient(tracking)
    name = f"mixed-{tmp_path.name}"
    exp_id = client.create_experiment(name)
    test, val = make_frames(3, 30, 0), make_frames(2, 30, 1, split="val")
    log_fake_run(client, exp_id, write_run(tmp_path / "x", test, val, 1, 1), cell="a", seed=41,
                 digest="1" * 64)
    log_fake_run(client, exp_id, write_run(tmp_path / "y", test, val, 1, 2), cell="pi", seed=41,
                 digest="2" * 64)
    r = CliRunner().invoke(ENTRY_POINTS["aggregate"], ["--experiment", name])
    assert r.exit_code == 2
    err = r.output.strip()
    assert err.count("\n") == 0 and "refusing to pair runs trained on different data" in err


@pytest.mark.slow
def test_aggregate_real_train_runs_through_mlflow_run(tracking, smoke_study, tiny_staged, tmp_path):
    """The shared smoke study (a, pi, distill, b_plus x 2 seeds, real `train` runs) through
    `mlflow run . -e aggregate`; then a second recipe joining arm a is refused."""
    from pipi.config import make_config
    from pipi.runs import training as train_workflow

    exp, b = smoke_study.experiment, smoke_study.backbone
    out = tmp_path / "out"
    # mlflow.set_experiment exports MLFLOW_EXPERIMENT_ID, which `mlflow run` would read
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID")}
    env |= {"MLFLOW_TRACKING_URI": tracking,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PIPI_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-e", "aggregate",
         "--env-manager", "local", "--experiment-name", exp, "-P", f"experiment={exp}",
         "-P", f"out={out}"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
        check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "aggregate.json").read_text())
    from mlflow.tracking import MlflowClient
    c = MlflowClient(tracking)
    eid = c.get_experiment_by_name(exp).experiment_id
    (agg,) = [x for x in c.search_runs([eid], "tags.`pipi.entry_point` = 'aggregate'",
                                       order_by=["attributes.start_time DESC"], max_results=1)]
    assert agg.data.params["aggregate.experiment"] == exp   # a name, not `mlflow run`'s id
    assert agg.info.run_name.startswith(f"aggregate {exp} (")
    pf = {row["cell"]: row for row in doc["tables"]["per_frame"]["rows"]}
    assert pf["a"]["n_seeds"] == pf["pi"]["n_seeds"] == pf["distill"]["n_seeds"] == 2
    for (cell, seed), s in smoke_study.summaries.items():
        assert doc["arms"][f"{b}/{cell}"]["seeds"][str(seed)] == s.run_id
        row = next(x for x in doc["tables"]["runs"]["rows"] if x["run_id"] == s.run_id)
        assert row["macro_auc"] == pytest.approx(s.test_macro_auc, abs=1e-6)
    pair = next(p for p in doc["tables"]["paired_tests"]["rows"]
                if (p["reference"], p["new"]) == ("a", "pi"))
    assert pair["n_seeds"] == 2
    assert (out / "dashboard.html").is_file() and (out / "figures" / "eight_cell.png").is_file()
    # a run of another recipe (the published code's checkpoint selection) joining arm a is
    # refused, and the filter the message suggests is valid MLflow search syntax that selects
    # one recipe (in an experiment of its own: the smoke study stays as trained)
    own = f"recipes-{tmp_path.name}"
    ids = {m: train_workflow.train(
        make_config(cell="a", backbone=b, profile="smoke", weights="none", seed=41,
                    select_metric=m), data=str(tiny_staged), experiment=own, register=False,
        progress=False).run_id for m in ("macro_auc", "macro_f1")}
    with pytest.raises(DataError, match=f"{b}/a has runs of 2 recipes") as err:
        workflow.run_aggregate(experiment=own, cache_dir=tmp_path / "cache", log_run=False,
                               options=analysis.AggregateOptions(n_resamples=20, figures=False))
    flt = str(err.value).split('--filter "')[1].rstrip('"')
    res = workflow.run_aggregate(experiment=own, filter_string=flt, cache_dir=tmp_path / "cache",
                                 log_run=False,
                                 options=analysis.AggregateOptions(n_resamples=20, figures=False))
    assert list(res.report.meta["arms"][f"{b}/a"]["seeds"].values())[0] in ids.values()