"""`pipi onnx`: a registered per-frame model as an ONNX graph (not an MLproject entry point)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import PipiCommand, frame_model_option, lazy_module, setup_logging

if TYPE_CHECKING:
    from pipi.serving import onnx_export
    from pipi.workflows import predict as workflow
else:   # loaded when the command runs: `pipi onnx --help` imports neither torch nor mlflow
    onnx_export = lazy_module("pipi.serving.onnx_export")
    workflow = lazy_module("pipi.workflows.predict")


@click.command("onnx", cls=PipiCommand)
@frame_model_option
@click.option("--out", required=True, help="The .onnx file to write.")
@click.option("--opset", type=int, default=None, help="ONNX opset (default: torch's).")
def onnx(model, out, opset):
    """Write a registered per-frame model, prior included, as an ONNX graph checked with ONNX
    Runtime."""
    setup_logging()
    tracking.configure()
    ref = workflow.model_ref(model)
    module = tracking.scoring.load_module(model)
    res = onnx_export.export_onnx(module, Path(out), opset=opset,
                                  metadata={"model_uri": model, "model": ref.label,
                                            "source_run": ref.run_id})
    s = res.image_size
    click.echo(f"wrote {res.path}: {ref.label}; input {onnx_export.INPUT!r} float32 N x 3 x "
               f"{s} x {s} RGB in [0, 1] -> {onnx_export.OUTPUT!r} over "
               f"{len(res.class_names)} classes (ONNX Runtime matches the model to "
               f"{res.max_abs_diff:.1e})")
