"""``train -P onnx=true``: the trained model as an ONNX graph, kept beside it (issue 40).

The graph is the one ``pipi onnx`` writes (``pipi.serving.onnx_export``: RGB in [0, 1] in,
probabilities out, the prior inside, checked with ONNX Runtime against the logged model). It
is logged to the training run as ``onnx/model.onnx``, named by the tag ``pipi.onnx`` on the
run and, where the model was registered, on the version. What cannot be exported is refused
before the training starts; an export that fails after it leaves the trained run FINISHED and
says how to export it later.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from pipi import tracking
from pipi.cells import get_cell
from pipi.config import TrainConfig
from pipi.errors import ConfigError
from pipi.serving.onnx_export import export_onnx

__all__ = ["ONNX_ARTIFACT", "check_onnx", "keep_onnx"]

log = logging.getLogger(__name__)

#: Where the graph goes in the run's artifacts.
ONNX_ARTIFACT = "onnx"
_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


def check_onnx(cell: str) -> None:
    """Refuse ``onnx=true`` in one line before anything is staged or trained: a sequence cell
    (its model reads clips of frames through streams computed outside the network), or a
    machine without the exporter and ONNX Runtime."""
    if get_cell(cell).is_sequence:
        raise ConfigError(f"onnx=true: cell {cell} is a sequence cell (its model reads a "
                          "clip with streams computed outside the network); ONNX export covers "
                          "the per-frame cells (docs/serving.md, ONNX)")
    missing = [p for p in _PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        raise ConfigError(f"onnx=true needs {', '.join(missing)}: pip install -e '.[onnx]' "
                          "(or train without it and run `pipi onnx` later)")


def keep_onnx(run: tracking.Run, cfg: TrainConfig, *, model_uri: str, work: Path,
              registered: tuple[str, str] | None = None) -> str | None:
    """Export the model logged at ``model_uri`` (``registered``: the (name, version) it was
    registered as), log the checked graph to ``run`` and name it on the run (and the
    version); return its ``runs:/`` URI, or None where the export failed (a warning says why
    and how to export it later; the run is not failed for it)."""
    uri = f"models:/{registered[0]}/{registered[1]}" if registered else model_uri
    try:
        module = tracking.scoring.load_module(uri)
        res = export_onnx(module, Path(work) / ONNX_ARTIFACT / "model.onnx",
                          metadata={"model_uri": uri, "model": uri,
                                    "source_run": run.run_id, "cell": cfg.cell,
                                    "backbone": cfg.backbone})
    except Exception as exc:   # noqa: BLE001 - torch's exporter raises many kinds
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log.warning("onnx=true: the ONNX export of %s failed (%s); the run and its model are "
                    "kept: export it later with `pipi onnx -m %s --out FILE.onnx%s`", uri,
                    reason, uri, " --register" if registered else "")
        run.set_tags({tracking.tags.TAG_ONNX: f"failed: {reason}"})
        return None
    run.log_metrics({"onnx/max_abs_diff": res.max_abs_diff})
    if registered:
        name, version = registered
        kept = tracking.registry.attach_to_version(name, version, res.path, ONNX_ARTIFACT,
                                                   tracking.tags.TAG_ONNX)
    else:
        run.log_artifact(res.path, ONNX_ARTIFACT)
        kept = f"runs:/{run.run_id}/{ONNX_ARTIFACT}/{res.path.name}"
    run.set_tags({tracking.tags.TAG_ONNX: kept})
    log.info("onnx=true: %s kept as %s (ONNX Runtime matches the model to %.1e)", uri, kept,
             res.max_abs_diff)
    return kept
