"""`pipi synthesize kvasir|galar`: synthetic releases in the real on-disk formats."""

from __future__ import annotations

from pathlib import Path

import click

from pipi.cli.common import PipiGroup, with_options
from pipi.data.synth import synthesize_galar, synthesize_kvasir


@click.group(cls=PipiGroup)
def synthesize() -> None:
    """Write synthetic releases in the real on-disk formats."""


_synth_opts = [
    click.option("--out", type=click.Path(path_type=Path), required=True),
    click.option("--preset", type=click.Choice(["tiny", "demo"]), default="tiny",
                 show_default=True),
    click.option("--videos", type=int, default=None, help="Override the preset's video count."),
    click.option("--frames-per-video", type=int, default=None),
    click.option("--size", type=int, default=None, help="Frame side in pixels."),
    click.option("--seed", type=int, default=0, show_default=True),
]


@synthesize.command("kvasir")
@with_options(_synth_opts)
def synthesize_kvasir_cmd(out, preset, videos, frames_per_video, size, seed):
    """A Kvasir-Capsule-format release (labelled_images/ + metadata.csv)."""
    synthesize_kvasir(out, preset=preset, videos=videos, frames_per_video=frames_per_video,
                      size=size, seed=seed)
    click.echo(f"wrote {out}")


@synthesize.command("galar")
@with_options(_synth_opts)
def synthesize_galar_cmd(out, preset, videos, frames_per_video, size, seed):
    """A Galar-format release (metadata.csv, Labels/, Frames/)."""
    synthesize_galar(out, preset=preset, videos=videos, frames_per_video=frames_per_video,
                     size=size, seed=seed)
    click.echo(f"wrote {out}")
