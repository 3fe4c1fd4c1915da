"""Printed links: the tracking server's own address (``mlflow ui``'s default for a local
store), and always the model-training view (issue 30: run links opened the GenAI view)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import mlflow
import pytest

from pipi import tracking


@pytest.fixture()
def uri():
    def use(u: str) -> None:
        mlflow.set_tracking_uri(u)
    yield use
    mlflow.set_tracking_uri(None)


def _view(url: str) -> dict:
    # the UI routes on the fragment: its query is what the page's search params hold
    return parse_qs(urlsplit(urlsplit(url).fragment).query)


@pytest.mark.parametrize("server,root", [
    ("http://mlflow.lab:8081/", "http://mlflow.lab:8081"),
    ("https://tracking.example.org/mlflow", "https://tracking.example.org/mlflow"),
    ("sqlite:///tmp/x.db", "http://127.0.0.1:5000"),
])
def test_links_use_the_server_address_and_open_the_training_view(uri, server, root):
    uri(server)
    run = tracking.run_url("r1", "7")
    art = tracking.artifact_url("r1", "dashboard.html", "7")
    exp = tracking.ui.experiment_url("7")
    assert run.startswith(f"{root}/#/experiments/7/runs/r1")
    assert art.startswith(f"{root}/#/experiments/7/runs/r1/artifacts/dashboard.html")
    assert exp.startswith(f"{root}/#/experiments/7/runs")
    for url in (run, art, exp):
        assert _view(url)["workflowType"] == ["machine_learning"], url
    # the artifact path stays a path: the UI selects dashboard.html, not "dashboard.html?..."
    assert urlsplit(urlsplit(art).fragment).path.endswith("/artifacts/dashboard.html")
