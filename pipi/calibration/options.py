"""The calibration's choices, without torch or Optuna: what ``pipi calibrate --help`` lists
(:mod:`pipi.calibration.objective`, ``.study`` and ``.trials`` use and re-export them)."""

from __future__ import annotations

from pipi.errors import ConfigError

#: frozen: recompute the prior of a trained run; train: each trial trains a pi run.
CALIBRATE_MODES = ("frozen", "train")
SAMPLERS = ("tpe", "gp", "grid")
PRUNERS = ("median", "none")
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")
#: The hidden option of ``calibrate`` a SLURM task runs its worker spec file with.
WORKER_SPEC_OPTION = "--worker-spec"
TARGET_KVASIR = "kvasir-val"
TARGET_GALAR = "galar:"


def parse_target(target: str) -> tuple[str, str | None]:
    """``kvasir-val`` -> ("kvasir-val", None); ``galar:<system>`` -> ("galar", system)."""
    t = (target or "").strip()
    if t == TARGET_KVASIR:
        return TARGET_KVASIR, None
    if t.startswith(TARGET_GALAR) and t[len(TARGET_GALAR):].strip():
        return "galar", t[len(TARGET_GALAR):].strip()
    raise ConfigError(f"target={target!r}: use kvasir-val or galar:<capsule system> "
                      "(e.g. galar:PillCam SB3)")
