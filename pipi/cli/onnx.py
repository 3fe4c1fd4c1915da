"""`pipi onnx`: a registered per-frame model as an ONNX graph (not an MLproject entry point)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import PipiCommand, frame_model_option, lazy_module, setup_logging
from pipi.errors import PipiError

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
@click.option("--register", is_flag=True, default=False,
              help="Also keep the graph beside the registered version: an artifact of the run "
                   "that logged it (onnx/), named on the version by the tag pipi.onnx.")
def onnx(model, out, opset, register):
    """Write a registered per-frame model, prior included, as an ONNX graph checked with ONNX
    Runtime."""
    setup_logging()
    tracking.configure()
    ref = workflow.model_ref(model)
    if register and not ref.name:   # before anything is exported
        raise PipiError(f"--register: {model} is not a registered version; give "
                        "models:/NAME/VERSION or models:/NAME@ALIAS")
    module = tracking.scoring.load_module(model)
    res = onnx_export.export_onnx(module, Path(out), opset=opset,
                                  metadata={"model_uri": model, "model": ref.label,
                                            "source_run": ref.run_id})
    s = res.image_size
    click.echo(f"wrote {res.path}: {ref.label}; input {onnx_export.INPUT!r} float32 N x 3 x "
               f"{s} x {s} RGB in [0, 1] -> {onnx_export.OUTPUT!r} over "
               f"{len(res.class_names)} classes (ONNX Runtime matches the model to "
               f"{res.max_abs_diff:.1e})")
    if register:
        uri = tracking.registry.attach_to_version(ref.name, ref.version, res.path, "onnx",
                                         tracking.tags.TAG_ONNX)
        click.echo(f"kept beside {ref.label}: {uri} (version tag {tracking.tags.TAG_ONNX})")
