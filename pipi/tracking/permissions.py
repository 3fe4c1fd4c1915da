"""What a team member may do on a basic-auth lab server, checked before the work starts.

On ``pipi server --auth`` (MLflow's basic-auth app, ``default_permission = READ``) a member
creates runs only in experiments they made (or were given EDIT on), and adds versions only to
registered models they made: the first member to register ``pipi-<backbone>-<cell>``
manages it, and everybody else's training used to end, after the whole fit, with a 403 on
``model-versions/create``. These checks ask the server (the user's own record and their
effective permission on the experiment or model, which a user may read about themselves)
and turn a refusal into one line saying what to do. Against a server without the auth app,
or without credentials, they do nothing (the probe and MLflow deal with those).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextvars import ContextVar

import mlflow

from pipi.errors import ConfigError, TrackingError

__all__ = ["DEFAULT_MODEL_PREFIX", "MODEL_PREFIX_ENV", "check_can_create_runs", "check_can_register", "model_prefix",
           "using_model_prefix"]

MODEL_PREFIX_ENV = "PIPI_MODEL_PREFIX"
DEFAULT_MODEL_PREFIX = "pipi"
#: Letters, digits, ``_``, ``.``, ``-``: what a registered model name and a models:/ URI take.
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CAN_UPDATE = ("EDIT", "MANAGE")


#: The prefix a command chose (``--model-prefix``), for the code it calls: a context value
#: (:func:`using_model_prefix`), never written into ``os.environ`` (issue 39).
_CHOSEN: ContextVar[str | None] = ContextVar("pipi_model_prefix", default=None)


def model_prefix() -> str:
    """The first part of registered model names: the one a command chose
    (:func:`using_model_prefix`), else ``$PIPI_MODEL_PREFIX``, else ``pipi``."""
    prefix = (_CHOSEN.get() or os.environ.get(MODEL_PREFIX_ENV, "")).strip() \
        or DEFAULT_MODEL_PREFIX
    if not _PREFIX.match(prefix):
        raise ConfigError(f"model prefix {prefix!r} ({MODEL_PREFIX_ENV} / model_prefix): use "
                          "letters, digits, '_', '.' or '-' (at most 64), e.g. alice")
    return prefix


@contextlib.contextmanager
def using_model_prefix(prefix: str | None) -> Iterator[str]:
    """Register under ``prefix`` inside the block (None or blank: the prefix already in use);
    yields the prefix, checked. A command's ``--model-prefix`` reaches the code it calls this
    way, and a process it starts gets it as an argument (``-P model_prefix=``): pipi writes
    no prefix into ``os.environ``."""
    token = _CHOSEN.set(prefix.strip() if prefix and prefix.strip() else _CHOSEN.get())
    try:
        yield model_prefix()
    finally:
        _CHOSEN.reset(token)


def _credentials() -> tuple[str, str] | None:
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    return (user, password) if user and password else None


def _get(uri: str, path: str, params: dict, creds, *, version: str = "2.0"):
    """(status, JSON body or None) of a GET on the server's REST API."""
    url = f"{uri.rstrip('/')}/api/{version}/mlflow/{path}?{urllib.parse.urlencode(params)}"
    token = base64.b64encode(":".join(creds).encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return None, None


def _member(uri: str):
    """(credentials, is_admin) of the logged-in user on an auth server, else None."""
    if not uri.startswith(("http://", "https://")):
        return None
    creds = _credentials()
    if creds is None:
        return None
    status, body = _get(uri, "users/get", {"username": creds[0]}, creds)
    if status != 200 or not body or "user" not in body:
        return None  # no auth app (404), or the probe's and MLflow's business
    return creds, bool(body["user"].get("is_admin"))


def _permission(uri: str, creds, resource_type: str, resource_id: str) -> str | None:
    status, body = _get(uri, "users/permissions/get", {
        "username": creds[0], "resource_type": resource_type, "resource_id": resource_id},
        creds, version="3.0")
    return body.get("permission") if status == 200 and body else None


def check_can_create_runs(experiment: str, uri: str | None = None) -> None:
    """One line, before a run starts, when the user may not create runs in ``experiment``
    (a name or an id) on an auth server; a new experiment is the user's own."""
    uri = uri or mlflow.get_tracking_uri()
    member = _member(uri)
    if member is None or member[1]:
        return
    creds = member[0]
    if experiment.isdigit():
        status, body = _get(uri, "experiments/get", {"experiment_id": experiment}, creds)
    else:
        status, body = _get(uri, "experiments/get-by-name", {"experiment_name": experiment},
                            creds)
    if status != 200 or not body:
        return  # absent: creating it makes the user its manager
    exp = body["experiment"]
    perm = _permission(uri, creds, "experiment", exp["experiment_id"])
    if perm is not None and perm not in _CAN_UPDATE:
        raise TrackingError(
            f"user {creds[0]} may not create runs in experiment {exp['name']!r} on {uri} "
            f"(permission {perm}): use an experiment of your own (mlflow run "
            "--experiment-name <name>, or pipi <command> --experiment <name>; it is created "
            "for you) or ask the server's admin for EDIT on it")


def check_can_register(name: str, uri: str | None = None) -> None:
    """One line, before training, when the user may not add versions to the registered
    model ``name`` on an auth server (it exists and belongs to someone else)."""
    uri = uri or mlflow.get_tracking_uri()
    member = _member(uri)
    if member is None or member[1]:
        return
    creds = member[0]
    status, _ = _get(uri, "registered-models/get", {"name": name}, creds)
    if status != 200:
        return  # absent: registering it makes the user its manager
    perm = _permission(uri, creds, "registered_model", name)
    if perm is not None and perm not in _CAN_UPDATE:
        raise TrackingError(
            f"user {creds[0]} may not add versions to the registered model {name!r} on {uri} "
            f"(permission {perm}; another member registered it first): register under your "
            f"own names with -P model_prefix={creds[0]} (pipi train --model-prefix "
            f"{creds[0]}, or {MODEL_PREFIX_ENV}={creds[0]}), or ask the server's admin for "
            f"EDIT on {name}")
