"""Registered sequence models, input validation and `mlflow models serve` over HTTP."""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from servers import free_port, wait_http

from pipi.classes import CLASSES
from pipi.data.cache import build_cache
from pipi.data.staging import load_staged
from pipi.predictions import PROB_COLUMNS
from pipi.serving.model_input import encode_image, encode_png
from pipi.training.sequence import build_windows

pytestmark = pytest.mark.slow
SEQ = "pipi-resnet18-b_plus"


@pytest.fixture(scope="module")
def b_plus(smoke_study):
    """The smoke study's b_plus run of seed 42 (with its pi base run). The tests load the exact
    versions the smoke study registered (``models:/<name>/<version>``), not ``@candidate``:
    other tests on the session's server may register newer versions of the same families."""
    return smoke_study.summaries[("b_plus", 42)]


@pytest.fixture(scope="module")
def frame_uri(smoke_study):
    return smoke_study.summaries[("pi", 42)].registered


@pytest.fixture(scope="module")
def distill_uri(smoke_study):
    return smoke_study.summaries[("distill", 42)].registered


def _fresh(code: str, uri: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "MLFLOW_TRACKING_URI": uri}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_b_plus_is_registered_and_reproduces_its_run_in_a_fresh_process(b_plus, tracking,
                                                                         tiny_staged, tmp_path):
    c = mlflow.tracking.MlflowClient()
    name, version = b_plus.registered.removeprefix("models:/").split("/")
    assert name == SEQ
    mv = c.get_model_version(name, version)
    assert mv.tags["run_id"] == b_plus.run_id and mv.tags["cell"] == "b_plus"
    assert mv.tags["base_run_id"] == b_plus.base_run_id and mv.tags["window"] == "4"
    # the clip: the training window of a test row (smoke window: 4 frames), as the uint8
    # frames of the training cache; the pyfunc must give that row the probabilities the run
    # logged for it
    frames, man = load_staged(tiny_staged)
    imgs = build_cache(tiny_staged, frames, size=32, digest=man["data_digest"],
                       cache_dir=tmp_path / "c", progress=False)
    win = build_windows(frames, window=4)
    test_rows = np.flatnonzero((frames["split"] == "test").to_numpy()
                               & ~frames["multilabel"].to_numpy()
                               & ~win.mask.any(1))
    row = int(test_rows[0])
    clip = np.stack([imgs[i] for i in win.index[row]])                  # (T, 3, S, S)
    clip = np.ascontiguousarray(clip.transpose(0, 2, 3, 1))              # (T, S, S, 3)
    np.save(tmp_path / "clip.npy", clip)
    out = _fresh(
        "import mlflow, numpy as np\n"
        f"m = mlflow.pyfunc.load_model('{b_plus.registered}')\n"
        f"clip = np.load('{tmp_path / 'clip.npy'}')\n"
        "df = m.predict({'pixels': [clip]})\n"
        "short = m.predict({'pixels': [clip[:2], clip]})\n"
        "names = [c.name for c in m.metadata.get_input_schema().inputs]\n"
        "assert names == ['image', 'pixels'], names\n"
        "assert list(short['clip']) == [0, 0, 1, 1, 1, 1], short\n"
        "df.to_json('" + str(tmp_path / "out.json") + "', orient='records')\n"
        "print(len(df), df['predicted_class'].iloc[0])\n", tracking)
    assert out.split()[0] == "4"
    got = pd.read_json(tmp_path / "out.json", orient="records")
    preds = pd.read_parquet(Path(mlflow.artifacts.download_artifacts(
        run_id=b_plus.run_id, artifact_path="predictions/test.parquet",
        dst_path=str(tmp_path / "p"))))
    fname = frames["filename"].iloc[row] if "filename" in frames else None
    ref = preds[(preds["video_id"].astype(str) == str(frames["video_id"].iloc[row]))
                & (preds["frame_number"] == frames["frame_number"].iloc[row])]
    assert len(ref) >= 1, fname
    centre = int(win.centre[row])
    np.testing.assert_allclose(got.loc[centre, list(CLASSES)].to_numpy(float),
                               ref[list(PROB_COLUMNS)].to_numpy(float)[0], atol=2e-4)


