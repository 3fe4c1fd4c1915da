"""``pipi serve``: MLflow's own scoring app for one model, with the request limits around it.

``mlflow models serve --env-manager local`` runs ``uvicorn mlflow.pyfunc.scoring_server.app:app``,
the FastAPI app that ``scoring_server.init(model)`` builds. :func:`scoring_app` builds that same
app and wraps it in :class:`~pipi.serving.guard.RequestGuard` (an ASGI middleware: the limits
live outside MLflow and outside the model); :func:`serve` runs it with uvicorn, in this
environment (the project's, as ``--env-manager local``), on ``workers`` processes.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import scoring_server

from pipi.errors import ConfigError
from pipi.serving.guard import DEFAULT_MAX_BYTES, RequestGuard
from pipi.serving.predictors import FrameModule

__all__ = ["ServeRequest", "app_from_env", "load_module", "load_served_model", "scoring_app",
           "serve"]

#: How the parent hands the model and the limit to uvicorn's worker processes.
ENV_MODEL_PATH = "PIPI_SERVE_MODEL_PATH"
ENV_MAX_BYTES = "PIPI_SERVE_MAX_BYTES"
#: Seconds a uvicorn worker may take to answer its supervisor's health check.
WORKER_HEALTHCHECK_S = 120


@dataclass(frozen=True)
class ServeRequest:
    """What ``pipi serve`` was asked for (``max_bytes``: the request-body limit)."""

    model_uri: str
    host: str = "127.0.0.1"
    port: int = 5001
    workers: int = 1
    max_bytes: int = DEFAULT_MAX_BYTES


def scoring_app(model, *, max_bytes: int = DEFAULT_MAX_BYTES) -> RequestGuard:
    """MLflow's scoring app for a loaded pyfunc ``model``, behind the request limits."""
    return RequestGuard(scoring_server.init(model), max_bytes=max_bytes)


def load_served_model(path: str):
    """The pyfunc model at a local ``path``; one line naming it when it cannot be loaded."""
    try:
        return mlflow.pyfunc.load_model(path)
    except MlflowException as exc:
        raise ConfigError(f"{path}: not a loadable MLflow model "
                          f"({' '.join(exc.message.split())[:300]})") from None


def load_module(model_uri: str) -> FrameModule:
    """The torch module of a registered per-frame model (``models:/NAME@ALIAS``,
    ``models:/NAME/VERSION``, ``runs:/...`` or a folder): :class:`FrameModule`, whose
    ``forward`` on RGB in [0, 1] at the model's image size gives the pyfunc's probabilities;
    ``network`` is the bare classifier. One line for a sequence cell's model (it takes
    clips) or a model that is not pipi's."""
    pred = getattr(load_served_model(model_uri).unwrap_python_model(), "predictor", None)
    if pred is None or not hasattr(pred, "model") or not hasattr(pred, "inputs"):
        what = (f"a sequence cell's model ({pred.cfg.cell}: it takes clips)"
                if pred is not None and hasattr(pred, "cfg") else "not a pipi frame model")
        raise ConfigError(f"{model_uri}: {what}; load_module serves the per-frame cells "
                          "(a, pi, pblood_only, phi_only, distill, probe)")
    return FrameModule(pred.model, pred.inputs, pred.cfg)


def app_from_env() -> RequestGuard:
    """The app of one uvicorn worker: the model and the limit the parent put in the
    environment (uvicorn's ``factory=True``)."""
    return scoring_app(load_served_model(os.environ[ENV_MODEL_PATH]),
                       max_bytes=int(os.environ[ENV_MAX_BYTES]))


def _download(model_uri: str, dst: Path) -> str:
    try:
        return mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(dst))
    except MlflowException as exc:
        raise ConfigError(f"{model_uri}: cannot fetch the model "
                          f"({' '.join(exc.message.split())[:300]})") from None


def serve(req: ServeRequest, *, announce=print) -> None:
    """Download ``req.model_uri`` once, load it (so a bad model fails here, in one line) and
    serve it until the process is stopped."""
    import uvicorn

    with tempfile.TemporaryDirectory(prefix="pipi-serve-") as tmp:
        path = _download(req.model_uri, Path(tmp))
        model = load_served_model(path)
        announce(f"Serving {req.model_uri} at http://{req.host}:{req.port}/invocations "
                 f"({req.workers} worker{'s' if req.workers > 1 else ''}; a request body over "
                 f"{req.max_bytes} bytes is refused with 413 before it is read)")
        if req.workers == 1:
            uvicorn.run(scoring_app(model, max_bytes=req.max_bytes), host=req.host,
                        port=req.port)
            return
        del model  # each worker process loads its own
        os.environ[ENV_MODEL_PATH], os.environ[ENV_MAX_BYTES] = path, str(req.max_bytes)
        # A spawned worker imports pipi's command line (torch, mlflow) before it can answer its
        # supervisor's first health check; uvicorn's 5 s restarted slow starters in a loop.
        patience = ({"timeout_worker_healthcheck": WORKER_HEALTHCHECK_S} if
                    "timeout_worker_healthcheck" in inspect.signature(uvicorn.Config).parameters
                    else {})
        uvicorn.run(f"{__name__}:app_from_env", factory=True, host=req.host, port=req.port,
                    workers=req.workers, **patience)
