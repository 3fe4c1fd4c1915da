"""Find pipi for an entry point, whichever environment ``mlflow run`` started it in.

* MLflow's own environment (``--env-manager virtualenv``, built from python_env.yaml): it holds
  pipi's requirements but not pipi, so the project folder this file is in goes first on the
  import path, here and (``PYTHONPATH``) in the processes the entry point starts: the
  equivalent of ``pip install -e .`` that keeps one built environment valid for every clone.
* ``--env-manager local`` with a ``python`` on PATH that lacks pipi or mlflow (``.venv/bin/mlflow
  run ...`` without an activated venv would reach a system Python): re-run under the project's
  ``.venv``.
"""

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
if importlib.util.find_spec("pipi") is None and importlib.util.find_spec("mlflow") is not None \
        and (ROOT / "pipi" / "__init__.py").is_file():
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
elif (importlib.util.find_spec("pipi") is None or importlib.util.find_spec("mlflow") is None) \
        and (VENV / "bin" / "python").is_file() and Path(sys.prefix).resolve() != VENV.resolve():
    os.execv(str(VENV / "bin" / "python"), [str(VENV / "bin" / "python"), *sys.argv])