def test_in_process_predict_refuses_malformed_images(frame_uri, tracking):
    m = mlflow.pyfunc.load_model(frame_uri)
    img = np.random.default_rng(1).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    ok = m.predict(pd.DataFrame({"image": [encode_image(img), encode_png(img)]}))
    assert list(ok.columns) == [*CLASSES, "predicted_class"] and len(ok) == 2
    # the float form is converted explicitly: x in [0, 1] -> round(255 x)
    f = m.predict({"pixels": [img / 255.0]})
    np.testing.assert_allclose(f.iloc[0, :14].to_numpy(float),
                               m.predict({"pixels": [img]}).iloc[0, :14].to_numpy(float),
                               atol=1e-6)
    for x in (img[None], pd.DataFrame({"image": []})):   # no column / no row of the schema
        with pytest.raises(MlflowException):
            m.predict(x)
    bad = {
        "too small": {"pixels": [np.zeros((1, 1, 3), np.uint8)]},
        "[0, 255]": {"pixels": [np.full((20, 20, 3), 300)]},
        "NaN": {"pixels": [np.full((20, 20, 3), np.nan)]},
        "[0, 1]": {"pixels": [np.full((20, 20, 3), 2.5)]},
        "channels": {"pixels": [np.zeros((20, 20, 4), np.uint8)]},
        "not valid base64": pd.DataFrame({"image": ["%%%"]}),
        "not a JPEG or PNG": pd.DataFrame({"image": [base64.b64encode(b"hello").decode()]}),
        "shape": {"pixels": list(np.zeros((2, 2, 20, 20, 3), np.uint8))},
    }
    for why, x in bad.items():
        with pytest.raises(MlflowException, match=why.replace("[", r"\[").replace("]", r"\]")):
            m.predict(x)
    with pytest.raises(MlflowException, match="P_blood head"):
        m.predict({"pixels": [img]}, params={"heatmap": True})


def test_distill_heatmap_is_the_auxiliary_head_and_leaves_the_probabilities(distill_uri,
                                                                            tracking):
    import torch

    m = mlflow.pyfunc.load_model(distill_uri)
    # at the training size (32 px) the resize is the identity, so x01 = imgs / 255 exactly
    imgs = np.random.default_rng(3).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    plain = m.predict({"pixels": list(imgs)})
    hm = m.predict({"pixels": list(imgs)}, params={"heatmap": True})
    np.testing.assert_allclose(hm[list(CLASSES)].to_numpy(float),
                               plain[list(CLASSES)].to_numpy(float), atol=1e-6)
    assert "p_blood_heatmap" not in plain
    py = m.unwrap_python_model().predictor
    x01 = torch.from_numpy(imgs.transpose(0, 3, 1, 2).copy()).float() / 255
    py.model.deploy_mode = False
    with torch.no_grad():
        _, aux = py.model(py.inputs(x01, train=False)[0])
    py.model.deploy_mode = True
    got = np.array(hm["p_blood_heatmap"].tolist(), dtype=float)
    assert got.shape == tuple(aux[:, 0].shape) and ((got >= 0) & (got <= 1)).all()
    np.testing.assert_allclose(got, torch.sigmoid(aux[:, 0]).numpy(), atol=1e-4)


