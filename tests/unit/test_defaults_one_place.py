"""Each default is decided in one place (issue 21, part 3): alpha is ``pipi.prior.DEFAULT_ALPHA``
(the MLproject parameters and the click options say the same number), and which synthetic
release a profile trains on is ``pipi.config.synthetic_preset``."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from pipi.cli import ENTRY_POINTS
from pipi.config import make_config, synthetic_preset
from pipi.prior import DEFAULT_ALPHA, PriorConfig

ROOT = Path(__file__).resolve().parents[2]


def test_alpha_default_is_the_prior_modules_everywhere():
    spec = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]
    declared = {name: ep["parameters"]["alpha"]["default"] for name, ep in spec.items()
                if "alpha" in ep.get("parameters", {})}
    # import: auto = a published checkpoint's args.physics_alpha, else make_config's default
    auto = {name for name, v in declared.items() if v == "auto"}
    assert auto <= {"import"}, auto
    declared = {k: v for k, v in declared.items() if k not in auto}
    assert declared and set(declared.values()) == {DEFAULT_ALPHA}, declared
    for name in declared:
        opt = next(p for p in ENTRY_POINTS[name].params if p.name == "alpha")
        assert float(opt.default) == DEFAULT_ALPHA, (name, opt.default)
    opt = next(p for p in ENTRY_POINTS["import"].params if p.name == "alpha")
    assert opt.type.convert(opt.default, None, None) is None  # not set: make_config decides
    assert PriorConfig().alpha == DEFAULT_ALPHA == make_config(cell="pi").prior.alpha


def test_only_config_maps_a_profile_to_a_synthetic_preset():
    """No module but pipi/config.py compares a value with "smoke" (the profile -> data rule)."""
    assert (synthetic_preset("smoke"), synthetic_preset("demo"), synthetic_preset("paper"),
            synthetic_preset("auto")) == ("tiny", "demo", "demo", "demo")
    offenders = []
    for path in sorted((ROOT / "pipi").rglob("*.py")):
        if path == ROOT / "pipi" / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "smoke"
                    for c in [node.left, *node.comparators]):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
