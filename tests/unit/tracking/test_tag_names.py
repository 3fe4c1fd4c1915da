"""Every pipi tag name lives in pipi/tracking/tags.py: no other module writes a "pipi.*" literal.

A tag name typed inline in a workflow drifts from the one a reader looks up (aggregate,
promote, the UI); the scan below refuses it. What else may start with ``pipi.`` is named:
a pipi module (``resources.files("pipi.data")``, a logger) or a module-level ``*_FORMAT`` /
``*_SALT`` constant (a document format, a hash salt), none of them a tag.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pipi.tracking import tags

PKG = Path(__file__).resolve().parents[3] / "pipi"
#: where the tag names are defined
EXEMPT = ("tracking/",)
PIPI_NAME = re.compile(r"^pipi\.[A-Za-z_]")
NAMED_CONSTANT = re.compile(r"_(FORMAT|SALT)$")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _named_constants(tree: ast.Module) -> set[int]:
    """String constants assigned at module level to a ``*_FORMAT`` or ``*_SALT`` name."""
    out = set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and all(isinstance(t, ast.Name) and NAMED_CONSTANT.search(t.id)
                        for t in node.targets)):
            out.add(id(node.value))
    return out


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PKG.parent / rel).with_suffix(".py").is_file() or (PKG.parent / rel).is_dir()


def pipi_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal (f-strings' text included) that starts with
    ``pipi.`` and is neither a docstring, a pipi module's name nor a named constant."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree) | _named_constants(tree)
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip and PIPI_NAME.match(node.value)
                and not _is_module(node.value)):
            out.append((node.lineno, node.value))
    return out


def test_no_tag_literal_outside_tracking():
    offenders = [f"pipi/{p.relative_to(PKG).as_posix()}:{line}: {text!r}"
                 for p in sorted(PKG.rglob("*.py"))
                 if not p.relative_to(PKG).as_posix().startswith(EXEMPT)
                 for line, text in pipi_literals(p)]
    assert not offenders, ("tag names belong in pipi/tracking/tags.py (TAG_* constants):\n"
                           + "\n".join(offenders))


def test_the_scan_finds_a_planted_tag(tmp_path):
    """The scan sees an inline tag (plain and f-string), not the exceptions it allows."""
    planted = tmp_path / "planted.py"
    planted.write_text('"""pipi.docstring is prose."""\n'
                       'DOC_FORMAT = "pipi.document"\n'
                       'import logging\nlog = logging.getLogger("pipi.data.synth")\n'
                       'def f(k):\n'
                       '    return {"pipi.new_tag": 1, f"pipi.other.{k}": 2}\n')
    assert pipi_literals(planted) == [(6, "pipi.new_tag"), (6, "pipi.other.")]


def test_tag_values_are_unique_and_pipi_names():
    names = {k: v for k, v in vars(tags).items() if k.startswith("TAG_")}
    assert all(v.startswith("pipi.") for v in names.values()), names
    dupes = sorted(v for v in set(names.values()) if list(names.values()).count(v) > 1)
    assert not dupes, dupes


def test_logged_tag_names_do_not_change():
    """Runs logged before stay findable: these names are on servers already."""
    assert (tags.TAG_PRIOR_PARAMS, tags.TAG_GALAR_FOLD, tags.TAG_SWEEP_ROLE,
            tags.TAG_DONOR_RUN, tags.TAG_PROMOTE_DECISION, tags.TAG_OPTUNA_STUDY,
            tags.TAG_TRIAL_NUMBER, tags.TAG_HEARTBEAT, tags.TAG_EVALUABLE_CLASSES) == (
        "pipi.prior_params", "pipi.galar_fold", "pipi.sweep_role", "pipi.donor_run_id",
        "pipi.promote.decision", "pipi.optuna_study", "pipi.trial_number", "pipi.heartbeat",
        "pipi.evaluable_classes")
