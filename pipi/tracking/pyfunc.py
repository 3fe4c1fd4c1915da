"""The registered models' code (MLflow models-from-code): ``log_model(python_model=<this file>)``.

MLflow copies this file into the logged model and runs it when the model is loaded; it ends with
``mlflow.models.set_model``, so no Python object is pickled. It is never imported as a module of
pipi (importing ``pipi.tracking`` would pull in the tracking layer): it imports only
:mod:`pipi.serving` (and the library below it), which the logged model's ``code_paths`` ship
(``pipi.tracking.logged_model.serving_code``).

:class:`PipiModel` loads a :mod:`pipi.serving.predictors` predictor from the model's artifacts
(per-frame cells: ``config`` + ``weights``; sequence cells: ``bundle``); its inputs, outputs and
parameters are described there. Refused input raises ``MlflowException`` with
``INVALID_PARAMETER_VALUE`` (HTTP 400 under ``mlflow models serve``) and a one-line reason;
:func:`install_guard` keeps the scoring server from echoing the request back
(:mod:`pipi.serving.guard`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlflow.models
import mlflow.pyfunc
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

import pipi
from pipi.errors import DataError
from pipi.serving.guard import guarded, install_body_limit
from pipi.serving.predictors import load_predictor


def unshadow_pipi() -> None:
    """MLflow puts this model's ``code_paths`` (a partial copy of pipi: the serving closure) in
    front of ``sys.path`` when it loads the model. In a process whose pipi came from elsewhere
    (a notebook, a pipi workflow, the tests) that copy would shadow the real package in every
    process spawned later (``import pipi.data.staging.kvasir`` fails there): drop it from ``sys.path``
    again. Where pipi came from the copy (``mlflow models serve`` in the model's own
    environment) nothing changes."""
    home = Path(pipi.__file__).resolve().parent.parent
    sys.path[:] = [p for p in sys.path
                   if not (Path(p or ".").joinpath("pipi", "__init__.py").is_file()
                           and Path(p or ".").resolve() != home)]


unshadow_pipi()


def refused(reason) -> MlflowException:
    """A client error: HTTP 400 with this one line under ``mlflow models serve``."""
    return MlflowException(" ".join(str(reason).split()), error_code=INVALID_PARAMETER_VALUE)


def install_guard() -> None:
    """Wrap the scoring server's ``invocations`` (idempotent; harmless outside a server)."""
    from mlflow.pyfunc import scoring_server

    if os.environ.get(scoring_server._SERVER_MODEL_PATH):  # this process is the server
        install_body_limit()
    current = scoring_server.invocations
    if getattr(current, "__pipi_guard__", False):
        return
    scoring_server.invocations = guarded(current, scoring_server.InvocationsResponse,
                                         error_type=MlflowException)


class PipiModel(mlflow.pyfunc.PythonModel):
    """pyfunc around a pipi predictor (per-frame or sequence cell)."""

    def load_context(self, context):
        self.predictor = load_predictor(context.artifacts)
        install_guard()

    # `pd.DataFrame` is what MLflow's type-hint check skips (no schema inferred, no input
    # converted, no warning at import): a DataFrame, a dict of lists or an array is accepted
    # and checked by pipi.serving.model_input.
    def predict(self, context, model_input: pd.DataFrame, params=None):
        try:
            return self.predictor.predict(model_input, params)
        except DataError as exc:
            raise refused(exc) from None


mlflow.models.set_model(PipiModel())
