"""`pipi predict` (issue 40 item 1): a registered model scores a staged split and a folder of
frames into one parquet file, equal to the registered pyfunc's answers, inside a `predict` run
that names the version and logs the metrics a training run's test split gets."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient
from sklearn.metrics import roc_auc_score

from pipi import tracking
from pipi.config import make_config
from pipi.runs import training as workflow
from pipi.serving.replicas import auto_replicas
from pipi.workflows.predict import run_predict

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("test_predict")]


@dataclass(frozen=True)
class Trained:
    """The module's one training (``onnx=True``), and what it left on its version then."""

    summary: object   # pipi.runs.training.TrainSummary
    version_tags: dict

    def __getattr__(self, name):
        return getattr(self.summary, name)


@pytest.fixture(scope="module")
def trained(sqlite_store, tiny_staged):
    """A registered `pi` model, trained once for the module with ``onnx=True`` (the graph kept
    beside it: issue 40 item 4, ``-P onnx=true``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", sqlite_store)
        mp.delenv("MLFLOW_RUN_ID", raising=False)
        mp.setenv("PIPI_MODEL_PREFIX", "pipi")
        mlflow.set_tracking_uri(sqlite_store)
        cfg = make_config(cell="pi", seed=3, backbone="resnet18", profile="smoke",
                          weights="none")
        s = workflow.run(workflow.request(cfg, data=str(tiny_staged)), experiment="predict",
                         progress=False, onnx=True)
        mv = MlflowClient().get_model_version(s.registered_name, str(s.registered_version))
        return Trained(s, dict(mv.tags))


@pytest.fixture(autouse=True)
def _store(training_store):
    """Every test reads the module's store (the URI set for the test, as the fixture had it)."""


def test_predict_scores_a_staged_split_as_the_registered_model_does(trained, tiny_staged,
                                                                     tmp_path):
    uri = f"models:/{trained.registered_name}@candidate"
    res = run_predict(model=uri, data=str(tiny_staged), split="test",
                      out=str(tmp_path / "exam.parquet"), workers=1, batch_size=8,
                      experiment="predict", progress=False)
    got = pd.read_parquet(res.out)
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    test = frames[frames["split"] == "test"]
    assert got["path"].tolist() == test["path"].tolist()
    probs = got[[f"prob_{k:02d}" for k in range(14)]].to_numpy()
    assert probs.std(0).max() > 1e-3                      # the model tells the frames apart
    # the registered pyfunc, given the same files as base64, answers the same
    py = mlflow.pyfunc.load_model(uri)
    b64 = [base64.b64encode((tiny_staged / p).read_bytes()).decode() for p in got["path"]]
    want = py.predict(pd.DataFrame({"image": b64}))
    np.testing.assert_allclose(probs, want.iloc[:, :14].to_numpy(), atol=1e-5)
    assert got["predicted_class"].tolist() == want["predicted_class"].tolist()
    # the run names the version and logs what a training run's test split gets
    run = MlflowClient().get_run(res.run_id)
    assert run.data.tags[tracking.tags.TAG_ENTRY_POINT] == "predict"
    assert run.data.tags[tracking.tags.TAG_SOURCE_RUN] == trained.run_id
    assert run.data.params["model_name"] == trained.registered_name
    assert run.data.params["model_version"] == str(trained.registered_version)
    assert run.data.params["resolved_precision"] == "fp32"    # auto on a CPU
    assert run.data.params["resolved_device"] == "cpu"
    assert (run.data.params["compile"], run.data.params["resolved_compile"]) == ("auto", "false")
    # replicas=auto: one per core on a CPU of 2-4 cores (this machine and CI: 2), else 1
    assert run.data.params["replicas"] == "auto"
    assert run.data.params["resolved_replicas"] == str(auto_replicas(torch.device("cpu")))
    assert run.info.run_name.startswith("predict tiny test")
    classes = sorted(set(got["label"]))
    sk = np.mean([roc_auc_score(got["label"] == c, probs[:, c]) for c in classes])
    assert run.data.metrics["test/macro_auc"] == pytest.approx(sk, abs=1e-6)
    assert run.data.metrics["predict/frames"] == len(test)
    arts = {a.path for a in MlflowClient().list_artifacts(res.run_id, "predictions")}
    assert arts == {"predictions/predict.parquet", "predictions/schema.json"}
    tables = {a.path for a in MlflowClient().list_artifacts(res.run_id, "tables")}
    assert {"tables/top_frames.csv", "tables/timelines.csv"} <= tables
    schema = json.loads((tmp_path / "exam.schema.json").read_text())
    assert schema["classes"][0] == "Ampulla of Vater" and "predicted_class" in schema["columns"]


