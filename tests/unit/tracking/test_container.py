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


def test_an_empty_folder_given_stays_when_the_model_is_not_one(tmp_path):
    out = tmp_path / "given"
    out.mkdir()
    with pytest.raises(ConfigError, match="cannot write a container"):
        write_container(str(tmp_path / "nothing"), out, max_bytes=100)
    assert out.is_dir() and list(out.iterdir()) == []


def test_pipi_serve_without_dockerfile_serves_instead_of_writing_one(tmp_path, monkeypatch):
    """The option's default is no folder: a plain `pipi serve` (the CI at 2cd2bf3 read an unset
    --dockerfile as the current folder and wrote a build there instead of serving)."""
    from click.testing import CliRunner

    from pipi.cli import main
    from pipi.tracking import container, scoring

    asked = []
    monkeypatch.setattr(scoring, "serve", lambda req, announce: asked.append(req))
    monkeypatch.setattr(container, "write_container",
                        lambda *a, **k: pytest.fail("wrote a container"))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["serve", "-m", str(tmp_path / "model"), "--port", "5999"])
    assert r.exit_code == 0, r.output
    assert [q.port for q in asked] == [5999] and list(tmp_path.iterdir()) == []
