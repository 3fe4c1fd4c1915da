"""`pipi onnx`: a registered per-frame model as an ONNX graph (not an MLproject entry point)."""

from __future__ import annotations

from pathlib import Path

import click

from pipi import tracking
from pipi.cli.common import PipiCommand, setup_logging
from pipi.serving.onnx_export import INPUT, OUTPUT, export_onnx
from pipi.workflows.predict import model_ref


@click.command("onnx", cls=PipiCommand)
@click.option("-m", "--model", required=True,
              help="The model: models:/NAME@ALIAS, models:/NAME/VERSION or runs:/RUN/model "
                   "(a per-frame cell's).")
@click.option("--out", required=True, help="The .onnx file to write.")
@click.option("--opset", type=int, default=None, help="ONNX opset (default: torch's).")
def onnx(model, out, opset):
    """Write a registered per-frame model, prior included, as an ONNX graph checked with ONNX Runtime."""
    setup_logging()
    tracking.configure()
    ref = model_ref(model)
    module = tracking.scoring.load_module(model)
    res = export_onnx(module, Path(out), opset=opset,
                      metadata={"model_uri": model, "model": ref.label,
                                "source_run": ref.run_id})
    s = res.image_size
    click.echo(f"wrote {res.path}: {ref.label}; input {INPUT!r} float32 N x 3 x {s} x {s} "
               f"RGB in [0, 1] -> {OUTPUT!r} over {len(res.class_names)} classes "
               f"(ONNX Runtime matches the model to {res.max_abs_diff:.1e})")
