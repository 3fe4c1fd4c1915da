"""A registered per-frame model as an ONNX graph (``pipi onnx``), the prior included: the graph
takes RGB floats in [0, 1] at the model's image size and returns the class probabilities, as
the served model computes them (the analytic prior is torch tensor ops, so it exports with the
network; ``distill`` exports in deploy mode, without its decoder).

torch's exporter (``torch.onnx.export(dynamo=True)``: ``torch.export`` then onnxscript) traces
the module once at the model's size with a dynamic batch; the prior's value check (a
data-dependent branch) is left out of the traced graph, so the caller guarantees [0, 1]. The
file is checked against the torch module with ONNX Runtime before it is kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipi.errors import ConfigError, DataError
from pipi.prior import clear_fluence_cache
from pipi.serving.predictors import FrameModule

__all__ = ["INPUT", "OUTPUT", "OnnxExport", "export_onnx"]

INPUT, OUTPUT = "x01", "probabilities"
#: The largest difference between ONNX Runtime's and torch's probabilities a file may show.
TOLERANCE = 1e-4


@dataclass(frozen=True)
class OnnxExport:
    path: Path
    image_size: int
    class_names: tuple[str, ...]
    max_abs_diff: float        # ONNX Runtime vs torch on the check batch


def export_onnx(module: FrameModule, out: Path, *, metadata: dict[str, str] | None = None,
                opset: int | None = None, check: torch.Tensor | None = None) -> OnnxExport:
    """Write ``module`` to ``out`` (``.onnx``) and check it with ONNX Runtime on ``check``
    (frames ``[N, 3, S, S]`` in [0, 1]; random frames if None): a file whose probabilities
    differ by more than :data:`TOLERANCE` is not kept (DataError). ``metadata`` goes into the
    file's ``metadata_props`` with the class names and the image size."""
    import onnx
    import onnxruntime as ort

    out = Path(out).expanduser().resolve()
    if out.suffix != ".onnx":
        raise ConfigError(f"out={out}: write a .onnx file")
    size = int(module.image_size)
    inputs = dataclasses.replace(module.inputs, check=False)   # no data-dependent branch
    traced = FrameModule(module.network, inputs, module.cfg).eval()
    x = check if check is not None else torch.rand(4, 3, size, size,
                                                     generator=torch.Generator().manual_seed(0))
    if tuple(x.shape[1:]) != (3, size, size):
        raise ConfigError(f"check frames of shape {tuple(x.shape)}: need N x 3 x {size} x {size}")
    with torch.no_grad():
        want = traced(x).numpy()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        torch.onnx.export(traced, (x[:2],), str(tmp), dynamo=True, input_names=[INPUT],
                          output_names=[OUTPUT], opset_version=opset,
                          dynamic_shapes=({0: torch.export.Dim("batch")},), verbose=False)
    finally:
        clear_fluence_cache()   # the trace may leave traced tensors in the prior's cache
    model = onnx.load(str(tmp))
    props = {"class_names": json.dumps(list(module.class_names)), "image_size": str(size),
             "input": "RGB float32 in [0, 1], N x 3 x S x S", "producer": "pipi onnx",
             **(metadata or {})}
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(tmp))
    got = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"]).run(
        None, {INPUT: x.numpy()})[0]
    diff = float(np.abs(got - want).max())
    if not diff <= TOLERANCE:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{out}: ONNX Runtime's probabilities differ from the model's by "
                        f"{diff:.2e} (> {TOLERANCE}); the file is not written")
    os.replace(tmp, out)
    return OnnxExport(out, size, tuple(module.class_names), diff)
