"""`pipi serve`: a registered model over HTTP, behind the request limits (not an MLproject
entry point: a server that runs until stopped, like ``pipi server``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipi import tracking
from pipi.cli import lazy_module
from pipi.cli.common import PipiCommand, setup_logging

if TYPE_CHECKING:
    from pipi.tracking import container, scoring
else:   # loaded when the command runs: `pipi serve --help` imports neither torch nor mlflow
    scoring = lazy_module("pipi.tracking.scoring")
    container = lazy_module("pipi.tracking.container")


def _finite(mb: float) -> float:
    if math.isnan(mb):   # NaN passes every range check
        raise click.BadParameter("nan is not a size; give a number of MiB such as 64")
    return mb


@click.command("serve", cls=PipiCommand)
@click.option("-m", "--model-uri", required=True,
              help="The model to serve: models:/NAME@ALIAS, models:/NAME/VERSION, runs:/... "
                   "or a local folder (as `mlflow models serve -m`).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 for the lab network).")
@click.option("--port", type=click.IntRange(1, 65535), default=5001, show_default=True,
              help="Port to listen on.")
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True,
              help="uvicorn worker processes, each with its own copy of the model.")
@click.option("--max-request-mb", type=click.FloatRange(0, 1024 * 1024, min_open=True),
              default=64.0, show_default=True, callback=lambda ctx, p, v: _finite(v),
              help="Largest request body in MiB: a bigger one is refused with 413 before it "
                   "is read whole (a declared Content-Length at once, a chunked body at the "
                   "limit).")
@click.option("--dockerfile", "dockerfile", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Do not serve: write a Docker build folder here (MLflow's Dockerfile and "
                   "model folder) whose container serves the model with these limits on port "
                   "8080 (docs/serving.md).")
def serve(model_uri, host, port, workers, max_request_mb, dockerfile):
    """Serve a model with MLflow's scoring server and pipi's request limits until Ctrl-C."""
    setup_logging()
    if model_uri.startswith(("models:/", "runs:/")):
        tracking.configure()
    max_bytes = max(1, int(max_request_mb * 1024 * 1024))
    if dockerfile:
        files = container.write_container(model_uri, dockerfile, max_bytes=max_bytes,
                                          workers=workers)
        click.echo(f"wrote {files.dockerfile} (FROM {files.base_image}; the container runs "
                   f"{' '.join(files.entrypoint)}: port {container.CONTAINER_PORT}, "
                   f"{max_bytes} bytes per request, {workers} worker(s))")
        click.echo(f"  docker build -t pipi-serve {files.out} && "
                   f"docker run -p {port}:{container.CONTAINER_PORT} pipi-serve")
        return
    scoring.serve(scoring.ServeRequest(model_uri=model_uri, host=host, port=port,
                                       workers=workers, max_bytes=max_bytes),
                  announce=click.echo)
