"""The README's tour as a researcher runs it, mixing the two documented launchers (issue 38).

The lines are read out of the README and run as written, with what a test machine needs
appended (``profile=smoke``, ``weights=none``: no download; the tiny staged release instead of
the tour's ``stage`` line, which test_first_run runs). The seeds loop trains ``a`` and ``pi`` over
the four seeds ``promote`` needs; one of its lines (``pi`` seed 1) and the ``b_plus`` line go
through ``mlflow run`` itself (its params in MLflow's quoted form, its own process), the rest
through the commands both launchers run, in this process. ``b_plus`` trains its ``pi`` base
(seed 42) as a dependency; a prediction file comes in through the ``import`` line. Then
``aggregate`` under both launchers, ``promote`` and the served alias.

What it shows (the issue's "done when"): both aggregates count every FINISHED train and import
run, with the same ``aggregate.*`` params; ``promote`` pairs exactly runs aggregate used;
``@candidate`` of the ``pi`` model stayed where the loop put it; every version is linked to its
logged model as ``mlflow.register_model`` links it; each logged model's ``val/macro_auc`` is
its run's best epoch and no metric holds two values at one step; no run has one of MLflow's
random names; the sequence model declares inputs; the non-TTY output of the trainings holds no
carriage return and no MLflow schema warning.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from readme_text import commands

from pipi import tracking

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500),
              pytest.mark.xdist_group("test_tour")]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
EXPERIMENT = "tour"
#: what a test machine needs beyond the README's lines: the smoke recipe, no weight download
SMOKE = {"profile": "smoke", "weights": "none"}
MODEL = "pipi-efficientnet_b0-pi"


def _tour_blocks() -> list[str]:
    """The commands of every bash block of the README's tour section."""
    section = README[README.index("## A tour"):README.index("## The user guide")]
    return [c for block in re.findall(r"```bash\n(.*?)```", section, re.S)
            for c in commands(block)]


def _line(entry: str, must: str = "") -> list[str]:
    """The tour's ``mlflow run . -e <entry>`` line (containing ``must``), split as a shell does."""
    found = [c for c in _tour_blocks() if c.startswith(f"mlflow run . -e {entry} ") and must in c]
    assert found, f"the README's tour has no `mlflow run . -e {entry}` line with {must!r}"
    return shlex.split(found[0])


def _params(argv: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in argv[argv.index("-P") + 1::2]) if "-P" in argv else {}


def _loop() -> tuple[list[str], list[str], list[str]]:
    """(seeds, cells, the train line) of the README's loop over the seeds promote needs."""
    loop = next(c for c in _tour_blocks() if c.startswith("for s in"))
    m = re.match(r"for s in ([\d ]+); do for c in ([\w ]+); do (.*?); done; done", loop)
    assert m, loop
    return m.group(1).split(), m.group(2).split(), shlex.split(m.group(3))


def _with(argv: list[str], **params: str) -> list[str]:
    """``argv`` with these ``-P k=v`` values in place of the line's own (``mlflow run``
    refuses a repeated parameter)."""
    out = list(argv)
    for i, a in enumerate(out):
        key = a.split("=", 1)[0]
        if i and out[i - 1] == "-P" and key in params:
            out[i] = f"{key}={params[key]}"
    return out


def _as_options(params: dict[str, str]) -> list[str]:
    return [x for k, v in params.items() for x in (f"--{k.replace('_', '-')}", v)]


@dataclass
class Tour:
    store: str
    staged: Path
    outputs: list[str] = field(default_factory=list)       # non-TTY output of trainings
    train_ids: list[str] = field(default_factory=list)
    aggregates: dict[str, str] = field(default_factory=dict)   # launcher -> run id
    promote_exit: int | None = None
    exam: Path | None = None
    candidate_after_loop: str = ""


