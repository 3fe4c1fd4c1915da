"""`pipi server`: a lab tracking server (not an MLproject entry point)."""

from __future__ import annotations

from pathlib import Path

import click

from pipi.cli.common import PipiCommand, choice, setup_logging
from pipi.paths import pipi_home
from pipi.tracking.server import ARTIFACT_STORES, BACKENDS, LabServer


@click.command("server", cls=PipiCommand)
@click.option("--backend", type=choice(BACKENDS), default="postgres", show_default=True,
              help="Tracking store: a PostgreSQL cluster started here, or a SQLite file.")
@click.option("--artifacts", type=choice(ARTIFACT_STORES), default="s3", show_default=True,
              help="Artifact store behind --serve-artifacts: SeaweedFS S3 (keys from "
                   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or a local folder.")
@click.option("--auth", is_flag=True, help="MLflow's basic-auth app; the admin account comes "
              "from MLFLOW_AUTH_ADMIN_USERNAME/PASSWORD (or MLFLOW_TRACKING_USERNAME/PASSWORD).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 for the lab network).")
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
@click.option("--allowed-hosts", default="",
              help="Host headers the server accepts besides localhost (e.g. mlflow.lab:5000).")
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True)
@click.option("--root", type=click.Path(file_okay=False), default="",
              help="Folder for the database, artifacts and logs (default: PIPI_HOME/server).")
def server(backend, artifacts, auth, host, port, allowed_hosts, workers, root):
    """Start a lab tracking server (PostgreSQL + SeaweedFS S3 + mlflow server) until Ctrl-C."""
    setup_logging()
    lab = LabServer(Path(root) if root else pipi_home() / "server", backend=backend,
                    artifacts=artifacts, auth=auth, host=host, port=port, workers=workers,
                    allowed_hosts=allowed_hosts)
    lab.start()
    click.echo(f"MLflow tracking server at {lab.uri} (backend {backend}, artifacts "
               f"{artifacts}{', basic auth' if auth else ''}; data and logs in {lab.root}). "
               "Point the entry points at it with:")
    for line in lab.client_env_lines():
        click.echo(f"  {line}")
    click.echo("Ctrl-C stops it.")
    lab.serve()
