"""The Optuna side of calibration: where the study lives (an RDB storage: SQLite on one
machine, PostgreSQL for several), and the samplers and pruners ``calibrate`` offers."""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path

import numpy as np
import optuna
import sqlalchemy

from pipi.calibration.objective import ALPHA_RANGE, LAMBDA_FRACTION_RANGE
from pipi.calibration.options import PRUNERS, SAMPLERS, STORAGE_SCHEMES
from pipi.errors import ConfigError
from pipi.options.runtime import auto_or_count
from pipi.paths import PROJECT_ROOT

__all__ = ["PRUNERS", "SAMPLERS", "STORAGE_ENV", "STORAGE_SCHEMES", "check_storage_url",
           "create_study", "default_storage", "grid_axes", "make_pruner", "make_sampler",
           "open_storage", "parse_epochs", "redact"]

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------- storage, study
def default_storage() -> str:
    """``sqlite:///<project>/optuna.db``: one local study file beside the MLproject."""
    return f"sqlite:///{PROJECT_ROOT / 'optuna.db'}"


def redact(url: str) -> str:
    """The storage URL without its password (for params, tags and messages)."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


STORAGE_ENV = "PIPI_OPTUNA_STORAGE"


def check_storage_url(url: str) -> str:
    """The storage URL, refused early when it is not an RDB URL. Empty: ``$PIPI_OPTUNA_STORAGE``
    (keeps a password out of the ``storage`` param that ``mlflow run`` logs), else the
    default SQLite file."""
    url = (url or "").strip() or os.environ.get(STORAGE_ENV, "").strip() or default_storage()
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url or scheme not in STORAGE_SCHEMES:
        raise ConfigError(f"storage={redact(url)!r}: use an Optuna RDB URL, sqlite:///PATH or "
                          "postgresql://USER@HOST:PORT/DB")
    return url


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Connect to the study storage; one clear line when it cannot be reached."""
    url = check_storage_url(url)
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kw = {"connect_args": {"timeout": 120}}
    elif url.startswith("postgresql"):
        kw = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    else:
        kw = {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():
            # The heartbeat (a killed worker's trial is failed, not left RUNNING) is the point
            # of this storage; Optuna's "experimental feature" notice on every call is not news.
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=kw, heartbeat_interval=30,
                                              grace_period=120)
    except Exception as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise ConfigError(f"storage={redact(url)}: cannot open the Optuna storage "
                          f"({reason[0] if reason else type(exc).__name__})") from None


def grid_axes(trials: int, params=("alpha", "lambda_eff")) -> dict[str, list[float]]:
    """A k x k grid (k = ceil(sqrt(trials)), at least 2): alpha log-spaced, fraction linear;
    alpha alone (``params=("alpha",)``): ``trials`` points (at least 2)."""
    if "lambda_eff" not in params:
        return {"alpha": [float(v) for v in np.geomspace(*ALPHA_RANGE, max(2, trials))]}
    k = max(2, math.ceil(math.sqrt(trials)))
    return {"alpha": [float(v) for v in np.geomspace(*ALPHA_RANGE, k)],
            "lambda_eff_fraction": [float(v) for v in np.linspace(*LAMBDA_FRACTION_RANGE, k)]}


def make_sampler(name: str, *, seed: int, trials: int,
                 params=("alpha", "lambda_eff")) -> optuna.samplers.BaseSampler:
    factories = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        # one grid order in every worker (trial n takes grid point n; Optuna asks for a
        # fixed seed per process in distributed optimisation, else workers repeat points)
        "grid": lambda: optuna.samplers.GridSampler(grid_axes(trials, params), seed=0),
    }
    if name not in factories:
        raise ConfigError(f"sampler={name!r} is unknown. Available: {list(SAMPLERS)}")
    return factories[name]()


def make_pruner(name: str) -> optuna.pruners.BasePruner:
    factories = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=5),
                 "none": optuna.pruners.NopPruner}
    if name not in factories:
        raise ConfigError(f"pruner={name!r} is unknown. Available: {list(PRUNERS)}")
    return factories[name]()


def parse_epochs(epochs) -> int | None:
    """``auto`` (the profile's epochs) -> None; ``N`` -> N (>= 1)."""
    return auto_or_count(epochs, "epochs", "the profile's")


def create_study(name: str, storage: optuna.storages.BaseStorage, storage_url: str,
                 binding: dict) -> optuna.Study:
    """Open (or make) the maximising study ``name``. A study belongs to one calibration
    (source run or recipe, target, data digest: ``binding``): its first call records them as
    study user attributes, and a later call with another binding is refused."""
    st = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                             load_if_exists=True)
    if st.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(f"study={name}: exists in {redact(storage_url)} but minimises")
    have = {k: st.user_attrs[k] for k in binding if k in st.user_attrs}
    if not have:
        if st.trials:  # made before studies were bound: keep it open, bind it now
            log.warning("study %s has trials but no recorded source run; binding it to %s",
                        name, binding)
        for k, v in binding.items():
            st.set_user_attr(k, v)
        return st
    diff = [f"{k.removeprefix('pipi.')} {have[k]} (this call: {binding[k]})"
            for k in binding if k in have and have[k] != binding[k]]
    if diff:
        raise ConfigError(f"study={name}: belongs to another calibration: " + "; ".join(diff)
                          + "; choose another study name, or leave study empty for the default")
    return st