def test_predict_scores_a_folder_of_frames_and_the_images_of_a_label_table(trained, tiny_staged,
                                                                    tmp_path):
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    for i, p in enumerate(frames["path"].iloc[:6]):
        dst = tmp_path / "exam" / f"video {i % 2}" / f"frame{i}{Path(p).suffix}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_staged / p, dst)
    res = run_predict(model=f"models:/{trained.registered_name}/{trained.registered_version}",
                      images=str(tmp_path / "exam"), out=str(tmp_path / "out.parquet"),
                      workers=0, experiment="predict", progress=False)
    got = pd.read_parquet(res.out)
    assert got["video_id"].tolist() == ["video 0"] * 3 + ["video 1"] * 3
    assert got["label"].tolist() == [-1] * 6
    run = MlflowClient().get_run(res.run_id)
    assert "test/macro_auc" not in run.data.metrics
    figs = {a.path for a in MlflowClient().list_artifacts(res.run_id, "figures")}
    assert figs == {"figures/timeline_000.png", "figures/timeline_001.png"}

    # a label table as people write them (pipi stage images --labels reads the same form):
    # Windows paths, a label column in the release's spelling, a video column, and a frame
    # whose class the model does not have (scored, left out of the metrics)
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    (tmp_path / "table" / "imgs").mkdir(parents=True)
    lines = ["image_path,label,video_id"]
    for i, row in test.iterrows():
        shutil.copy(tiny_staged / row["path"], tmp_path / "table" / "imgs" / f"f{i}.jpg")
        lines.append(f"imgs\\f{i}.jpg,{row['class'].upper()},v{i % 2}")
    shutil.copy(tiny_staged / test["path"][0], tmp_path / "table" / "imgs" / "other.jpg")
    lines.append("imgs\\other.jpg,Cat,v0")
    (tmp_path / "table" / "labels.csv").write_text("\n".join(lines) + "\n")
    res = run_predict(model=f"models:/{trained.registered_name}/{trained.registered_version}",
                      labels=str(tmp_path / "table" / "labels.csv"),
                      out=str(tmp_path / "table.parquet"), workers=0, experiment="predict",
                      progress=False)
    got = pd.read_parquet(res.out)
    assert got["path"].tolist() == [f"f{i}.jpg" for i in range(len(test))] + ["other.jpg"]
    assert got["label"].tolist() == test["class_index"].tolist() + [-1]
    assert got["video_id"].tolist() == [f"v{i % 2}" for i in range(len(test))] + ["v0"]
    run = MlflowClient().get_run(res.run_id)
    probs = got[[f"prob_{k:02d}" for k in range(14)]].to_numpy()[:len(test)]
    y = got["label"].to_numpy()[:len(test)]
    sk = np.mean([roc_auc_score(y == c, probs[:, c]) for c in sorted(set(y))])
    assert run.data.metrics["test/macro_auc"] == pytest.approx(sk, abs=1e-6)
    assert run.data.metrics["predict/frames_unknown_class"] == 1
    assert run.data.metrics["predict/frames_several_classes"] == 0
    assert run.data.params["labels"] == str(tmp_path / "table" / "labels.csv")