def _env(store: str, home: Path) -> dict:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith("MLFLOW_") and k not in ("PIPI_MODEL_PREFIX",)}
    return {**keep, "MLFLOW_TRACKING_URI": store, "MLFLOW_EXPERIMENT_NAME": EXPERIMENT,
            "MLFLOW_DISABLE_TELEMETRY": "true", "PIPI_HOME": str(home),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _mlflow_run(argv: list[str], extra: dict[str, str], env: dict) -> str:
    """The README line through `mlflow run` itself (the project's .venv: --env-manager local)."""
    assert argv[:2] == ["mlflow", "run"] and "--env-manager" in argv
    args = [str(Path(sys.executable).parent / "mlflow"), *argv[1:],
            *[x for k, v in extra.items() for x in ("-P", f"{k}={v}")]]
    r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    return out


def _in_process(entry: str, params: dict[str, str]) -> tuple[int, str]:
    """The command both launchers run (`pipi <entry>`, what `mlflow run -e <entry>` calls),
    in this process; (exit code, its output)."""
    from pipi.cli import ENTRY_POINTS

    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            ENTRY_POINTS[entry].main(args=_as_options(params), prog_name=entry,
                                     standalone_mode=False)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, buf.getvalue()


@pytest.fixture(scope="module")
def tour(sqlite_store, tiny_staged, tmp_path_factory) -> Tour:
    home = tmp_path_factory.mktemp("tour-home")
    env = _env(sqlite_store, home)
    t = Tour(sqlite_store, tiny_staged)
    data = {"data": str(tiny_staged)}
    with pytest.MonkeyPatch.context() as mp:
        for k in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID"):   # what a shell would not have
            mp.delenv(k, raising=False)
        for k in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "PIPI_HOME", "PATH"):
            mp.setenv(k, env[k])
        mp.delenv("PIPI_PROGRESS", raising=False)
        mlflow.set_tracking_uri(sqlite_store)
        seeds, cells, train = _loop()
        assert "--env-manager" in train and train[-1] == "seed=$s"
        for s in seeds:
            for c in cells:
                params = {k: v.replace("$c", c).replace("$s", s)
                          for k, v in _params(train).items()}
                if (c, s) == ("pi", seeds[0]):   # one line of the loop as `mlflow run` runs it
                    argv = [x.replace("$c", c).replace("$s", s) for x in train]
                    t.outputs.append(_mlflow_run(argv, {**SMOKE, **data}, env))
                else:
                    code, out = _in_process("train", {**params, **SMOKE, **data})
                    assert code == 0, out[-3000:]
                    t.outputs.append(out)
        t.candidate_after_loop = MlflowClient().get_model_version_by_alias(MODEL,
        "candidate").run_id
        # the sequence cell (its pi base, seed 42, is trained as a dependency), as `mlflow run`
        t.outputs.append(_mlflow_run(_line("train", "cell=b_plus"), {**SMOKE, **data}, env))
        # an outside prediction file, through the tour's import line (kind=predictions)
        frames = pd.read_parquet(tiny_staged / "frames.parquet")
        test = frames[frames["split"] == "test"]
        probs = np.random.default_rng(5).dirichlet(np.ones(14), size=len(test))
        npz = home / "released_pi.npz"
        np.savez(npz, filenames=test["filename"].to_numpy().astype(str),
                 probs=probs.astype(np.float32))
        imp = _params(_line("import"))
        code, out = _in_process("import", {**imp, "kind": "predictions", "file": str(npz),
                                           "seed": "7", **data})
        assert code == 0, out[-3000:]
        # aggregate under both launchers
        _mlflow_run(_line("aggregate"), {}, env)
        code, out = _in_process("aggregate", {})
        assert code == 0, out[-3000:]
        runs = mlflow.search_runs(experiment_names=[EXPERIMENT], output_format="list",
                                  order_by=["attributes.start_time ASC"])
        aggs = [r for r in runs if r.data.tags.get(tracking.tags.TAG_ENTRY_POINT) == "aggregate"]
        assert len(aggs) == 2
        t.aggregates = {"mlflow run": aggs[0].info.run_id, "pipi": aggs[1].info.run_id}
        # promote, as the tour writes it
        code, out = _in_process("promote", _params(_line("promote")))
        t.promote_exit = code
        # a whole exam through the tour's predict line (the alias the README says to serve)
        frames = frames.iloc[:5]
        for i, p in enumerate(frames["path"]):
            dst = home / "exam" / f"frame{i}.jpg"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes((tiny_staged / p).read_bytes())
        # ... through `mlflow run` itself (MLflow's quoted params beside pipi's own)
        pred = _line("predict")
        alias = "champion" if t.promote_exit == 0 else "candidate"
        _mlflow_run(_with(pred, model=_params(pred)["model"].replace("@champion", f"@{alias}"),
                          images=str(home / "exam"), out=str(home / "exam.parquet")),
                    {"workers": "0"}, env)
        t.exam = home / "exam.parquet"
        mlflow.set_tracking_uri(None)
    return t


