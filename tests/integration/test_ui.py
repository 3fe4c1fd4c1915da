"""The MLflow UI as a researcher sees it: a smoke `pi` run on a real `mlflow server`, opened in
headless Chromium (the experiment's runs table, the run page, a figure in the Artifacts tab,
the registered model page). Screenshots are kept under the test's tmp dir."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from pipi import tracking

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (scripts/"
                       "system-deps.sh installs it: apt-get install chromium)"),
]


def open_page(url: str, tmp: Path, name: str, *, budget_ms: int = 25000) -> str:
    """The rendered DOM of ``url`` (the UI is a React app) and a screenshot ``<name>.png``."""
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", "--window-size=1600,1000",
            # HTML artifacts render in a sandboxed iframe: draw it in the screenshot
            "--disable-site-isolation-trials",
            f"--virtual-time-budget={budget_ms}"]
    # one browser for both (it took two: each a Chromium start and the page's rendering)
    shot = subprocess.run([*base, f"--user-data-dir={tmp / f'profile-{name}'}",
                           f"--screenshot={tmp / f'{name}.png'}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=240, check=False)
    assert shot.returncode == 0 and (tmp / f"{name}.png").stat().st_size > 10_000, \
        shot.stderr[-2000:]
    return shot.stdout


def _wd(base: str, method: str, path: str, body: dict | None = None) -> dict:
    """One W3C WebDriver call to ChromeDriver (no client library needed)."""
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["value"]


def click_then_read(url: str, label: str, tmp: Path, *, wait_s: float = 60) -> str:
    """Open ``url`` in headless Chromium driven by ChromeDriver, click the innermost element
    whose text contains ``label`` (as a person opens a collapsed section) and return the
    page's DOM afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    driver = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _wd(base, "GET", "/status").get("ready"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "chromedriver did not start"
            time.sleep(0.2)
        opts = {"binary": CHROMIUM, "args": ["--headless", "--no-sandbox", "--disable-gpu",
                                             "--window-size=1600,1000",
                                             f"--user-data-dir={tmp / 'profile-webdriver'}"]}
        sid = _wd(base, "POST", "/session", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": opts}}})["sessionId"]
        try:
            _wd(base, "POST", f"/session/{sid}/url", {"url": url})
            xpath = (f"//*[contains(normalize-space(.), '{label}') and "
                     f"not(*[contains(normalize-space(.), '{label}')])]")
            deadline = time.monotonic() + wait_s
            while not (found := _wd(base, "POST", f"/session/{sid}/elements",
                                    {"using": "xpath", "value": xpath})):
                assert time.monotonic() < deadline, f"no element with {label!r} on {url}"
                time.sleep(0.5)
            element = next(iter(found[0].values()))
            _wd(base, "POST", f"/session/{sid}/element/{element}/click", {})
            time.sleep(2)  # the section renders its rows
            return _wd(base, "GET", f"/session/{sid}/source")
        finally:
            _wd(base, "DELETE", f"/session/{sid}")
    finally:
        driver.terminate()
        driver.wait(timeout=30)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture(scope="module")
def smoke_run(mlflow_server, tiny_staged):
    """One smoke `pi` run (1 epoch, 2 batches) with system metrics, on the server."""
    import mlflow

    from pipi.config import make_config
    from pipi.runs import training as workflow

    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI",
                                            "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")}
    os.environ.update({"MLFLOW_TRACKING_URI": mlflow_server.uri,
                       "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "1"})
    mlflow.set_tracking_uri(mlflow_server.uri)
    try:
        cfg = make_config(cell="pi", backbone="efficientnet_b0", profile="smoke",
                          weights="none", seed=41)
        summary = workflow.train(cfg, data=str(tiny_staged), experiment="ui-smoke",
                                 progress=False, system_metrics=True)
        run = mlflow.get_run(summary.run_id)
        yield summary, run
    finally:
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_run_carries_what_the_ui_shows(smoke_run, mlflow_server):
    from mlflow.tracking import MlflowClient

    summary, run = smoke_run
    c = MlflowClient(mlflow_server.uri)
    exp = c.get_experiment(run.info.experiment_id)
    assert exp.tags[tracking.ui.EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert tracking.ui.SHARED_VIEW_PREFIX + tracking.ui.TRAINING_VIEW in exp.tags
    figures = {a.path: a.file_size for a in c.list_artifacts(run.info.run_id, "figures")}
    assert set(figures) == {"figures/roc_per_class.png", "figures/pr_per_class.png",
                            "figures/confusion.png", "figures/prior_examples.png"}
    assert sum(figures.values()) < 600_000, figures  # a few hundred KB per run
    note = run.data.tags[tracking.handle.NOTE_TAG]
    assert "**Cell `pi`**" in note and f"{summary.test_macro_auc:.4f}" in note
    assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics)
    assert any(k.startswith("system/system_memory") for k in run.data.metrics)
    # what tells runs apart is in the name; bookkeeping is not a user-facing tag (issue 30)
    assert run.info.run_name == "pi-s41-smoke-tiny-efficientnet_b0"
    assert not any(k.startswith("pipi.heartbeat") for k in run.data.tags)
    name, version = summary.registered_name, summary.registered_version
    assert "strip_prior" in c.get_registered_model(name).description
    assert f"run `{run.info.run_id}`" in c.get_model_version(name, version).description


def test_the_ui_shows_runs_table_description_figure_and_model_card(smoke_run, mlflow_server,
                                                                     tmp_path):
    summary, run = smoke_run
    exp_id, run_id = run.info.experiment_id, run.info.run_id
    root = mlflow_server.uri

    runs = _text(open_page(tracking.ui.experiment_url(exp_id), tmp_path, "experiment"))
    assert "pi-s41-smoke-tiny" in runs          # the runs table, not the GenAI overview
    assert "test/macro_auc" in runs and "backbone" in runs  # pipi's columns
    assert "Traces 0" not in runs

    # the printed run link opens the model-training view, though a fresh browser starts on
    # GenAI (whose sidebar lists "Evaluation runs")
    page = _text(open_page(tracking.run_url(run_id, exp_id), tmp_path, "run"))
    assert "Evaluation runs" not in page and "Model registry" in page
    assert "Cell pi on efficientnet_b0" in page  # the description, rendered as Markdown
    assert "heartbeat" not in page
    assert "system/cpu_utilization_percentage" in page

    art = open_page(tracking.artifact_url(run_id, "figures/roc_per_class.png", exp_id),
                    tmp_path, "artifact")
    assert "figures/roc_per_class.png" in _text(art)           # the file selected ...
    imgs = re.findall(r"<img[^>]+src=\"([^\"]+)\"", art)
    assert any(src.startswith("blob:") for src in imgs), imgs  # ... and its image preview

    model = _text(open_page(f"{root}/#/models/{summary.registered_name}", tmp_path, "model"))
    assert "Strip-and-serve" in model and "mlflow models serve" in model
    # the serve command names the alias that exists after train (issue 30)
    assert f"models:/{summary.registered_name}@candidate" in model
    assert "@champion " not in model
    assert "Training evidence" in model

    # the logged model's page knows its registered version (issue 38: it said "Not
    # registered"; MLflow 3.17 keeps its Register button on a registered model too)
    logged = _text(open_page(f"{root}/#/experiments/{exp_id}/models/{summary.model_id}",
                             tmp_path, "logged-model"))
    assert "Not registered" not in logged
    assert f"Model versions {summary.registered_name} v{summary.registered_version}" in logged

    # the version page shows the input schema (issue 30): opened as a person opens it, the
    # base64 `image` column and the `pixels` array form, both optional
    url = (f"{root}/#/models/{summary.registered_name}/versions/"
           f"{summary.registered_version}")
    assert re.search(r"Schema .*Inputs \(2\)", _text(open_page(url, tmp_path, "version")))
    if CHROMEDRIVER is None:
        pytest.skip("ChromeDriver is not installed (scripts/system-deps.sh installs it: "
                    "apt-get install chromium-driver)")
    inputs = _text(click_then_read(url, "Inputs (2)", tmp_path)).split("Inputs (2)", 1)[1]
    inputs = inputs.split("Outputs (", 1)[0]
    assert re.search(r"\bimage\b", inputs) and re.search(r"\bpixels\b", inputs), inputs


def test_the_aggregate_run_previews_its_dashboard(smoke_run, mlflow_server, tmp_path):
    import mlflow

    from pipi.workflows.aggregate import run_aggregate

    mlflow.set_tracking_uri(mlflow_server.uri)  # smoke_run: the experiment holds a pi run
    res = run_aggregate(experiment="ui-smoke", cache_dir=tmp_path / "cache")
    url = tracking.artifact_url(res.run_id, "dashboard.html")
    assert f"dashboard in the MLflow UI: {url}" in res.summary
    note = mlflow.get_run(res.run_id).data.tags[tracking.handle.NOTE_TAG]
    assert f"[open the dashboard]({url})" in note
    page = open_page(url, tmp_path, "aggregate")
    assert re.search(r'<iframe[^>]+class="mlflow-html-iframe"', page)  # the HTML preview
    assert "report.md" in _text(page) and "tables" in _text(page)