def test_pipi_onnx_writes_the_registered_model_as_a_checked_graph(trained, tiny_staged,
                                                                   tmp_path):
    """Issue 40 item 4, through the command: the registered version's graph, ONNX Runtime's
    answers on the staged frames equal the pyfunc's."""
    import onnxruntime as ort
    from click.testing import CliRunner

    from pipi.cli import command
    from pipi.serving.model_input import Limits, decode_file
    from pipi.serving.sequence_clip import resize_batch

    uri = f"models:/{trained.registered_name}/{trained.registered_version}"
    r = CliRunner().invoke(command("onnx"), ["-m", uri, "--out", str(tmp_path / "m.onnx")])
    assert r.exit_code == 0, r.output
    assert f"{trained.registered_name} v{trained.registered_version}" in r.output
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    paths = frames.loc[frames["split"] == "test", "path"].iloc[:10].tolist()
    size = 32
    x = resize_batch([decode_file((tiny_staged / p).read_bytes(), where=p,
                                  limits=Limits(decode_size=size)) for p in paths], size)
    got = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x01": x.numpy()})[0]
    b64 = [base64.b64encode((tiny_staged / p).read_bytes()).decode() for p in paths]
    want = mlflow.pyfunc.load_model(uri).predict(pd.DataFrame({"image": b64}))
    np.testing.assert_allclose(got, want.iloc[:, :14].to_numpy(), atol=1e-5)
    # --register: the graph kept beside the version, in the run that logged it, named by a tag
    r = CliRunner().invoke(command("onnx"), ["-m", uri, "--out", str(tmp_path / "k.onnx"),
                                             "--register"])
    assert r.exit_code == 0, r.output
    kept = f"runs:/{trained.run_id}/onnx/k.onnx"
    assert f"kept beside {trained.registered_name} v{trained.registered_version}: {kept}" \
        in r.output
    mv = MlflowClient().get_model_version(trained.registered_name,
                                          str(trained.registered_version))
    assert mv.tags[tracking.tags.TAG_ONNX] == kept
    back = mlflow.artifacts.download_artifacts(kept, dst_path=str(tmp_path / "back"))
    assert Path(back).read_bytes() == (tmp_path / "k.onnx").read_bytes()
    r = CliRunner().invoke(command("onnx"), ["-m", f"runs:/{trained.run_id}/model", "--out",
                                             str(tmp_path / "no.onnx"), "--register"])
    assert r.exit_code != 0 and "--register" in r.output and "not a registered version" \
        in r.output
    assert not (tmp_path / "no.onnx").exists()


def test_train_with_onnx_keeps_the_checked_graph_beside_the_version(trained, tiny_staged,
                                                                     tmp_path):
    """``train -P onnx=true``: the run logs onnx/model.onnx, names it on the run and (at the
    training) on the registered version, with ONNX Runtime's distance to the model; the kept
    graph answers as the registered pyfunc on staged frames."""
    import onnxruntime as ort

    from pipi.serving.model_input import Limits, decode_file
    from pipi.serving.sequence_clip import resize_batch

    kept = f"runs:/{trained.run_id}/onnx/model.onnx"
    assert trained.version_tags[tracking.tags.TAG_ONNX] == kept
    run = tracking.get_run(trained.run_id)
    assert run.tags[tracking.tags.TAG_ONNX] == kept and run.params["onnx"] == "true"
    assert 0 <= run.metrics["onnx/max_abs_diff"] <= 1e-4
    graph = mlflow.artifacts.download_artifacts(kept, dst_path=str(tmp_path))
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    paths = frames.loc[frames["split"] == "test", "path"].iloc[:10].tolist()
    x = resize_batch([decode_file((tiny_staged / p).read_bytes(), where=p,
                                  limits=Limits(decode_size=32)) for p in paths], 32)
    got = ort.InferenceSession(graph).run(None, {"x01": x.numpy()})[0]
    b64 = [base64.b64encode((tiny_staged / p).read_bytes()).decode() for p in paths]
    uri = f"models:/{trained.registered_name}/{trained.registered_version}"
    want = mlflow.pyfunc.load_model(uri).predict(pd.DataFrame({"image": b64}))
    np.testing.assert_allclose(got, want.iloc[:, :14].to_numpy(), atol=1e-5)
    assert np.ptp(got, axis=0).max() > 1e-3   # frames it tells apart


