"""The ``train`` workflow: configuration -> MLflow run -> training -> run contract -> registry."""

from __future__ import annotations

import json
import logging
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from pipi import tracking
from pipi.cells import TrainConfig
from pipi.classes import CLASSES
from pipi.errors import ConfigError
from pipi.staging import resolve_data
from pipi.training import run_frame_cell, tmpdir, write_predictions

log = logging.getLogger(__name__)


def registered_name(cfg: TrainConfig) -> str:
    return f"pipi-{cfg.backbone}-{cfg.cell}"


def recipe_command(cfg: TrainConfig) -> str:
    return (f"mlflow run . -e train -P cell={cfg.cell} -P seed={cfg.seed} "
            f"-P backbone={cfg.backbone} -P profile={cfg.profile}")


def run_params(cfg: TrainConfig) -> dict:
    p = asdict(cfg)
    p["jitter"] = ",".join(str(j) for j in cfg.jitter)
    p["streams"] = ",".join(cfg.cell_config.streams) or "RGB"
    p["input_channels"] = cfg.cell_config.input_channels
    return p


def config_key(cfg: TrainConfig, data_digest: str) -> dict:
    """What makes two runs the same experiment (the idempotency key of sweeps)."""
    return {"config": run_params(cfg), "data_digest": data_digest,
            "code": tracking.code_version()}


def load_resume(resume: str, cfg: TrainConfig) -> tuple[TrainConfig, dict]:
    """The checkpoint of an interrupted run and the configuration it was started with."""
    ckpt = tracking.download_artifact(resume, "checkpoints/last.pt", tmpdir())
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    saved = dict(state["config"])
    saved["jitter"] = tuple(saved["jitter"])
    if saved != asdict(cfg):
        log.warning("resuming run %s with its own configuration, not the one passed", resume)
    return TrainConfig(**saved), state


def run_tags(cfg: TrainConfig, manifest: dict) -> dict:
    """The run contract's tags of a training run."""
    digest = manifest["data_digest"]
    return {
        tracking.TAG_DATASET: manifest.get("dataset", "kvasir-capsule"),
        tracking.TAG_DATA_DIGEST: digest,
        tracking.TAG_SPLIT_SHA: manifest["content_sha256"],
        tracking.TAG_CELL: cfg.cell, tracking.TAG_BACKBONE: cfg.backbone,
        tracking.TAG_SEED: str(cfg.seed),
        tracking.TAG_CONFIG_HASH: tracking.config_hash(config_key(cfg, digest)),
        "pipi.recipe": recipe_command(cfg),
    }


def log_results(out: dict, work: Path) -> dict:
    """Log a fitted cell's final metrics, predictions and history; return the summary."""
    m = {k: v for k, v in out["metrics"].items() if isinstance(v, float) and math.isfinite(v)}
    # val/macro_auc is the per-epoch series; the selected epoch's value gets its own name
    m["val/best_macro_auc"] = m.pop("val/macro_auc", float("nan"))
    tracking.log_metrics(m)
    tracking.set_tags({"pipi.evaluable_classes": json.dumps([CLASSES[k] for k in out["classes"]]),
                       "pipi.best_epoch": out["metrics"]["best_epoch"]})
    tracking.log_artifacts(write_predictions(out["predictions"], work / "predictions"),
                           "predictions")
    tracking.log_dict(out["history"], "history.json")
    return {"run_id": tracking.active_run_id(),
            "test_macro_auc": out["metrics"]["test/macro_auc"],
            "val_macro_auc": out["metrics"]["val/macro_auc"],
            "best_epoch": out["metrics"]["best_epoch"], "registered": None}


def train(cfg: TrainConfig, *, data: str | None = None, resume: str | None = None,
          experiment: str | None = None, register: bool = True, progress: bool = True,
          nested: bool = False) -> dict:
    """Run one cell end to end inside an MLflow run and return a summary."""
    if cfg.cell_config.is_sequence:
        from pipi.sequence import train_sequence  # issue: sequence-aware cells

        return train_sequence(cfg, data=data, resume=resume, experiment=experiment,
                              register=register, progress=progress, nested=nested)
    root = resolve_data(data, preset="tiny" if cfg.profile == "smoke" else "demo")
    manifest = json.loads((root / "manifest.json").read_text())
    resume_state = None
    if resume:
        cfg, resume_state = load_resume(resume, cfg)
    digest = manifest["data_digest"]
    tags = run_tags(cfg, manifest)
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point="train", experiment=experiment, run_id=resume,
                               nested=nested, run_name=f"{cfg.cell}-{cfg.backbone}-s{cfg.seed}",
                               tags=tags) as run:
            run_id = run.info.run_id
            if not resume:
                tracking.log_params({**run_params(cfg), "data_dir": str(root)})
                tracking.log_dict(asdict(cfg), "config.json")
                import pandas as pd

                tracking.log_dataset(pd.read_parquet(root / "frames.parquet"), source=str(root),
                                     name=tags[tracking.TAG_DATASET], digest=digest,
                                     context="training")
            out = run_frame_cell(cfg, data=root, resume_state=resume_state,
                                 tracker=tracking.RunTracker(work / "ckpt"), progress=progress)
            summary = log_results(out, work)
            summary.update(_log_model(cfg, out["model"], work, run_id,
                                      summary["test_macro_auc"], register))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary


def _log_model(cfg: TrainConfig, model, work: Path, run_id: str, test_auc: float,
               register: bool) -> dict:
    from pipi.tracking.pyfunc import PipiImageClassifier

    wpath = work / "model_state.pt"
    torch.save(model.state_dict(), wpath)
    cpath = work / "model_config.json"
    cpath.write_text(json.dumps(asdict(replace(cfg)), indent=2))
    rng = np.random.default_rng(0)
    example = rng.integers(0, 256, (2, cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
    name = registered_name(cfg) if register else None
    py = PipiImageClassifier()
    # the output example is computed by the real model, so the signature is exact
    from pipi.tracking.pyfunc import preprocess
    from pipi.training import FrameInputs

    model.eval()
    with torch.no_grad():
        if hasattr(model, "deploy_mode"):
            model.deploy_mode = True
        x, _ = FrameInputs(cfg)(preprocess(list(example), cfg.image_size), train=False)
        probs = torch.softmax(model(x), 1).numpy()
    import pandas as pd

    out_example = pd.DataFrame(probs, columns=list(CLASSES))
    out_example["predicted_class"] = [CLASSES[i] for i in probs.argmax(1)]
    info = tracking.log_pyfunc_model(
        python_model=py, artifacts={"weights": str(wpath), "config": str(cpath)},
        input_example=example, registered_model_name=name, signature_output=out_example,
    )
    result = {"model_uri": info.model_uri, "registered": None}
    if name:
        version = tracking.registered_version_of(info, name)
        tracking.tag_model_version(
            name, version,
            {"run_id": run_id, "test_macro_auc": f"{test_auc:.6f}", "recipe": recipe_command(cfg),
             "git_commit": tracking.code_version(), "cell": cfg.cell, "seed": cfg.seed},
            alias="candidate",
        )
        result["registered"] = f"models:/{name}/{version}"
        result["registered_name"] = name
        result["registered_version"] = version
    return result


def check_weights(weights: str) -> str:
    if weights not in ("imagenet", "none") and not Path(weights).is_file():
        raise ConfigError(f"weights must be imagenet, none or a state_dict file; {weights} not found")
    return weights
