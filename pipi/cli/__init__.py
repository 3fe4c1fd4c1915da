"""The ``pipi`` command line: one short module per entry point, options from the registries.

``pipi <name>`` exists for every MLproject entry point with the same options (the
``entrypoints/<name>.py`` scripts run ``ENTRY_POINTS[name]``), plus ``pipi synthesize`` and
``pipi stage kvasir`` for releases on disk, ``pipi export cv2024`` for a run's Capsule Vision
2024 prediction sheet, and the two servers ``pipi server`` (tracking) and ``pipi serve`` (a model).
"""

from __future__ import annotations

import click

from pipi.cli.ablate import ablate
from pipi.cli.aggregate import aggregate
from pipi.cli.calibrate import calibrate
from pipi.cli.common import CLI_ONLY_OPTIONS, PipiGroup, setup_logging
from pipi.cli.export import export
from pipi.cli.galar import galar
from pipi.cli.galkva import galkva
from pipi.cli.importer import import_
from pipi.cli.promote import promote
from pipi.cli.robustness import robustness
from pipi.cli.serve import serve
from pipi.cli.server import server
from pipi.cli.stage import stage
from pipi.cli.synthesize import synthesize
from pipi.cli.train import train
from pipi.cli.transplant import transplant


@click.group(cls=PipiGroup)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """pipi: training-time optical priors for capsule endoscopy, on MLflow."""
    setup_logging(verbose)


ENTRY_POINTS: dict[str, click.Command] = {
    "stage": stage, "train": train, "ablate": ablate, "transplant": transplant,
    "galar": galar, "calibrate": calibrate, "robustness": robustness, "aggregate": aggregate,
    "promote": promote, "import": import_,
}
for _cmd in (synthesize, galkva, server, serve, export, *ENTRY_POINTS.values()):
    main.add_command(_cmd)

__all__ = ["CLI_ONLY_OPTIONS", "ENTRY_POINTS", "main"]
