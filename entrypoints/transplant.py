"""MLproject entry point `transplant`: parses options and delegates to pipi (see pipi/cli.py)."""

from pipi.cli import ENTRY_POINTS

if __name__ == "__main__":
    ENTRY_POINTS["transplant"](prog_name="transplant")