class _Served:
    """A model server on a free port: ``pipi serve`` (``launcher="pipi"``, the request limits
    around MLflow's scoring app) or ``mlflow models serve``."""

    def __init__(self, model_uri: str, uri: str, tmp: Path, env=None, *,
                 env_manager: str = "local", timeout: float = 180, launcher: str = "mlflow",
                 max_request_mb: float | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        bindir = Path(sys.executable).parent
        self.log_path = tmp / f"serve-{launcher}-{env_manager}.log"
        self.log = open(self.log_path, "wb")
        if launcher == "pipi":
            cmd = [str(bindir / "pipi"), "serve", "-m", model_uri, "--host", "127.0.0.1",
                   "--port", str(self.port), "--workers", "1"]
            if max_request_mb is not None:
                cmd += ["--max-request-mb", repr(max_request_mb)]
        elif launcher == "container":
            # what the container runs, here: its script on the build folder's model folder
            # (model_uri), only host and port told apart from the image's defaults
            build = Path(model_uri)
            cmd = [sys.executable, str(build / "pipi_serve.py")]
            env = {**(env or {}), "PIPI_SERVE_MODEL_PATH": str(build / "model_dir"),
                   "PIPI_SERVE_HOST": "127.0.0.1", "PIPI_SERVE_PORT": str(self.port)}
        else:
            cmd = [str(bindir / "mlflow"), "models", "serve", "-m", model_uri,
                   "--env-manager", env_manager, "-h", "127.0.0.1", "-p", str(self.port),
                   "-w", "1"]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_TRACKING_URI": uri, **(env or {}),
                 "PATH": f"{bindir}:{os.environ['PATH']}"})
        try:
            wait_http(self.url + "/ping", timeout=timeout, proc=self.proc)
        except Exception:  # noqa: BLE001 - any failure to start: stop it, show its log
            self.stop()
            raise AssertionError(self.log_path.read_text(errors="replace")[-4000:]) from None

    def post(self, body: bytes, ctype: str = "application/json") -> tuple[int, str]:
        req = urllib.request.Request(self.url + "/invocations", data=body,
                                     headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def raw(self, head: bytes, chunks=()) -> tuple[int, str]:
        """Send request headers and ``chunks`` over one socket, never ending the body; the
        answer read back (the server must answer without the rest, or this times out)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            s.sendall(head)
            for c in chunks:
                s.sendall(c)
            data = b""
            while b"\r\n\r\n" not in data:
                part = s.recv(65536)
                assert part, data
                data += part
            header, _, rest = data.partition(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            length = next(int(h.split(":", 1)[1]) for h in lines[1:]
                          if h.lower().startswith("content-length:"))
            while len(rest) < length:
                part = s.recv(65536)
                assert part, rest
                rest += part
            return int(lines[0].split()[1]), rest[:length].decode()

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


#: pipi serve's limit in the tests: 200000 bytes.
LIMIT_MB = 200000 / 2**20


@pytest.fixture(scope="module")
def pipi_served(frame_uri, mlflow_server, tmp_path_factory):
    served = _Served(frame_uri, mlflow_server.uri, tmp_path_factory.mktemp("pipi-serve"),
                     launcher="pipi", max_request_mb=LIMIT_MB)
    yield served
    served.stop()


def test_served_model_answers_base64_jpeg_and_refuses_malformed(pipi_served):
    served = pipi_served
    img = np.random.default_rng(2).integers(0, 256, (336, 336, 3), dtype=np.uint8)
    jpeg = encode_image(img)
    code, text = served.post(json.dumps({"dataframe_records": [{"image": jpeg}]}).encode())
    assert code == 200, text
    rec = json.loads(text)["predictions"][0]
    assert set(CLASSES) <= set(rec) and rec["predicted_class"] in CLASSES
    assert abs(sum(rec[c] for c in CLASSES) - 1) < 1e-4
    # the same image as a nested uint8 array and under "inputs": the same answer
    small = img[:40, :40]
    code, text = served.post(json.dumps({"inputs": {"image": [encode_png(small)]},
                                         "params": {"strip_prior": True}}).encode())
    assert code == 200, text
    code, text2 = served.post(json.dumps({"inputs": {"pixels": small[None].tolist()},
                                          "params": {"strip_prior": True}}).encode())
    assert code == 200, text2
    a, b = json.loads(text)["predictions"][0], json.loads(text2)["predictions"][0]
    assert all(abs(a[c] - b[c]) < 1e-6 for c in CLASSES)
    malformed = {
        "not JSON": (b"{not json", "not JSON"),
        "bad base64": (json.dumps({"dataframe_records": [{"image": "%%%"}]}).encode(),
                       "not valid base64"),
        "not an image": (json.dumps({"dataframe_records": [
            {"image": base64.b64encode(b"plain text").decode()}]}).encode(),
            "not a JPEG or PNG"),
        "wrong rank": (json.dumps({"inputs": {"pixels": [[1, 2, 3]]}}).encode(), "expected"),
        "too small": (json.dumps({"inputs": {"pixels": [[[[0, 0, 0]]]]}}).encode(),
                      "too small"),
        "over the size": (json.dumps({"inputs": {"image": ["A" * 300000]}}).encode(),
                          "over the limit"),
    }
    for why, (body, expect) in malformed.items():
        code, text = served.post(body)
        assert 400 <= code < 500, (why, code, text[:300])
        msg = json.loads(text)["message"]
        assert expect in msg and "\n" not in msg and "Traceback" not in text, (why, msg)
        assert len(text) < 1000, (why, len(text))            # never the request echoed


def test_pipi_serve_refuses_an_oversized_body_without_reading_it(pipi_served):
    """Over a real socket: a declared Content-Length over the limit is answered at once, with
    no byte of the body sent; a chunked body is answered once it passes the limit, its end
    never sent. A server that read the whole body would wait here until the socket's
    timeout."""
    head = (b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n")
    code, text = pipi_served.raw(head + b"Content-Length: 1000000000\r\n\r\n")
    assert code == 413, text
    assert "Content-Length 1000000000 bytes" in json.loads(text)["message"]
    chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"          # 16 KiB chunks
    n = 200000 // 0x4000 + 1                                   # the first one past the limit
    code, text = pipi_served.raw(head + b"Transfer-Encoding: chunked\r\n\r\n", [chunk] * n)
    assert code == 413, text
    msg = json.loads(text)["message"]
    assert "refused after reading" in msg and "over the limit of 200000 bytes" in msg
    assert pipi_served.post(b'{"inputs": {"pixels": [[[[0, 0, 0]]]]}}')[0] == 400  # still up
    # issue 41: the refused chunked body's unread rest left uvicorn's h11 parser logging a
    # 25-line traceback; the 413 now closes the connection
    time.sleep(1)
    log = pipi_served.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "h11" not in log, log[-3000:]


def test_pipi_serve_answers_as_mlflow_models_serve_does(pipi_served, frame_uri, mlflow_server,
                                                        tmp_path):
    """The same probabilities from MLflow's own server; that one has no request limit (the
    model no longer installs one into it): the over-size body is parsed, not refused."""
    rng = np.random.default_rng(31)
    images = [encode_image(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)) for _ in range(3)]
    body = json.dumps({"dataframe_records": [{"image": im} for im in images]}).encode()
    plain = _Served(frame_uri, mlflow_server.uri, tmp_path)
    try:
        expected = _probs(plain, body)
        code, text = plain.post(json.dumps({"inputs": {"image": ["A" * 300000]}}).encode())
    finally:
        plain.stop()
    assert code == 400 and "over the limit" not in text
    np.testing.assert_array_equal(_probs(pipi_served, body), expected)


def _probs(served: _Served, body: bytes) -> np.ndarray:
    code, text = served.post(body)
    assert code == 200, text[:2000]
    return np.array([[r[c] for c in CLASSES] for r in json.loads(text)["predictions"]])


@pytest.fixture(scope="module")
def env_tier_model(mlflow_server, tiny_staged) -> str:
    """One registered `pi` model (smoke profile) for the environment tier, which needs no
    more: ``make test-envs`` runs in a session of its own, where the whole smoke study (eight
    trainings, 86 s) was trained for this alone. Registered under a prefix of its own, so the
    smoke study's versions and aliases stay as they are when both run in one session."""
    import mlflow

    from pipi import tracking as pipi_tracking
    from pipi.config import make_config
    from pipi.runs.training import train

    mlflow.set_tracking_uri(mlflow_server.uri)
    cfg = make_config(cell="pi", seed=41, backbone="resnet18", profile="smoke", weights="none")
    with pipi_tracking.using_model_prefix("envtier"):
        s = train(cfg, data=str(tiny_staged), experiment="env-tier", progress=False)
    return f"models:/{s.registered_name}@candidate"


