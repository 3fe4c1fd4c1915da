"""MLproject <-> click parity, and python_env.yaml <-> conda.yaml <-> pyproject pins."""

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
            "aggregate", "promote", "import", "predict"}


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


def test_python_env_is_the_projects_environment_with_the_same_pins_and_python():
    """`mlflow run` builds its environment from python_env.yaml: an exact Python pyenv can find
    (the one conda.yaml names, inside pyproject's requires-python), pip/setuptools/wheel to
    build, and exactly pyproject's requirements (conda.yaml's pip list less its `-e .`: pipi
    itself comes from the project folder, entrypoints/_bootstrap.py)."""
    from mlflow.utils.environment import _PythonEnv
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = yaml.safe_load((ROOT / "MLproject").read_text())
    assert spec["python_env"] == "python_env.yaml" and "conda_env" not in spec
    env = _PythonEnv.from_yaml(str(ROOT / "python_env.yaml"))
    assert re.fullmatch(r"3\.\d+\.\d+", env.python), env.python    # pyenv needs an exact one
    assert env.python in SpecifierSet(project["requires-python"])
    assert set(env.build_dependencies) == {"pip", "setuptools", "wheel"}
    assert sorted(env.dependencies) == sorted(project["dependencies"])
    assert "torch===2.13.0" in env.dependencies                   # never a local +cpu torch
    conda = yaml.safe_load((ROOT / "conda.yaml").read_text())
    assert f"python={env.python}" in conda["dependencies"]
    pip_list = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict))
    assert sorted(set(pip_list) - {"-e ."}) == sorted(env.dependencies)


def test_an_entry_point_finds_pipi_in_an_environment_that_lacks_it(tmp_path):
    """MLflow's own environment holds the requirements, not pipi: the entry point imports the
    project's pipi and hands the path to the processes it starts."""
    import subprocess
    import sys

    # pipi hidden as in that environment (find_spec says "no such module"), mlflow importable
    code = (f"import sys; sys.modules['pipi'] = None; sys.path.insert(0, {str(ROOT / 'entrypoints')!r})\n"
            "import _bootstrap, os\n"
            "del sys.modules['pipi']\n"
            "import pipi\n"
            "print(pipi.__file__, os.environ['PYTHONPATH'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    file, path = r.stdout.split()[-2:]
    assert Path(file) == ROOT / "pipi" / "__init__.py" and path.split(":")[0] == str(ROOT)


def test_every_entry_point_runs_its_own_cli_command():
    """Every MLproject entry point runs a `pipi` command of its own module, documented."""
    for name, cmd in ENTRY_POINTS.items():
        assert cmd.help and "not built" not in cmd.help.lower(), name
        assert cmd.callback.__module__.startswith("pipi.cli."), name
