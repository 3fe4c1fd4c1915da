"""A container that serves a registered model with ``pipi serve``'s request limits
(``pipi serve --dockerfile DIR``, issue 40).

MLflow writes the build (``mlflow models generate-dockerfile``'s own code: the model copied to
``/opt/ml/model``, MLflow and the model's requirements installed into the image's Python the
way MLflow installs them); pipi then changes only what the container runs: instead of MLflow's
``C._serve`` (nginx and gunicorn, no body limit), a short script serves MLflow's scoring app
behind :class:`pipi.serving.guard.RequestGuard`, shipped beside it as ``pipi_guard.py`` (pure
ASGI, standard library only: the image has no pipi). The limits are the container's
environment: ``PIPI_SERVE_MAX_BYTES``, ``PIPI_SERVE_WORKERS``, ``PIPI_SERVE_PORT``
(``docker run -e``), with the values ``pipi serve`` was given as defaults.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.models.flavor_backend_registry import get_flavor_backend

from pipi.errors import ConfigError
from pipi.serving import guard

__all__ = ["CONTAINER_PORT", "ContainerFiles", "ENTRY_SCRIPT", "write_container"]

#: The port MLflow's own containers listen on (SageMaker's convention); kept.
CONTAINER_PORT = 8080
#: The script the container runs (``ENTRYPOINT``), beside ``pipi_guard.py`` in ``/opt/pipi``.
ENTRY_SCRIPT = "pipi_serve.py"
GUARD_MODULE = "pipi_guard.py"

_ENTRY = '''"""pipi serve in a container: MLflow's scoring app for the model in /opt/ml/model, behind
pipi's request limits (written by `pipi serve --dockerfile`; the image has no pipi)."""

import inspect
import os
import sys

import mlflow
import uvicorn
from mlflow.pyfunc import scoring_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipi_guard import RequestGuard  # noqa: E402

MODEL = os.environ.get("PIPI_SERVE_MODEL_PATH", "/opt/ml/model")
MAX_BYTES = int(os.environ.get("PIPI_SERVE_MAX_BYTES", "{max_bytes}"))
WORKERS = int(os.environ.get("PIPI_SERVE_WORKERS", "{workers}"))
HOST = os.environ.get("PIPI_SERVE_HOST", "0.0.0.0")
PORT = int(os.environ.get("PIPI_SERVE_PORT", "{port}"))


def app():
    """One worker's app: the model, loaded once, behind the limits."""
    return RequestGuard(scoring_server.init(mlflow.pyfunc.load_model(MODEL)),
                        max_bytes=MAX_BYTES)


if __name__ == "__main__":
    print(f"Serving {{MODEL}} at http://{{HOST}}:{{PORT}}/invocations ({{WORKERS}} worker(s); "
          f"a request body over {{MAX_BYTES}} bytes is refused with 413 before it is read)",
          flush=True)
    # a worker loads torch and the model before its first health check (uvicorn's 5 s is short)
    patience = ({{"timeout_worker_healthcheck": 120}} if "timeout_worker_healthcheck" in
                inspect.signature(uvicorn.Config).parameters else {{}})
    uvicorn.run("pipi_serve:app", factory=True, host=HOST, port=PORT, workers=WORKERS,
                app_dir=os.path.dirname(os.path.abspath(__file__)), **patience)
'''


def _undo(out: Path, created: bool) -> None:
    """Nothing half-written: the folder this call made goes; a folder the user gave (empty
    before) is emptied, never removed."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    for p in out.iterdir():
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


@dataclass(frozen=True)
class ContainerFiles:
    """What ``write_container`` wrote: the build folder, its Dockerfile, the model folder it
    copies, and the command the container runs."""

    out: Path
    dockerfile: Path
    model_dir: Path
    entrypoint: tuple[str, ...]
    base_image: str


def write_container(model_uri: str, out: Path, *, max_bytes: int, workers: int = 1,
                    port: int = CONTAINER_PORT) -> ContainerFiles:
    """Write a Docker build folder for ``model_uri`` into ``out`` (new or empty): MLflow's
    Dockerfile and model folder, with ``pipi_serve.py`` as what the container runs."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--dockerfile {out}: not an empty folder; give a new or empty one "
                          "(the build context: Dockerfile, model_dir, pipi_serve.py)")
    created = not out.exists()
    try:
        get_flavor_backend(model_uri, env_manager=None).generate_dockerfile(
            model_uri=model_uri, output_dir=str(out), install_mlflow=False)
    except MlflowException as exc:
        _undo(out, created)
        raise ConfigError(f"{model_uri}: cannot write a container for it "
                          f"({' '.join(exc.message.split())[:300]})") from None
    dockerfile = out / "Dockerfile"
    text = dockerfile.read_text()
    entry = re.search(r'^ENTRYPOINT \[.*\]$', text, flags=re.M)
    base = re.search(r"^FROM (\S+)", text, flags=re.M)
    if entry is None or base is None:   # MLflow's template changed: say so, write nothing
        _undo(out, created)
        raise ConfigError("MLflow's Dockerfile has no FROM or ENTRYPOINT line pipi can "
                          "replace; use `mlflow models generate-dockerfile` and pipi serve's "
                          "docs (docs/serving.md)")
    (out / ENTRY_SCRIPT).write_text(_ENTRY.format(max_bytes=int(max_bytes), workers=int(workers),
                                                  port=int(port)))
    shutil.copyfile(guard.__file__, out / GUARD_MODULE)
    command = ("python", f"/opt/pipi/{ENTRY_SCRIPT}")
    ours = (f"# pipi serve's request limits (PIPI_SERVE_MAX_BYTES, PIPI_SERVE_WORKERS, "
            f"PIPI_SERVE_PORT)\nCOPY {ENTRY_SCRIPT} {GUARD_MODULE} /opt/pipi/\n"
            f"EXPOSE {int(port)}\n"
            f"ENTRYPOINT [{', '.join(f'{c!r}' for c in command)}]".replace("'", '"'))
    dockerfile.write_text(text[:entry.start()] + ours + text[entry.end():])
    return ContainerFiles(out=out, dockerfile=dockerfile, model_dir=out / "model_dir",
                          entrypoint=command, base_image=base.group(1))
