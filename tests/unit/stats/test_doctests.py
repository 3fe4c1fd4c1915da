"""The Examples blocks of pipi.stats docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "auc",
    "bootstrap",
    "calibration",
    "combine",
    "delong",
    "multiple",
    "operating",
    "permutation",
    "tests_paired",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"pipi.stats.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"pipi.stats.{name} has no Examples"
    assert result.failed == 0