@pytest.mark.envbuild
@pytest.mark.parametrize("manager", [
    # make test-envs on two workers: the tier's longest build (virtualenv, 141 s from empty
    # caches) on one, this uv case and test_mlflow_env's uv build (group envs-uv) on the
    # other; in this module's group both cases left the other worker idle for 144 s
    pytest.param("uv", marks=pytest.mark.xdist_group("envs-uv")),
    pytest.param("virtualenv", marks=pytest.mark.xdist_group("test_serve-virtualenv"))])
def test_the_candidate_serves_from_its_own_environment_as_the_venv_server_does(
        env_tier_model, tracking, tmp_path, manager):
    """``mlflow models serve --env-manager uv`` (MLflow's recommended builder) and
    ``virtualenv`` (its default, pyenv and pip): MLflow builds the model's environment from its
    python_env.yaml and requirements (torch===2.13.0 from the registry, no pipi install, no
    tqdm) and runs the code it ships; the answer equals the .venv server's.
    virtualenv keeps the environment under MLflow's env root (``MLFLOW_ENV_ROOT``, default
    ``~/.mlflow/envs``), keyed by the requirements alone: a CI cache of that folder skips the
    build. MLflow names a uv environment the same way, so the uv case builds in an env root of
    its own (uv's download cache makes a rebuild take seconds) and never reuses pip's.
    """
    uri = env_tier_model
    assert uri.startswith("models:/envtier-resnet18-pi@"), uri
    rng = np.random.default_rng(30)
    images = [encode_image(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)) for _ in range(3)]
    body = json.dumps({"dataframe_records": [{"image": im} for im in images]}).encode()
    (tmp_path / "venv").mkdir()
    (tmp_path / "own").mkdir()
    served = _Served(uri, tracking, tmp_path / "venv")
    try:
        expected = _probs(served, body)
    finally:
        served.stop()
    own = {}
    if manager == "uv":   # `uv` from the .venv (on the server's PATH), pyenv's 3.11.7, no download
        own = {"MLFLOW_ENV_ROOT": str(tmp_path / "envs"), "UV_PYTHON_DOWNLOADS": "never"}
    t0 = time.monotonic()
    served = _Served(uri, tracking, tmp_path / "own", own, env_manager=manager, timeout=1800)
    built_s = time.monotonic() - t0
    try:
        got = _probs(served, body)
        log = served.log_path.read_text(errors="replace")
    finally:
        served.stop()
    print(f"\nmodel environment ({manager}) ready and serving after {built_s:.0f} s "
          f"({'built' if 'Installing dependencies' in log else 'reused'})")
    assert "--env-manager local" not in log
    if manager == "uv":
        assert "using uv" in log and "Installing dependencies" in log, log[-3000:]
        built = next((tmp_path / "envs").glob("mlflow-*/bin/python"))
        code = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
        probe = subprocess.run([str(built), "-c", code], capture_output=True, text=True,
                               timeout=300, check=False, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
        assert probe.returncode == 0, probe.stderr[-2000:]
        python, torch_version = probe.stdout.split()
        assert python == "3.11.7" and torch_version.split("+")[0] == "2.13.0"
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_the_container_serves_with_pipi_serve_s_limits(smoke_study, tracking, tmp_path):
    """``pipi serve --dockerfile DIR`` (issue 40): MLflow's own build (the Dockerfile of
    ``mlflow models generate-dockerfile``, line for line, and its model folder) with only what
    the container runs changed; that command, run here on the build folder (no Docker daemon),
    answers as ``pipi serve`` does: the pyfunc's probabilities, 413 over the limit."""
    uri = f"models:/{smoke_study.model('pi')}@candidate"
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking}
    bindir = Path(sys.executable).parent
    theirs, ours = tmp_path / "mlflow", tmp_path / "pipi"
    r = subprocess.run([str(bindir / "mlflow"), "models", "generate-dockerfile", "-m", uri,
                        "-d", str(theirs)], capture_output=True, text=True, timeout=600,
                       check=False, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    # the command as docs/serving.md writes it, this study's model, folder and limit put in
    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    line = next(x for x in doc.splitlines() if x.startswith("pipi serve ") and "--dockerfile" in x)
    argv = shlex.split(line)
    for opt, value in (("-m", uri), ("--dockerfile", str(ours)),
                       ("--max-request-mb", repr(LIMIT_MB))):
        argv[argv.index(opt) + 1] = value
    from click.testing import CliRunner

    from pipi.cli import main

    r = CliRunner().invoke(main, argv[1:], env={"MLFLOW_TRACKING_URI": tracking})
    assert r.exit_code == 0, r.output[-3000:]
    assert f"wrote {ours / 'Dockerfile'} (FROM python:3.11.7-slim" in r.output
    mlflow_lines = (theirs / "Dockerfile").read_text().splitlines()
    pipi_lines = (ours / "Dockerfile").read_text().splitlines()
    entry = [x for x in mlflow_lines if x.startswith("ENTRYPOINT")]
    assert len(entry) == 1 and "C._serve(" in entry[0]
    # the build is MLflow's: every line but its ENTRYPOINT, in order
    assert [x for x in pipi_lines if x in mlflow_lines] == [x for x in mlflow_lines
                                                            if x not in entry]
    assert pipi_lines[-3:] == ['COPY pipi_serve.py pipi_guard.py /opt/pipi/', 'EXPOSE 8080',
                               'ENTRYPOINT ["python", "/opt/pipi/pipi_serve.py"]']
    assert any("C._install_pyfunc_deps('/opt/ml/model'" in x for x in pipi_lines)
    reqs = next((ours / "model_dir").rglob("requirements.txt")).read_text().split()
    assert "torch===2.13.0" in reqs and "torchvision==0.28.0" in reqs
    assert sorted(p.name for p in ours.iterdir()) == ["Dockerfile", "model_dir", "pipi_guard.py",
                                                      "pipi_serve.py"]
    # the container's command, on its own files: no pipi on its path
    rng = np.random.default_rng(40)
    images = [encode_image(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)) for _ in range(3)]
    body = json.dumps({"dataframe_records": [{"image": im} for im in images]}).encode()
    served = _Served(str(ours), tracking, tmp_path, launcher="container",
                     env={"PYTHONPATH": "", "PYTHONSAFEPATH": "1"})
    try:
        got = _probs(served, body)
        code, text = served.post(b"x" * (int(LIMIT_MB * 2**20) + 1))
        log = served.log_path.read_text(errors="replace")
    finally:
        served.stop()
    assert code == 413, text[:500]
    assert "over the limit of 200000 bytes" in json.loads(text)["message"]
    assert "a request body over 200000 bytes is refused with 413" in log, log[-2000:]
    model_dir = next(p.parent for p in (ours / "model_dir").rglob("MLmodel"))
    want = mlflow.pyfunc.load_model(str(model_dir)).predict(pd.DataFrame({"image": images}))
    np.testing.assert_allclose(got, want[list(CLASSES)].to_numpy(dtype=float), atol=1e-6)
