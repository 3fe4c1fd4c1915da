"""The README is an entrance and the docs are true: the two quick-start commands, every
documented `mlflow run` names a declared entry point and parameter (README and docs/), the
tests section gives both tiers, every relative link in README and docs/ resolves, and the
generated reference (docs/reference.md) is current."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml
from readme_text import code_block_after, commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    assert commands(code_block_after(README, "## Quick start")) == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_an_entrance():
    assert len(README.splitlines()) <= 200
    assert commands(code_block_after(README, "## Tests")) == ["make test-fast", "make test",
                                                              "make test-envs"]
    tour = commands(code_block_after(README, "## A tour"))
    declared = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]
    toured = {m.group(1) for c in tour if (m := re.match(r"mlflow run \. -e (\w+)", c))}
    assert toured == set(declared), set(declared) ^ toured   # one command per entry point


def test_every_documented_mlflow_run_names_a_declared_entry_point_and_parameter():
    spec = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]
    for page in [ROOT / "README.md", *DOCS]:
        text = page.read_text()
        for name, params in re.findall(r"mlflow run \. -e (\w+)((?: [^\n`]*)?)", text):
            assert name in spec, f"{page.name}: mlflow run . -e {name} is not declared"
            for p in re.findall(r"-P (\w+)=", params):
                assert p in spec[name].get("parameters", {}), f"{page.name} passes -P {p} to {name}"


def test_every_relative_link_resolves():
    broken = []
    for page in [ROOT / "README.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_generated_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "docs" / "reference.md").read_text() == gen.render(), (
        "docs/reference.md is not current: run python scripts/gen_reference.py")
