"""Every MLflow convention of pipi (the only package that imports mlflow).

``tags`` names the run contract, ``store`` the tracking URI and code version, ``runs`` the run
lifecycle and lookups, ``datasets`` the split inputs, ``registry`` logged models and aliases,
``queries`` the reads of ``aggregate``, ``logged_model`` the registered models (their code,
run by MLflow and never imported, is ``pyfunc.py``), ``ui`` what the MLflow UI shows
(experiment kind, figures, descriptions, system metrics). Import it as ``from pipi import
tracking`` and call ``tracking.<name>``.
"""

from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# one progress bar per downloaded artifact floods the logs of aggregate/ablate; pipi shows its own
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from pipi.tracking.tags import *  # noqa: E402,F403
from pipi.tracking.store import *  # noqa: E402,F403
from pipi.tracking.runs import *  # noqa: E402,F403
from pipi.tracking.datasets import *  # noqa: E402,F403
from pipi.tracking.liveness import *  # noqa: E402,F403
from pipi.tracking.parent import *  # noqa: E402,F403
from pipi.tracking.registry import *  # noqa: E402,F403
from pipi.tracking.permissions import *  # noqa: E402,F403
from pipi.tracking.queries import *  # noqa: E402,F403
from pipi.tracking.contract import *  # noqa: E402,F403
from pipi.tracking.trials import *  # noqa: E402,F403
from pipi.tracking.ui import *  # noqa: E402,F403
from pipi.tracking.runs import _quote  # noqa: E402,F401
