"""MLproject entry point `aggregate`: parses options and delegates to pipi (see pipi/cli.py)."""

from pipi.cli import ENTRY_POINTS

if __name__ == "__main__":
    ENTRY_POINTS["aggregate"](prog_name="aggregate")
