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


def test_every_command_s_help_imports_nothing_heavy():
    """``pipi <command> --help`` for every command, one after another in one fresh interpreter:
    each command module names its workflow (and torch, mlflow, optuna behind it) lazily and
    lists its choices from torch-free modules (pipi.options, pipi.runs.choices,
    pipi.sweeps.studies, pipi.calibration.options)."""
    from pipi.cli import COMMANDS

    code = ("import sys; from click.testing import CliRunner; import pipi.cli as c\n"
            f"for name in {sorted(COMMANDS)!r}:\n"
            "    r = CliRunner().invoke(c.main, [name, '--help'])\n"
            "    assert r.exit_code == 0, (name, r.output)\n"
            f"    heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "    print(name, 'HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=90, check=True).stdout.splitlines()
    assert [line.split()[0] for line in out] == sorted(COMMANDS)
    assert [line for line in out if not line.endswith(" HEAVY []")] == []


def test_the_help_lists_its_choices():
    """The choices moved to torch-free modules are the ones the machinery uses."""
    from click.testing import CliRunner

    from pipi import prior, runtime
    from pipi.calibration import study, trials
    from pipi.cli import main
    from pipi.sweeps import plan
    from pipi.workflows import galar, importer, transplant

    assert set(prior.HB_INDICES) == set(prior.HB_INDEX_NAMES)
    assert set(runtime.AMP_DTYPES) == set(runtime.PRECISIONS) - {"auto"}
    assert study.SAMPLERS == ("tpe", "gp", "grid") and trials.MODES == ("frozen", "train")
    assert list(plan.STUDIES)[0] == "eight_cell" and plan.EXECUTORS == ("local", "slurm")
    assert galar.FOLD_CHOICES == ("auto", "all", "evaluation")
    assert transplant.STUDIES == ("transplant", "gradcam", "all")
    assert "distill" in importer.IMPORT_CELLS and "probe" not in importer.IMPORT_CELLS
    out = CliRunner().invoke(main, ["train", "--help"]).output
    assert "paper|code|code_v2" in out
    out = CliRunner().invoke(main, ["calibrate", "--help"]).output
    assert "tpe" in out and "frozen" in out
