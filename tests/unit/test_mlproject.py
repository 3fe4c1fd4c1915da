"""MLproject <-> click parity, and conda.yaml <-> pyproject pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from pipi.cli import CLI_ONLY_OPTIONS, ENTRY_POINTS

ROOT = Path(__file__).resolve().parents[2]
SPEC = yaml.safe_load((ROOT / "MLproject").read_text())
EXPECTED = {"stage", "train", "ablate", "transplant", "galar", "calibrate", "robustness",
            "aggregate", "promote", "import"}


def test_every_entry_point_is_declared():
    assert set(SPEC["entry_points"]) == EXPECTED == set(ENTRY_POINTS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameters_match_command_and_click(name):
    ep = SPEC["entry_points"][name]
    cmd = ep["command"]
    assert cmd.startswith(f"python entrypoints/{name}.py"), cmd
    assert (ROOT / "entrypoints" / f"{name}.py").is_file()
    params = ep.get("parameters", {})
    in_cmd = set(re.findall(r"\{(\w+)\}", cmd))
    assert in_cmd == set(params), f"{name}: command uses {in_cmd}, declares {set(params)}"
    flags = {}
    for p in ENTRY_POINTS[name].params:
        for opt in p.opts:
            flags[opt] = p
    for pname in params:
        flag = "--" + pname.replace("_", "-")
        assert flag in flags, f"{name}: MLproject parameter {pname} has no click option {flag}"
        assert re.search(rf"{re.escape(flag)} \{{{pname}\}}", cmd), f"{flag} not fed {{{pname}}}"
    # and every click option is an MLproject parameter, except the documented CLI-only ones
    for p in ENTRY_POINTS[name].params:
        names = {o[2:].replace("-", "_") for o in p.opts if o.startswith("--")}
        if names & CLI_ONLY_OPTIONS:
            continue
        assert names & set(params), f"{name}: option {p.opts} is not an MLproject " \
            "parameter (declare it, or list it in pipi.cli.CLI_ONLY_OPTIONS)"


def test_parity_check_catches_an_undeclared_option(monkeypatch):
    """The reverse half fails for an option MLproject does not declare (hyphen or not)."""
    import click

    cmd = ENTRY_POINTS["aggregate"]
    for extra in ("--bogus", "--bogus-option"):
        monkeypatch.setattr(cmd, "params", [*cmd.params, click.Option([extra])])
        with pytest.raises(AssertionError, match="not an MLproject parameter"):
            test_parameters_match_command_and_click("aggregate")
        monkeypatch.undo()


def test_conda_pins_match_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    conda = yaml.safe_load((ROOT / "conda.yaml").read_text())
    pip_list = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict))
    assert set(deps) <= set(pip_list)


def test_every_entry_point_runs_its_own_cli_command():
    """Every MLproject entry point runs a `pipi` command of its own module, documented."""
    for name, cmd in ENTRY_POINTS.items():
        assert cmd.help and "not built" not in cmd.help.lower(), name
        assert cmd.callback.__module__.startswith("pipi.cli."), name
