"""The layout rules: imports point down, no cycles, mlflow only in pipi/tracking, small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "pipi"
#: Rank of each layer (0 = top); a module may import its own rank or any rank below it.
#: Everything else (classes, cells, config, prior, data/, models/, training, tracking/,
#: stats/, ...) is the library, the bottom rank.
LAYERS = {"cli": 0, "workflows": 1, "sweeps": 2, "evaluate": 2, "report": 2, "analysis": 2}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(pipi modules imported at module level, pipi imports inside functions)."""
    tree = ast.parse(path.read_text())
    top, inner = set(), []

    def targets(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names if a.name.startswith("pipi")]
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipi"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            return [n if n in modules else node.module for n in names]
        return []

    for node in tree.body:
        top.update(targets(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                inner += targets(sub)
    return top, inner


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS[parts[1]]
    return 3  # library


def test_no_import_cycles_and_imports_point_down():
    modules = _modules()
    graph = {m: _imports(p, modules)[0] for m, p in modules.items()}
    for m, deps in graph.items():
        for d in deps:
            if d == "pipi":
                continue
            assert _layer(m) <= _layer(d), f"{m} imports {d}, a layer above it"
    seen, stack = {}, []

    def visit(m):
        seen[m] = "open"
        stack.append(m)
        for d in graph.get(m, ()):
            d = d if d in graph else d.rsplit(".", 1)[0]
            if seen.get(d) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d in graph and d not in seen:
                visit(d)
        stack.pop()
        seen[m] = "done"

    for m in graph:
        if m not in seen:
            visit(m)


def test_no_pipi_imports_inside_functions():
    modules = _modules()
    offenders = {m: inner for m, p in modules.items() if (inner := _imports(p, modules)[1])}
    assert not offenders, offenders


def test_mlflow_only_in_tracking_and_modules_small():
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith("tracking/"):
            assert "import mlflow" not in text and "from mlflow" not in text, rel
        assert text.count("\n") <= 600, f"{rel} has {text.count(chr(10))} lines (max 600)"
