"""Registered model names under a member's own prefix (issue 24): one function builds them."""

from __future__ import annotations

import os
import sys

import pytest

from pipi.config import TrainConfig
from pipi.errors import ConfigError
from pipi.tracking.logged_model import registered_name
from pipi.tracking.permissions import MODEL_PREFIX_ENV, using_model_prefix
from pipi.tracking.probe import _mlflow_run_experiment
from pipi.workflows.promote import _check_name


def _cfg() -> TrainConfig:
    return TrainConfig(cell="pi", backbone="resnet18")


def test_the_prefix_is_pipi_unless_the_member_chooses_one(monkeypatch):
    monkeypatch.delenv(MODEL_PREFIX_ENV, raising=False)
    assert registered_name(_cfg()) == "pipi-resnet18-pi"
    with using_model_prefix("") as p:   # -P model_prefix= left empty: the environment's
        assert p == "pipi"
    monkeypatch.setenv(MODEL_PREFIX_ENV, "alice")
    assert registered_name(_cfg()) == "alice-resnet18-pi"
    with using_model_prefix("lab.b-2") as p:
        assert p == "lab.b-2" and registered_name(_cfg()) == "lab.b-2-resnet18-pi"
        _check_name(registered_name(_cfg()))  # promote takes the prefixed name
        with using_model_prefix(None):        # a callee that names none keeps the command's
            assert registered_name(_cfg()) == "lab.b-2-resnet18-pi"
    # issue 39: the command's prefix ends with it and never reached the process environment
    assert registered_name(_cfg()) == "alice-resnet18-pi"
    assert os.environ[MODEL_PREFIX_ENV] == "alice"


@pytest.mark.parametrize("bad", ["-x", "a b", "a/b", "x" * 65, "é"])
def test_a_prefix_that_cannot_name_a_model_is_refused(monkeypatch, bad):
    monkeypatch.setenv(MODEL_PREFIX_ENV, bad)
    with pytest.raises(ConfigError, match="model prefix"):
        registered_name(_cfg())


@pytest.mark.parametrize(("argv", "env", "expected"), [
    (["/v/bin/mlflow", "run", ".", "-e", "train"], {}, "0"),
    (["/v/bin/mlflow", "run", ".", "--experiment-name", "mine"], {}, "mine"),
    (["/v/bin/mlflow", "run", ".", "--experiment-id=7"], {}, "7"),
    (["/v/bin/mlflow", "run", "."], {"MLFLOW_EXPERIMENT_NAME": "env"}, "env"),
    (["/v/lib/mlflow/__main__.py", "run", "."], {}, "0"),
    (["/v/bin/mlflow", "server"], {}, None),
    (["entrypoints/train.py", "--cell", "a"], {}, None),
])
def test_the_experiment_mlflow_run_creates_its_run_in(monkeypatch, argv, env, expected):
    for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _mlflow_run_experiment(argv) == expected
    assert sys.argv  # untouched


@pytest.mark.parametrize(("entry", "args", "probe"), [
    ("ablate", ["--seeds", "x"], "pipi.cli.ablate.parse_list"),
    ("import", ["--kind", "checkpoint", "--file", "x.pt"], "pipi.tracking.configure"),
])
def test_ablate_and_import_take_the_prefix_before_anything_else(monkeypatch, entry, args,
                                                                 probe):
    """``-P model_prefix=`` of ``ablate`` and ``import`` is in use before their first step
    (ablate's children and import's registration read it there), for the command only:
    issue 39, it no longer goes through the process environment."""
    from click.testing import CliRunner

    from pipi import tracking
    from pipi.cli import ENTRY_POINTS
    from pipi.errors import ConfigError

    monkeypatch.delenv(MODEL_PREFIX_ENV, raising=False)

    def seen(*a, **k):
        raise ConfigError(f"prefix in use: {tracking.model_prefix()}")
    monkeypatch.setattr(probe, seen)
    r = CliRunner().invoke(ENTRY_POINTS[entry], [*args, "--model-prefix", "bob"])
    assert r.exit_code != 0 and "prefix in use: bob" in r.output, r.output
    assert MODEL_PREFIX_ENV not in os.environ and tracking.model_prefix() == "pipi"
