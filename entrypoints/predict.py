"""MLproject entry point `predict`: parses options and delegates to pipi (see pipi/cli/)."""

import _bootstrap  # noqa: F401  (re-runs under the project's .venv if this python lacks pipi)
from pipi.cli import ENTRY_POINTS

if __name__ == "__main__":
    ENTRY_POINTS["predict"](prog_name="predict")
