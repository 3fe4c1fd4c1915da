"""Every test runs under a pytest-timeout limit (issue 39): pyproject sets one for all, the
unit tier's conftest a shorter one for its own tests."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_sets_a_limit_for_every_test():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(ini["timeout"]) <= 1200


def test_this_unit_test_runs_under_the_unit_limit(request):
    marker = request.node.get_closest_marker("timeout")   # tests/unit/conftest.py's 180 s
    assert marker is not None and marker.args[0] == 180


@pytest.mark.timeout(7)
def test_a_test_s_own_limit_wins(request):
    assert request.node.get_closest_marker("timeout").args[0] == 7
