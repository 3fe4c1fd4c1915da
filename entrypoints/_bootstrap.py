"""Run the entry point under the project's ``.venv`` when the ``python`` on PATH lacks pipi.

MLproject commands start ``python`` from PATH; ``.venv/bin/mlflow run ...`` without an
activated venv would otherwise reach a system Python without pipi, torch or mlflow.
"""

import importlib.util
import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent.parent / ".venv"
if (importlib.util.find_spec("pipi") is None or importlib.util.find_spec("mlflow") is None) \
        and (VENV / "bin" / "python").is_file() and Path(sys.prefix).resolve() != VENV.resolve():
    os.execv(str(VENV / "bin" / "python"), [str(VENV / "bin" / "python"), *sys.argv])
