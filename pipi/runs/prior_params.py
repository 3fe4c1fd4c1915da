"""The prior parameters a run uses: a ``prior_params`` option (a ``prior_params.json`` file or
the id of a ``calibrate`` run) resolved to alpha and lambda_eff, the one resolution every entry
point that accepts ``-P prior_params=`` uses (``train`` and ``galar``), and the tags that record
on the run where the prior came from."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipi import tracking
from pipi.calibration.objective import PriorParams, parse_prior_params
from pipi.config import TrainConfig
from pipi.errors import ConfigError
from pipi.prior import DEFAULT_ALPHA

__all__ = ["RUN_ID", "CalibratedPrior", "check_prior_params", "load_prior_params",
           "prior_tags", "resolve_prior"]

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class CalibratedPrior:
    """A resolved ``prior_params`` option: the prior and the tags naming where it came from."""

    params: PriorParams
    tags: Mapping[str, str] = field(default_factory=dict)

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` with this prior (lambda_eff converted at ``cfg.image_size``)."""
        return self.params.apply(cfg)


def prior_tags(doc: Mapping, source: str, *, run_id: str = "") -> dict[str, str]:
    """The tags of a run that uses the prior of ``doc`` (a ``prior_params.json`` document):
    ``pipi.prior_params`` (the file, or "run <id>") and ``pipi.prior_params_run``, the
    calibrate run that fitted it (``run_id`` when given as one, else the document's own
    ``calibrate_run_id``; left out when neither names one)."""
    run = run_id or str(doc.get("calibrate_run_id") or "")
    return {tracking.tags.TAG_PRIOR_PARAMS: source,
    **({tracking.tags.TAG_PRIOR_PARAMS_RUN: run} if run else {})}


def check_prior_params(spec: str, overrides: Mapping | None = None) -> None:
    """Refuse a second source of the prior: ``prior_params`` with ``alpha`` or ``lambda_eff``."""
    given = {k: v for k, v in (overrides or {}).items()
             if (k == "alpha" and v not in (None, DEFAULT_ALPHA))
             or (k == "lambda_eff" and v is not None)}
    if spec and given:
        raise ConfigError(f"prior_params={spec}: pass either prior_params or "
                          f"{' and '.join(sorted(given))}, not both")


def resolve_prior(spec: str) -> CalibratedPrior:
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
        return CalibratedPrior(parse_prior_params(doc, spec), prior_tags(doc, spec))
    if RUN_ID.match(spec):
        run = tracking.get_run(spec)
        if run.tags.get(tracking.tags.TAG_ENTRY_POINT) != "calibrate":
            raise ConfigError(f"prior_params={spec}: run {spec} is not a calibrate run "
                              f"(entry point {run.tags.get(tracking.tags.TAG_ENTRY_POINT)!r})")
        with tracking.downloaded(spec, "prior_params.json", prefix="pipi-prior-params-") as got:
            doc = json.loads(got.read_text())
        source = f"run {spec}"
        return CalibratedPrior(parse_prior_params(doc, source),
                               prior_tags(doc, source, run_id=spec))
    raise ConfigError(f"prior_params={spec}: neither a file nor a calibrate run id (32 hex "
                      "characters); pass the prior_params.json that calibrate logged or the "
                      "calibrate run's id")


def load_prior_params(spec: str) -> PriorParams:
    """The alpha and lambda_eff of a ``prior_params`` option (:func:`resolve_prior`)."""
    return resolve_prior(spec).params