def _doc_commands(section: str, starts: tuple[str, ...]) -> list[list[str]]:
    """The commands of a docs/serving.md section's bash blocks that start with ``starts``,
    continuation lines joined and trailing comments dropped, as argv lists."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    body = doc.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", body, flags=re.S):
        text = re.sub(r"\\\n\s*", " ", block)
        for line in text.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(starts):
                out.append(shlex.split(line))
    return out


def test_the_exam_and_onnx_recipes_of_docs_serving_run_as_written(trained, tiny_staged,
                                                                  tmp_path):
    """docs/serving.md's `pipi predict` lines (a staged split, a label table) and its
    `pipi onnx` line, as written there; only the model, the data and the files are this
    test's. (Its `mlflow run . -e predict` line runs in tests/integration/test_tour.py's
    predict step, the README's.)"""
    from click.testing import CliRunner

    from pipi.cli import main

    uri = f"models:/{trained.registered_name}/{trained.registered_version}"
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    test = frames[frames["split"] == "test"].reset_index(drop=True)
    table = tmp_path / "reader" / "labels.csv"
    table.parent.mkdir()
    table.write_text("image_path,label\n" + "".join(
        f"{tiny_staged / p},{c}\n" for p, c in zip(test["path"], test["class"])))
    given = {"-m": uri, "--data": str(tiny_staged), "--labels": str(table)}
    commands = (_doc_commands("A whole exam", ("pipi predict",))
                + _doc_commands("ONNX", ("pipi onnx",)))
    assert [c[:2] for c in commands] == [["pipi", "predict"]] * 2 + [["pipi", "onnx"]]
    for i, argv in enumerate(commands):
        args = argv[1:]
        for opt in ("-m", "--data", "--labels", "--out"):
            if opt in args:
                k = args.index(opt) + 1
                args[k] = str(tmp_path / f"{i}-{Path(args[k]).name}") if opt == "--out" \
                    else given[opt]
        r = CliRunner().invoke(main, [*args, "--experiment", "predict"] if argv[1] == "predict"
                               else args)
        assert r.exit_code == 0, (argv, r.output)
    staged, labelled = (pd.read_parquet(tmp_path / "0-test.parquet"),
                        pd.read_parquet(tmp_path / "1-reader.parquet"))
    assert len(staged) == len(labelled) == len(test)
    cols = [f"prob_{k:02d}" for k in range(14)]
    np.testing.assert_allclose(labelled[cols].to_numpy(), staged[cols].to_numpy(), atol=1e-6)
    assert labelled["label"].tolist() == staged["label"].tolist()
    assert (tmp_path / "2-pi.onnx").stat().st_size > 0


def test_ctrl_c_stops_the_replicas_and_ends_the_run_killed(trained, tiny_staged, tmp_path):
    """`pipi predict` in a process of its own, scoring with replicas (auto on this machine's
    2 cores; asked for here so that any machine runs them), interrupted once they run: the
    shell's 130, one line, the run KILLED, no replica left behind, and the parts kept."""
    import os
    import signal
    import subprocess
    import sys
    import time

    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    exam = tmp_path / "exam" / "video"
    exam.mkdir(parents=True)
    srcs = [tiny_staged / p for p in frames["path"]]
    for i in range(3000):                    # frames enough to be interrupted mid-way
        (exam / f"frame{i:05d}.jpg").symlink_to(srcs[i % len(srcs)])
    out = tmp_path / "exam.parquet"
    cmd = [str(Path(sys.executable).parent / "pipi"), "predict", "-m",
           f"models:/{trained.registered_name}/{trained.registered_version}", "--images",
           str(exam.parent), "--out", str(out), "--batch-size", "1", "--replicas", "2",
           "--device", "cpu", "--experiment", "predict-interrupted"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                 + os.environ["PATH"]})
    deadline, replicas = time.monotonic() + 120, []
    while len(replicas) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        replicas = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
    assert len(replicas) == 2, "the replicas never started"
    time.sleep(1.0)                          # they are scoring
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output[-2000:]
    assert "KILLED: interrupted by SIGINT (Ctrl-C)" in output, output[-2000:]
    time.sleep(0.5)
    assert not [r for r in replicas if Path(f"/proc/{r}").exists()]
    assert not out.exists() and (tmp_path / "exam.parquet.parts" / "request.json").is_file()
    run, = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("predict-interrupted").experiment_id])
    assert run.info.status == "KILLED"
