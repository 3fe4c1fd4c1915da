"""What a registered model ships: the pipi modules its code imports, and nothing else.

:func:`module_closure` follows the ``pipi`` imports of a file (module-level and inside
functions, and every package ``__init__`` on the way) through the source, without importing
anything; :func:`copy_closure` writes those files into a fresh ``pipi/`` folder, the model's
``code_paths``. :func:`third_party` names the other top-level packages they import (what the
model's requirements must hold).
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "copy_closure", "module_closure", "third_party"]

#: The folder that holds the ``pipi`` package.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def _file_of(module: str) -> Path | None:
    base = PACKAGE_ROOT.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(pipi modules, other top-level packages) that ``path`` imports anywhere."""
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n.split(".")[0] == "pipi":
                if _file_of(n):
                    ours.add(n)
            else:
                others.add(n.split(".")[0])
    return ours, others


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def module_closure(entry: Path) -> dict[str, Path]:
    """Every pipi module (name -> file) that importing ``entry`` can import."""
    todo, seen = sorted(_imports(entry)[0]), {}
    while todo:
        name = todo.pop()
        for m in _with_parents(name):
            if m not in seen and (f := _file_of(m)):
                seen[m] = f
                todo.extend(_imports(f)[0])
    return dict(sorted(seen.items()))


def third_party(entry: Path) -> set[str]:
    """Top-level packages other than pipi and the standard library that ``entry`` and its
    closure import."""
    names = set(_imports(entry)[1])
    for f in module_closure(entry).values():
        names |= _imports(f)[1]
    return {n for n in names if n not in sys.stdlib_module_names and n != "__future__"}


def copy_closure(entry: Path, dst: Path) -> Path:
    """Copy the closure of ``entry`` into ``dst/pipi`` (package data beside a module, such as
    JSON files, is not needed by inference and is left out); returns ``dst/pipi``."""
    for f in module_closure(entry).values():
        rel = f.relative_to(PACKAGE_ROOT)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dst / rel)
    return dst / "pipi"