def _runs(t: Tour):
    c = MlflowClient(t.store)
    exp = c.get_experiment_by_name(EXPERIMENT)
    return c, c.search_runs([exp.experiment_id], max_results=1000)


def test_both_aggregates_count_every_finished_train_and_import_run(tour):
    c, runs = _runs(tour)
    model_runs = {r.info.run_id for r in runs if r.info.status == "FINISHED"
                  and r.data.tags.get(tracking.tags.TAG_ENTRY_POINT) in ("train", "import")}
    # 8 of the loop, b_plus and its pi base, the import
    assert len(model_runs) == 11, len(model_runs)
    params = {}
    for launcher, rid in tour.aggregates.items():
        report = json.loads(Path(mlflow.artifacts.download_artifacts(
            run_id=rid, artifact_path="aggregate.json", tracking_uri=tour.store)).read_text())
        used = {r["run_id"] for r in report["runs"]}
        assert used == model_runs, (launcher, model_runs - used, report.get("excluded"))
        p = c.get_run(rid).data.params
        params[launcher] = {k: v for k, v in p.items() if k.startswith("aggregate.")}
        assert c.get_run(rid).info.run_name == f"aggregate {EXPERIMENT} (11 runs)"
    assert params["mlflow run"] == params["pipi"]
    assert params["pipi"]["aggregate.experiment"] == EXPERIMENT


def test_promote_pairs_the_runs_aggregate_used_and_the_alias_served_exists(tour):
    c, runs = _runs(tour)
    agg = json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=tour.aggregates["pipi"], artifact_path="aggregate.json",
        tracking_uri=tour.store)).read_text())
    arms = agg["arms"]
    # promote judged @candidate (the loop's last pi run) and recorded its pairs on the version
    mv = c.get_model_version_by_alias(MODEL, "candidate")
    assert mv.tags[tracking.tags.TAG_PROMOTE_DECISION] in ("promoted", "refused")
    paired = json.loads(mv.tags[tracking.tags.TAG_PROMOTE_RUNS])
    seeds = [int(s) for s in mv.tags[tracking.tags.TAG_PROMOTE_SEEDS].split(",")]
    assert sorted(seeds) == [1, 2, 3, 4]
    # exactly the runs aggregate used for those seeds in the pi and a arms
    assert paired["new"] == {str(s): arms["efficientnet_b0/pi"]["seeds"][str(s)] for s in seeds}
    assert paired["baseline"] == {str(s): arms["efficientnet_b0/a"]["seeds"][str(s)]
                                  for s in seeds}
    # the README: promote moves @champion on evidence, else refuses (exit 1) and @candidate
    # is what to serve
    assert tour.promote_exit == (0 if mv.tags[tracking.tags.TAG_PROMOTE_DECISION] == "promoted"
                                 else 1)
    alias = "champion" if tour.promote_exit == 0 else "candidate"
    serve = next(x for x in _tour_blocks() if x.startswith("pipi serve"))
    uri = re.search(r'"(models:/[^"]+)"', serve).group(1).replace("@champion", f"@{alias}")
    mlflow.set_tracking_uri(tour.store)
    try:
        m = mlflow.pyfunc.load_model(uri)
        frame = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
        out = m.predict({"pixels": [frame]})
        assert out.shape[0] == 1 and out["predicted_class"].iloc[0]
    finally:
        mlflow.set_tracking_uri(None)


