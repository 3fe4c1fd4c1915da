"""pipi: training-time optical priors for wireless capsule endoscopy, on MLflow.

:func:`lazy_face` makes a package face that imports its names on first use (PEP 562, as
MLflow's ``LazyLoader`` and SciPy's ``lazy_loader`` do): ``import pipi.tracking`` costs its
table of names, ``tracking.start_run`` the one submodule that defines it (issue 39's light
doors). It lives in the package's own ``__init__``, which every face is below."""

import importlib
import os
import sys
from collections.abc import Callable, Mapping

# OpenMP threads that spin while waiting turn a busy 2-core machine (a tracking server, a
# DataLoader, another job) into a 10-20x slowdown of CPU training; passive waiting costs
# nothing measurable when the machine is quiet. Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"


def lazy_face(package: str, where: Mapping[str, str], *, submodules: bool = False
              ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``where`` (name -> submodule) is
    imported from its submodule on first use and cached in the package; with ``submodules``,
    any other name is tried as a submodule (``tracking.server``). A submodule that fails to
    import for another reason (a missing dependency) raises that error, not AttributeError."""

    def __getattr__(name: str) -> object:
        mod = where.get(name)
        if mod is None:
            if submodules:
                try:
                    return importlib.import_module(f"{package}.{name}")
                except ModuleNotFoundError as exc:
                    if exc.name != f"{package}.{name}":
                        raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
