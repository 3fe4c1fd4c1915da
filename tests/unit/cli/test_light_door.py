"""The ``pipi`` door is light (issue 39): ``import pipi.cli`` and ``pipi --help`` import none of
torch, torchvision, mlflow, optuna, matplotlib; the command table it lists from is the
commands' own."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

pytestmark = pytest.mark.timeout(120)

HEAVY = ("torch", "torchvision", "mlflow", "optuna", "matplotlib")


def _help(*args: str) -> str:
    """``pipi <args> --help`` in a fresh interpreter: its output, then the heavy modules it
    imported (``HEAVY [...]``)."""
    code = ("import sys; from click.testing import CliRunner; import pipi.cli as c; "
            f"r = CliRunner().invoke(c.main, [*{list(args)!r}, '--help']); "
            "assert r.exit_code == 0, r.output; print(r.output); "
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=90, check=True).stdout


def test_the_door_and_its_help_import_nothing_heavy():
    out = _help()
    assert out.strip().endswith("HEAVY []"), out
    assert "stage  " in out and "Train one cell and register its model" in out


def test_the_table_is_the_commands_own_help():
    from pipi.cli import COMMANDS, ENTRY_POINTS, command, main

    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name, (_, _, text) in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd is command(name) and cmd.name == name
        assert " ".join((cmd.help or "").split("\n\n")[0].split()) == text, name
    assert set(ENTRY_POINTS) <= set(COMMANDS) and len(ENTRY_POINTS) == 11
    assert ENTRY_POINTS["train"] is command("train")
    with pytest.raises(KeyError):
        ENTRY_POINTS["serve"]   # a command, not an MLproject entry point


def test_stage_help_imports_no_torch():
    out = _help("stage")
    assert out.strip().endswith("HEAVY []"), out
    assert "--root" in out


@pytest.mark.parametrize(("name", "option"), [("predict", "--images"), ("onnx", "--opset")])
def test_the_deployment_commands_help_imports_no_torch(name, option):
    """`pipi predict --help` and `pipi onnx --help` name their workflow lazily, as stage does."""
    out = _help(name)
    assert out.strip().endswith("HEAVY []"), out
    assert option in out