def test_a_dependency_moves_no_alias_and_every_version_is_linked(tour):
    c, runs = _runs(tour)
    assert c.get_model_version_by_alias(MODEL, "candidate").run_id == tour.candidate_after_loop
    for found in c.search_model_versions(max_results=1000):
        mv = c.get_model_version(found.name, found.version)
        lm = c.get_logged_model(tracking.registry.version_model_id(mv))   # SQL stores keep the source
        linked = json.loads(lm.tags["mlflow.modelVersions"])
        assert {"name": mv.name, "version": int(mv.version)} in linked, (mv.name, linked)
    mlflow.set_tracking_uri(tour.store)
    try:
        inputs = mlflow.models.get_model_info(
            "models:/pipi-efficientnet_b0-b_plus@candidate").signature.inputs
    finally:
        mlflow.set_tracking_uri(None)
    assert [col.name for col in inputs.inputs] == ["image", "pixels"]


def test_model_metrics_are_the_best_epoch_and_no_metric_has_two_values(tour):
    c, runs = _runs(tour)
    for r in runs:
        if r.data.tags.get(tracking.tags.TAG_ENTRY_POINT) != "train":
            continue
        for key in r.data.metrics:
            hist = c.get_metric_history(r.info.run_id, key)
            steps = {}
            for m in hist:
                steps.setdefault(m.step, set()).add(m.value)
            assert all(len(v) == 1 for v in steps.values()), (r.info.run_name, key, steps)
        best = int(r.data.tags[tracking.tags.TAG_BEST_EPOCH])
        val = {m.step: m.value for m in c.get_metric_history(r.info.run_id, "val/macro_auc")}
        for found in c.search_model_versions(f"run_id='{r.info.run_id}'"):
            lm = c.get_logged_model(tracking.registry.version_model_id(found))
            got = {m.key: m.value for m in lm.metrics if m.step == best}
            assert got["val/macro_auc"] == pytest.approx(val[best]), r.info.run_name


def test_the_tour_s_predict_line_scores_the_exam(tour):
    got = pd.read_parquet(tour.exam)
    assert len(got) == 5 and got["video_id"].nunique() == 1
    _, runs = _runs(tour)
    (pred,) = [r for r in runs if r.data.tags.get(tracking.tags.TAG_ENTRY_POINT) == "predict"]
    assert pred.data.params["model_name"] == MODEL and pred.data.metrics["predict/frames"] == 5
    # launched by `mlflow run`: MLflow's params as given, pipi's resolved ones beside them
    assert pred.data.tags["mlflow.project.entryPoint"] == "predict"
    assert pred.data.params["data"] == "''" and pred.data.params["split"] in ("''", "test")
    assert tracking.resolved_param(pred.data.params, "out") == str(tour.exam)
    assert pred.data.params["model"] == pred.data.params["model_uri"]


def test_every_run_says_what_it_is_and_the_output_is_quiet(tour):
    _, runs = _runs(tour)
    known = re.compile(r"^(a|pi|b_plus)-(s\d+-smoke-|efficientnet_b0-s\d+-released$)"
                       r"|^aggregate |^predict ")
    odd = [r.info.run_name for r in runs if not known.match(r.info.run_name)]
    assert not odd, odd
    for out in tour.outputs:
        assert "\r" not in out
        assert "Inferred schema contains integer" not in out
