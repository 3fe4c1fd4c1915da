"""The prior parameters a run uses: a ``prior_params`` option (a ``prior_params.json`` file or
the id of a ``calibrate`` run) resolved to alpha and lambda_eff, the one resolution every entry
point that accepts ``-P prior_params=`` uses."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from pipi import tracking
from pipi.calibration.objective import PriorParams, parse_prior_params
from pipi.errors import ConfigError

__all__ = ["RUN_ID", "load_prior_params"]

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def load_prior_params(spec: str) -> PriorParams:
    """Resolve a ``prior_params`` option: a ``prior_params.json`` file or a calibrate run id.

    The one resolution used by every entry point that accepts ``-P prior_params=``.
    """
    spec = str(spec).strip()
    path = Path(spec).expanduser()
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"prior_params={spec}: cannot read JSON ({exc})") from None
        return parse_prior_params(doc, spec)
    if RUN_ID.match(spec):
        run = tracking.get_run(spec)
        if run.data.tags.get(tracking.TAG_ENTRY_POINT) != "calibrate":
            raise ConfigError(f"prior_params={spec}: run {spec} is not a calibrate run "
                              f"(entry point {run.data.tags.get(tracking.TAG_ENTRY_POINT)!r})")
        work = Path(tempfile.mkdtemp(prefix="pipi-prior-params-"))
        try:
            got = tracking.download_artifact(spec, "prior_params.json", work)
            return parse_prior_params(json.loads(got.read_text()), f"run {spec}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise ConfigError(f"prior_params={spec}: neither a file nor a calibrate run id (32 hex "
                      "characters); pass the prior_params.json that calibrate logged or the "
                      "calibrate run's id")
