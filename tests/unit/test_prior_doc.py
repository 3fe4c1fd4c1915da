"""The examples in pipi.prior's docstrings hold (issue 42 item 6: one gave the corner's Phi as
e**-2 = 0.1353 where the code, as the published implementation, gives 0.1365)."""

from __future__ import annotations

import doctest

import pytest

import pipi.prior


@pytest.mark.timeout(60)
def test_the_prior_docstring_examples_run():
    result = doctest.testmod(pipi.prior, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
