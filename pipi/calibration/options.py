"""The calibration's choices, without torch or Optuna: what ``pipi calibrate --help`` lists
(:mod:`pipi.calibration.objective`, ``.study`` and ``.trials`` use and re-export them)."""

from __future__ import annotations

#: frozen: recompute the prior of a trained run; train: each trial trains a pi run.
CALIBRATE_MODES = ("frozen", "train")
SAMPLERS = ("tpe", "gp", "grid")
PRUNERS = ("median", "none")
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")
#: The hidden option of ``calibrate`` a SLURM task runs its worker spec file with.
WORKER_SPEC_OPTION = "--worker-spec"
