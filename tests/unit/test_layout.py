"""The layout rules: imports point down, no cycles, mlflow only in pipi/tracking (its imports
and its data model: no ``.data.tags`` / ``.info.status`` reads of a run outside it), small
modules."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "pipi"
#: The layers of DESIGN.md ("Layout"), from the top down; a module may import its own layer or
#: any layer below it. A layer is a list of module prefixes under ``pipi``. The library is split
#: into its ranks (issue 32): galkva > tracking > probes, calibration > training > serving (what
#: a registered model runs: training builds it) > config > models > data > prior, cells,
#: runtime, predictions > options (their names and checks, torch-free) > stats > classes,
#: errors, paths. Every module must have a rank
#: (:func:`test_every_module_has_a_rank`): a new package is placed here on purpose.
ORDER: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("workflows",),
    ("sweeps",),
    ("runs",),
    ("report",),
    ("analysis",),
    ("galkva",),
    ("tracking",),
    ("probes", "calibration"),
    ("training",),
    ("serving",),
    ("config",),
    ("models",),
    ("data",),
    ("prior", "cells", "runtime", "predictions"),
    ("options",),
    ("stats",),
    ("classes", "errors", "paths"),
)
#: Packages whose modules may not import each other (``common`` and ``__init__`` excepted),
#: and the exceptions: none (issue 39: training a cell is a service of the library,
#: ``pipi.runs.training``, that ``train``, ``ablate`` and ``calibrate`` call alike).
ISOLATED = ("workflows", "cli")
ALLOWED_SIDEWAYS: set[tuple[str, str]] = set()
#: At most this many modules directly at pipi/*.py (``__init__`` not counted).
MAX_TOP_LEVEL = 8


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text())


def _tree(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per content (the checks below walk every module of
    pipi several times; parsing them each time was most of this file's run time)."""
    st = path.stat()
    return _parsed(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _import_statements(path: Path, mtime_ns: int, size: int) -> tuple[tuple, tuple]:
    """(module-level, inside-function) pipi imports of ``path`` as (module, names) pairs:
    names are the ``from`` names (``module`` None for ``import a.b``), one walk of the tree."""
    top, inner = [], []

    def pairs(node) -> list[tuple]:
        if isinstance(node, ast.Import):
            return [(None, (a.name,)) for a in node.names if a.name.startswith("pipi")]
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipi"):
            return [(node.module, tuple(a.name for a in node.names))]
        return []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            (inner if in_function else top if node is tree else []).extend(pairs(child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    tree = _tree(path)
    visit(tree, False)
    return tuple(top), tuple(inner)


def _imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(pipi modules imported at module level, pipi imports inside functions)."""
    st = path.stat()
    top, inner = _import_statements(path, st.st_mtime_ns, st.st_size)

    def targets(module, names) -> list[str]:
        if module is None:
            return list(names)
        return [n if n in modules else module for n in (f"{module}.{a}" for a in names)]

    return ({t for m, n in top for t in targets(m, n)},
            [t for m, n in inner for t in targets(m, n)])


def _layer(module: str, order=None) -> int | None:
    """Rank of ``module`` in ``order`` (:data:`ORDER`; 0 = top); the longest matching prefix
    wins; None for a module no layer names."""
    rel = module.removeprefix("pipi").removeprefix(".")
    best = None
    for rank, layer in enumerate(order or ORDER):
        for prefix in layer:
            if (rel == prefix or rel.startswith(prefix + ".")) and (
                    best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return best[0] if best else None


def _planted(tmp_path: Path, sources: dict[str, str]) -> dict[str, Path]:
    """pipi's modules plus planted ones (module name -> source), written under ``tmp_path``."""
    out = _modules()
    for name, text in sources.items():
        path = tmp_path / f"{name.replace('.', '_')}.py"
        path.write_text(text)
        out[name] = path
    return out


def upward_imports(modules: dict[str, Path]) -> list[str]:
    """Every module-level import that points to a higher layer, as 'a imports b'."""
    out = []
    for m, p in sorted(modules.items()):
        for d in sorted(_imports(p, modules)[0]):
            if d != "pipi" and m != "pipi" and _layer(d) < _layer(m):
                out.append(f"{m} imports {d}, a layer above it")
    return out


def sideways_imports(modules: dict[str, Path]) -> list[str]:
    out = []
    for m, p in sorted(modules.items()):
        parts = m.split(".")
        if len(parts) < 3 or parts[1] not in ISOLATED:
            continue
        for d in sorted(_imports(p, modules)[0]):
            dp = d.split(".")
            if (len(dp) >= 3 and dp[1] == parts[1] and dp[2] != parts[2]
                    and dp[2] not in ("common", "__init__") and (m, d) not in ALLOWED_SIDEWAYS):
                out.append(f"{m} imports {d}, another {parts[1]} module")
    return out


def test_layer_order_matches_design():
    """Spot checks of the rank function against DESIGN's picture."""
    assert _layer("pipi.cli.train") < _layer("pipi.workflows.ablate") < _layer("pipi.sweeps.plan")
    assert _layer("pipi.sweeps.plan") < _layer("pipi.runs.training")
    assert _layer("pipi.sweeps.plan") < _layer("pipi.runs.evaluate") < _layer("pipi.report.tables")
    assert _layer("pipi.report.tables") < _layer("pipi.analysis.compare") < _layer("pipi.tracking.runs")
    assert _layer("pipi.galkva.score") < _layer("pipi.tracking.runs") < _layer("pipi.probes.tta")
    assert _layer("pipi.probes.tta") == _layer("pipi.calibration.study") < _layer("pipi.training.frames")
    assert _layer("pipi.training.frames") < _layer("pipi.serving.frame_model") < _layer("pipi.config")
    assert _layer("pipi.config") < _layer("pipi.models.heads") < _layer("pipi.data.cache")
    assert _layer("pipi.data.staging.kvasir") < _layer("pipi.prior") == _layer("pipi.cells")
    assert _layer("pipi.prior") < _layer("pipi.options.prior") < _layer("pipi.stats.auc")
    assert _layer("pipi.stats.auc") < _layer("pipi.classes")


def test_every_module_has_a_rank():
    """The strict order names every module (the package's own ``__init__`` aside)."""
    unranked = [m for m in _modules() if m != "pipi" and _layer(m) is None]
    assert not unranked, f"give these a layer in ORDER: {unranked}"


def test_the_library_ranks_are_strict(tmp_path):
    """Planted imports across the library's ranks are caught: the data room reaching up into
    models, serving into training; the reverse directions are allowed."""
    modules = _planted(tmp_path, {
        "pipi.data.staging.up": "from pipi.models.heads import make_head\n",
        "pipi.models.down": "from pipi.data.cache import build_cache\n",
        "pipi.serving.srv": "from pipi.training.frames import run_frame_cell\n"})
    found = [x for x in upward_imports(modules)
             if x.startswith(("pipi.data.staging.up", "pipi.models.down", "pipi.serving.srv"))]
    assert found == ["pipi.data.staging.up imports pipi.models.heads, a layer above it",
                     "pipi.serving.srv imports pipi.training.frames, a layer above it"]


def test_an_upward_import_is_caught(tmp_path):
    """A planted upward import (the library importing a workflow) fails the check."""
    planted = tmp_path / "planted.py"
    planted.write_text("from pipi.runs.training import train\n")
    modules = {**_modules(), "pipi.data.planted": planted}
    assert upward_imports(modules) == [
        "pipi.data.planted imports pipi.runs.training, a layer above it"]
    sideways = tmp_path / "sideways.py"
    sideways.write_text("from pipi.workflows.aggregate import run_aggregate\n")
    modules = {**_modules(), "pipi.workflows.planted": sideways}
    assert sideways_imports(modules) == [
        "pipi.workflows.planted imports pipi.workflows.aggregate, another workflows module"]


def test_no_upward_or_sideways_imports():
    modules = _modules()
    assert not upward_imports(modules), "\n".join(upward_imports(modules))
    assert not sideways_imports(modules), "\n".join(sideways_imports(modules))


def test_few_modules_at_the_top_level():
    top = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules at pipi/*.py: {top}"


def test_no_import_cycles():
    modules = _modules()
    graph = {m: _imports(p, modules)[0] for m, p in modules.items()}
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


#: Cross-module imports of private names still allowed, as (importer, module, name): none.
PRIVATE_IMPORTS_ALLOWED: set[tuple[str, str, str]] = set()


def _source_module(node: ast.ImportFrom, importer: str, path: Path) -> str:
    """The absolute module an ``import from`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = importer if path.name == "__init__.py" else importer.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def private_imports(modules: dict[str, Path]) -> list[str]:
    """Every ``from pipi.x import _y`` in a module other than ``pipi.x`` (dunders excepted)."""
    out = []
    for m, p in sorted(modules.items()):
        for node in ast.walk(_tree(p)):
            if not isinstance(node, ast.ImportFrom):
                continue
            src = _source_module(node, m, p)
            if src != "pipi" and not src.startswith("pipi.") or src == m:
                continue
            for a in node.names:
                private = a.name.startswith("_") and not a.name.endswith("__")
                if private and (m, src, a.name) not in PRIVATE_IMPORTS_ALLOWED:
                    out.append(f"{m} imports {a.name} from {src}")
    return out


def test_a_cross_module_private_import_is_caught(tmp_path):
    """A planted private import (absolute or relative) fails the check; dunders and a
    module's own names do not."""
    planted = tmp_path / "planted.py"
    planted.write_text("from pipi.paths import _pid_alive, staging_dir\n"
                       "from pipi import __version__\n"
                       "from .common import _hidden\n")
    modules = {**_modules(), "pipi.data.staging.planted": planted}
    assert private_imports(modules) == [
        "pipi.data.staging.planted imports _pid_alive from pipi.paths",
        "pipi.data.staging.planted imports _hidden from pipi.data.staging.common"]
    own = tmp_path / "own.py"
    own.write_text("from pipi.data.staging.own import _mine\n")
    assert private_imports({**_modules(), "pipi.data.staging.own": own}) == []


def test_no_private_names_imported_across_modules():
    found = private_imports(_modules())
    assert not found, "\n".join(found)


#: What MLflow's ``Run`` carries under ``.data`` and ``.info``: reading these outside
#: pipi/tracking means an MLflow object crossed the wall (tracking hands out ``RunRecord``s).
RUN_DATA_FIELDS = frozenset({"tags", "params", "metrics"})
RUN_INFO_FIELDS = frozenset({"run_id", "run_uuid", "run_name", "experiment_id", "status",
                             "lifecycle_stage", "start_time", "end_time", "artifact_uri",
                             "user_id"})


def run_object_reads(source: str) -> list[str]:
    """Every ``X.data.tags|params|metrics`` and ``X.info.<run field>`` in ``source``, as
    'line N: X.data.tags' (other ``.data`` / ``.info``, e.g. a frame's, are not run reads)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
            continue
        middle, field = node.value.attr, node.attr
        if ((middle == "data" and field in RUN_DATA_FIELDS)
                or (middle == "info" and field in RUN_INFO_FIELDS)):
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_a_run_object_read_is_caught():
    """Planted reads of an MLflow run's data model are caught; a frame's ``.data`` is not."""
    planted = ("run = tracking.get_run(rid)\n"
               "t = run.data.tags\n"
               "ok = tracking.get_run(rid).info.status == 'FINISHED'\n"
               "m = found.data.metrics.get('test/macro_auc')\n"
               "x = arr.data.shape\n"           # numpy's buffer: not a run
               "y = log.info.__name__\n"        # not a run field
               "z = sheet.data['tags']\n")      # a subscript, not the run's tags
    assert run_object_reads(planted) == [
        "line 2: run.data.tags", "line 3: tracking.get_run(rid).info.status",
        "line 4: found.data.metrics"]


def test_no_run_object_reads_outside_tracking():
    """The tracking wall: code outside pipi/tracking reads RunRecords, never a ``Run``."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith("tracking/") and (reads := run_object_reads(path.read_text())):
            found[rel] = reads
    assert not found, found


# --------------------------------------------------------------------------- light doors
#: What a door may not load (issue 39): the command line's help, the statistics over a table
#: and the report read names and numbers, not models or a tracking store.
HEAVY = ("torch", "torchvision", "mlflow")
#: The doors that open light: their module-level import closure holds none of :data:`HEAVY`.
LIGHT_DOORS = ("pipi.cli", "pipi.tracking", "pipi.tracking.tags", "pipi.tracking.records",
               "pipi.analysis", "pipi.report", "pipi.models", "pipi.models.specs",
               "pipi.cells", "pipi.classes", "pipi.paths", "pipi.config",
               "pipi.options.prior", "pipi.options.runtime",
               # every command's module: `pipi <command> --help` loads it and nothing heavy
               *(f"pipi.cli.{m}" for m in sorted(p.stem for p in (PKG / "cli").glob("*.py")
                                                 if p.stem != "__init__")))


@functools.cache
def _heavy_statements(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The :data:`HEAVY` packages ``path`` imports at module level (not under ``if``/``try``,
    not in a function: those run when called, as a lazy face's are)."""
    out = []
    for node in _tree(path).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        out += [n for n in names if n.split(".")[0] in HEAVY]
    return tuple(out)


def heavy_doors(modules: dict[str, Path], doors=LIGHT_DOORS) -> list[str]:
    """Each door whose module-level imports reach a :data:`HEAVY` package, with the chain
    (importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first)."""
    def with_parents(m: str) -> list[str]:
        parts = m.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

    out = []
    for door in doors:
        seen, queue = {door: [door]}, [door]
        for p in with_parents(door)[:-1]:
            seen.setdefault(p, [p, door])
            queue.append(p)
        found = None
        while queue and found is None:
            m = queue.pop(0)
            path = modules.get(m)
            if path is None:
                continue
            st = path.stat()
            heavy = _heavy_statements(path, st.st_mtime_ns, st.st_size)
            if heavy:
                found = f"{door} loads {heavy[0]}: " + " -> ".join(seen[m])
                break
            for d in sorted(_imports(path, modules)[0]):
                for q in with_parents(d):
                    if q not in seen:
                        seen[q] = [*seen[m], q]
                        queue.append(q)
        if found:
            out.append(found)
    return out


def test_the_doors_open_light():
    """Issue 39: `pipi --help`, the tracking face, the statistics and the report load none of
    torch, torchvision, mlflow at import (their heavy parts load on first use)."""
    found = heavy_doors(_modules())
    assert not found, "\n".join(found)


def test_a_heavy_import_behind_a_door_is_caught(tmp_path):
    """Planted: a report module importing a module that imports torch at its top."""
    modules = _planted(tmp_path, {
        "pipi.report.heavy_part": "import numpy\nimport torch\n",
        "pipi.report.lazy_part": "def f():\n    import torch\n    return torch\n",
        "pipi.report.planted": "from pipi.report.heavy_part import x\n"
                               "from pipi.report.lazy_part import f\n"})
    assert heavy_doors(modules, doors=("pipi.report.planted", "pipi.report.lazy_part")) == [
        "pipi.report.planted loads torch: pipi.report.planted -> pipi.report.heavy_part"]


# --------------------------------------------------------------------------- hand-offs
#: The run hand-off variables pipi may not write into its own process environment (issue 39):
#: a callee gets the run, the tracking URI, the code version and the model prefix as
#: arguments (or, for the prefix, a context value: tracking.using_model_prefix).
HANDOFF_VARS = ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID",
                "PIPI_CODE_VERSION", "PIPI_MODEL_PREFIX", "CODE_VERSION_ENV", "MODEL_PREFIX_ENV")
#: None left: the run ``mlflow run`` made is remembered by the command
#: (tracking.remembering_launched_run), not written back after MLflow's ``end_run`` clears it.
HANDOFF_RESTORES: set[tuple[str, str]] = set()


def handoff_writes(modules: dict[str, Path]) -> list[str]:
    """``os.environ[NAME] = ...``, ``os.environ.setdefault(NAME, ...)`` and
    ``os.environ.update({NAME: ...})`` of a :data:`HANDOFF_VARS` name, as 'module writes NAME'."""
    def name_of(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        return None

    def is_environ(node) -> bool:
        return ast.unparse(node) in ("os.environ", "environ")

    out = []
    for m, path in sorted(modules.items()):
        for node in ast.walk(_tree(path)):
            names = []
            if isinstance(node, ast.Assign):
                names = [name_of(t.slice) for t in node.targets
                         if isinstance(t, ast.Subscript) and is_environ(t.value)]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and is_environ(node.func.value) and node.args):
                if node.func.attr == "setdefault":
                    names = [name_of(node.args[0])]
                elif node.func.attr == "update" and isinstance(node.args[0], ast.Dict):
                    names = [name_of(k) for k in node.args[0].keys if k is not None]
            out += [f"{m} writes {n}" for n in names
                    if n in HANDOFF_VARS and (m, n) not in HANDOFF_RESTORES]
    return out


def test_no_run_hand_off_goes_through_the_process_environment():
    found = handoff_writes(_modules())
    assert not found, "\n".join(found)


def test_a_planted_hand_off_write_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\nfrom pipi.tracking.permissions import MODEL_PREFIX_ENV\n"
                       "os.environ['MLFLOW_RUN_ID'] = 'r'\n"
                       "os.environ[MODEL_PREFIX_ENV] = 'lab'\n"
                       "os.environ.setdefault('MLFLOW_TRACKING_URI', 'x')\n"
                       "os.environ.update({'PIPI_CODE_VERSION': 'v', 'OTHER': '1'})\n"
                       "os.environ['OMP_NUM_THREADS'] = '1'\n")
    modules = {"pipi.workflows.planted": planted}
    assert handoff_writes(modules) == [
        "pipi.workflows.planted writes MLFLOW_RUN_ID",
        "pipi.workflows.planted writes MODEL_PREFIX_ENV",
        "pipi.workflows.planted writes MLFLOW_TRACKING_URI",
        "pipi.workflows.planted writes PIPI_CODE_VERSION"]


# --------------------------------------------------------------------------- the run as a value
#: MLflow's fluent functions that act on "the active run" unless ``run_id=`` names one.
FLUENT_ACTIVE = frozenset({
    "log_param", "log_params", "log_metric", "log_metrics", "log_artifact", "log_artifacts",
    "log_text", "log_dict", "log_figure", "log_image", "log_table", "log_input", "log_inputs",
    "set_tag", "set_tags", "delete_tag", "active_run", "last_active_run", "end_run",
    "get_artifact_uri"})
#: The adapter rooms that may act on the active run: the run's lifecycle (pipi_run starts and
#: ends it) and the model from code (MLflow logs it into the active run only; it checks the
#: active run is the one named). Everything else logs through a run handle (issue 39).
FLUENT_ROOMS = frozenset({"pipi.tracking.runs", "pipi.tracking.registry"})


def active_run_calls(modules: dict[str, Path]) -> list[str]:
    """``mlflow.<fluent>(...)`` without ``run_id=`` outside :data:`FLUENT_ROOMS`."""
    out = []
    for m, path in sorted(modules.items()):
        if m in FLUENT_ROOMS:
            continue
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func.value) == "mlflow"
                    and node.func.attr in FLUENT_ACTIVE
                    and not any(k.arg == "run_id" for k in node.keywords)):
                out.append(f"{m}:{node.lineno} mlflow.{node.func.attr} acts on the active run")
    return out


def test_only_the_run_lifecycle_acts_on_the_active_run():
    found = active_run_calls(_modules())
    assert not found, "\n".join(found)


def test_a_planted_active_run_call_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import mlflow\n"
                       "mlflow.log_metrics({'a': 1.0})\n"
                       "mlflow.log_metrics({'a': 1.0}, run_id='r')\n"
                       "mlflow.set_tag('k', 'v')\n"
                       "mlflow.get_run('r')\n")
    assert active_run_calls({"pipi.tracking.planted": planted}) == [
        "pipi.tracking.planted:2 mlflow.log_metrics acts on the active run",
        "pipi.tracking.planted:4 mlflow.set_tag acts on the active run"]
