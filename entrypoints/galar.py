"""MLproject entry point `galar`: parses options and delegates to pipi (see pipi/cli.py)."""

from pipi.cli import ENTRY_POINTS

if __name__ == "__main__":
    ENTRY_POINTS["galar"](prog_name="galar")
