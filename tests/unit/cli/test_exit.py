"""A ``pipi`` command's exit: its last exit handler freezes the objects still alive, so the
interpreter's final collections skip them (docs/benchmarks.md: 1.8 s of ``pipi predict``);
every other exit handler still runs and the output is whole."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

#: An exit handler registered before the command starts runs after the command's own (atexit
#: runs them last-in first-out): it sees whether the freeze happened, and that it still ran.
_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("FROZEN", gc.get_freeze_count(), flush=True))
frozen_before = gc.get_freeze_count()
import pipi.cli
sys.argv = ["pipi", *sys.argv[1:]]
try:
    pipi.cli.main()
finally:
    print("BEFORE", frozen_before, flush=True)
"""


def _exit_of(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, timeout=90)


def test_a_command_freezes_what_is_alive_after_every_other_exit_handler():
    res = _exit_of("--help")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "Train one cell and register its model" in res.stdout   # the help, whole
    assert lines[-2] == "BEFORE 0"
    frozen = int(lines[-1].removeprefix("FROZEN "))
    assert lines[-1].startswith("FROZEN ") and frozen > 1000, lines[-3:]


def test_a_failing_command_freezes_too_and_keeps_its_exit_status():
    res = _exit_of("predict", "--no-such-option")
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "no-such-option" in res.stderr
    assert int(res.stdout.splitlines()[-1].removeprefix("FROZEN ")) > 1000
