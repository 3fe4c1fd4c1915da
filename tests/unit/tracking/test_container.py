"""``pipi serve --dockerfile``'s refusals (issue 40): one line, and nothing half-written (the
build itself: tests/integration/test_serve.py)."""

from __future__ import annotations

import pytest

from pipi.errors import ConfigError
from pipi.tracking.container import write_container


def test_a_folder_that_is_not_empty_is_refused_untouched(tmp_path):
    out = tmp_path / "docker"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    with pytest.raises(ConfigError, match="not an empty folder"):
        write_container(str(tmp_path), out, max_bytes=100)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_a_folder_that_is_not_a_model_leaves_no_build(tmp_path):
    (tmp_path / "notmodel").mkdir()
    with pytest.raises(ConfigError, match="cannot write a container for it .*MLmodel"):
        write_container(str(tmp_path / "notmodel"), tmp_path / "docker", max_bytes=100)
    assert not (tmp_path / "docker").exists()
