"""Progress bars where a person watches them: pipi's one door to tqdm.

A bar is drawn on a terminal (stderr is a TTY) and hidden elsewhere: written into a log file,
a SLURM output or ``mlflow run``'s captured output, tqdm's carriage-return updates are noise
(issue 38). ``PIPI_PROGRESS=1`` shows them anyway, ``PIPI_PROGRESS=0`` hides them on a terminal
too. Light: tqdm is imported when a bar is made (serving imports :mod:`pipi.data.cache`).
"""

from __future__ import annotations

import os
import sys

__all__ = ["PROGRESS_ENV", "shown", "tqdm"]

PROGRESS_ENV = "PIPI_PROGRESS"


def shown() -> bool:
    """Whether progress bars are drawn (see the module docstring)."""
    v = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):   # a replaced or closed stderr
        return False


def tqdm(*args, disable: bool | None = False, **kwargs):
    """``tqdm.auto.tqdm`` with ``disable`` also set where bars are not :func:`shown`."""
    from tqdm.auto import tqdm as _tqdm

    return _tqdm(*args, disable=bool(disable) or not shown(), **kwargs)
