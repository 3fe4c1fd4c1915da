"""The checks of a ``train`` request against its data, before anything is staged, loaded or
started: the sources a recipe names, a test-only Galar folder, a sequence cell's named base
run (each a ConfigError in one line)."""

from __future__ import annotations

from pipi import tracking
from pipi.config import TrainConfig
from pipi.errors import ConfigError
from pipi.runs.data import StagedData
from pipi.training.frames import scored_split, source_names

__all__ = ["check_base_run", "check_sources", "check_trainable"]


def check_sources(cfg: TrainConfig, staged: StagedData) -> None:
    """``train_sources`` / ``test_sources`` name sources the staged frames have, and leave
    frames to train, select and score on (ConfigError in one line otherwise)."""
    if not (cfg.train_sources or cfg.test_sources):
        return
    frames = staged.frames
    have = sorted(set(frames["source"].astype(str)) - {""}) if "source" in frames else []
    for name in ("train_sources", "test_sources"):
        unknown = [s for s in source_names(getattr(cfg, name)) if s not in have]
        if unknown:
            raise ConfigError(f"{name}={getattr(cfg, name)}: {staged.root} has no frames of "
                              f"source(s) {unknown}; its sources: {have or 'none (no source column)'}")
    used = scored_split(frames, cfg)
    for split in ("train", "val", "test"):
        if not (used == split).any():
            raise ConfigError(f"train_sources={cfg.train_sources or '(all)'}, test_sources="
                              f"{cfg.test_sources or '(all)'}: no {split} frame of {staged.root} "
                              "is left")


def check_trainable(staged: StagedData, data: str | None) -> None:
    """A staged Galar folder is test data only (zero-shot, every frame in ``test``)."""
    if staged.manifest.get("dataset") == "galar":
        raise ConfigError(f"data={data or staged.root}: {staged.root} is a staged Galar folder, "
                          "test data only (zero-shot); train on a staged Kvasir-Capsule release "
                          "and score Galar with `galar`")


def check_base_run(run_id: str, cfg: TrainConfig, staged: StagedData) -> str:
    """``base_run``: a FINISHED ``train`` or ``import`` run of the sequence cell's base cell,
    on its backbone, data and image size (a ConfigError in one line naming what differs).
    An imported run serves as a trained one: ``e_dagger`` builds on a released distillation
    checkpoint brought in with ``import``."""
    cc = cfg.cell_config
    if not cc.is_sequence:
        raise ConfigError(f"base_run={run_id}: cell {cfg.cell} is a per-frame cell; base_run "
                          "names the per-frame run a sequence cell builds on")
    run = tracking.usable_run(run_id, what="base_run", finished=True)
    checks = [("entry point", run.entry_point, ("train", "import")),
              ("cell", run.cell, (cc.base_cell,)), ("backbone", run.backbone, (cfg.backbone,)),
              ("image size", tracking.resolved_param(run.params, "image_size"),
               (str(cfg.image_size),))]
    wrong = [f"{what} {got or 'none'} (cell {cfg.cell} needs {' or '.join(want)})"
             for what, got, want in checks if got not in want]
    if run.data_digest != staged.digest:
        wrong.append(f"data digest {run.data_digest[:12] or 'none'} (the staged data's is "
                     f"{staged.digest[:12]})")
    if wrong:
        raise ConfigError(f"base_run={run_id}: not a base of this request: " + "; ".join(wrong))
    return run.run_id
