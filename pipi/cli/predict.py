"""`pipi predict` / `mlflow run . -e predict`: a registered model scores a whole exam."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import (
    PipiCommand,
    experiment_option,
    frame_model_option,
    lazy_module,
    setup_logging,
)
from pipi.options.runtime import PRECISIONS, SWITCHES

if TYPE_CHECKING:
    from pipi.workflows import predict as workflow
else:   # loaded when the command runs: `pipi predict --help` imports neither torch nor mlflow
    workflow = lazy_module("pipi.workflows.predict")


@click.command("predict", cls=PipiCommand)
@frame_model_option
@click.option("--out", required=True, help="The .parquet file to write (one row per frame).")
@click.option("--images", default="", help="A folder of JPEG/PNG frames (one subfolder per "
              "video, or one video); with --labels, the folder the table's paths start from.")
@click.option("--labels", default="", help="A label table (CSV, Parquet or Excel, as `pipi stage "
              "images --labels` reads one): its images are scored, with the metrics of their "
              "classes.")
@click.option("--data", default="", help="A staged folder (its --split is scored, with labels).")
@click.option("--split", default="test", show_default=True,
              help="The staged split to score: train, val, test or all.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader processes that decode the frames (0: in this process).")
@click.option("--replicas", default="auto", show_default=True,
              help="On a CPU: processes that each decode and score their own batches on one "
                   "thread, instead of one process with decoding workers (auto: one per core "
                   "on a CPU of 2-4 cores, else 1; --workers is then unused).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="The forward pass's precision (auto: bf16 on a GPU that has it, fp32 "
                   "otherwise; fp32 answers as the registered pyfunc does, to 1e-5).")
@click.option("--channels-last", type=click.Choice(SWITCHES), default="auto",
              show_default=True, help="NHWC memory format (auto: on a GPU and on a oneDNN CPU).")
@click.option("--compile", "compile_", type=click.Choice(SWITCHES), default="auto",
              show_default=True, help="torch.compile of the model (auto: on a GPU; the first "
              "batches pay the compilation).")
@experiment_option
def predict(model, out, images, labels, data, split, batch_size, workers, replicas, device,
            precision, channels_last, compile_, experiment):
    """Score a folder of frames or a staged split with a registered model into a parquet file."""
    setup_logging()
    tracking.configure()
    res = workflow.run_predict(model=model, out=out, images=images or None, data=data or None,
                               labels=labels or None, split=split, batch_size=batch_size,
                               workers=workers, replicas=replicas, device=device,
                               precision=precision,
                               channels_last=channels_last, compile=compile_,
                               experiment=experiment or None)
    s = res.score
    click.echo(f"predict run {res.run_id}: {s.n_frames} frames scored by {res.model.label} "
               f"into {s.out} ({s.frames_per_s:.1f} frames/s"
               + (f"; {s.resumed_frames} taken from a broken run's parts" if s.resumed_frames
                  else "") + ")")
    if "test/macro_auc" in res.metrics:
        click.echo(f"  test macro-AUC {res.metrics['test/macro_auc']:.4f}")
    click.echo(tracking.ui_hint(res.run_id))
