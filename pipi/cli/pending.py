"""Entry points whose issues have not landed: declared options, a one-line exit."""

from __future__ import annotations

import click

from pipi.cli.common import PipiCommand
from pipi.errors import NotBuiltYetError


def pending(name: str, issue: str, *options) -> click.Command:
    @click.command(name, cls=PipiCommand)
    def cmd(**_kw):
        raise NotBuiltYetError(f"entry point '{name}' is not built yet ({issue})")

    for o in reversed(options):
        cmd = o(cmd)
    cmd.help = f"Not built yet ({issue})."
    return cmd


