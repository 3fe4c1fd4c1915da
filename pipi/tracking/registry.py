"""Logged models and the registry: pyfunc logging, version tags, aliases."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

from pipi.errors import TrackingError
from pipi.serving.model_input import IMAGE_KEY, PIXELS_KEY
from pipi.tracking.liveness import ME
from pipi.tracking.records import VersionRecord, version_record
from pipi.tracking.tags import *  # noqa: F403

log = logging.getLogger(__name__)
from pipi.tracking.runs import get_run, log_artifact_to_run, usable_run

__all__ = [
    "VERSION_TAGS", "alias_version", "attach_to_version", "check_aliases", "download_model_files", "image_schema",
    "log_pyfunc_model", "missing_version_tags", "model_lock", "model_uri_run_id", "model_uri_version", "model_version",
    "record_on_version", "register_version", "run_model_uri", "run_version", "set_aliases",
    "set_registered_model_tags", "version_model_id",
]


def log_pyfunc_model(run_id: str, *, python_model: Path, artifacts: dict[str, str], input_example,
                     registered_model_name: str | None, signature_output,
                     code_paths: list[Path], pip_requirements: list[str],
                     params: Mapping[str, Any] | None = None, model_name: str = "model",
                     model_params: Mapping[str, Any] | None = None,
                     model_tags: Mapping[str, str] | None = None,
                     image_columns: bool = False, step: int = 0) -> Any:
    """Log (and register) a pyfunc model of run ``run_id`` (the active run) from code (``python_model``: the file that calls
    ``mlflow.models.set_model``) with signature and input example, named ``model_name`` (what
    the experiment's Models tab lists), with ``model_params`` and ``model_tags``, at ``step``
    (the selected epoch: MLflow links the run's metrics of that step to the model).

    The signature declares the outputs, ``params`` and, for a per-frame model
    (``image_columns``), the input columns the UI shows and MLflow checks (:func:`image_schema`):
    ``image``, a base64 JPEG/PNG string, or ``pixels``, one ``H x W x 3`` array (any size;
    ``pipi.serving.model_input`` checks the values itself). A sequence model declares the same
    two columns (the UI's Inputs (2), where it said Inputs (0)): ``image`` holds the base64
    frames of one clip, a row per frame; ``pixels`` one clip per row, a ``T x H x W x 3`` array.
    """
    from mlflow.models import ModelSignature, infer_signature

    # MLflow logs a model from code into the active run only: it must be the run named
    active = mlflow.active_run()
    if active is None or active.info.run_id != run_id:
        raise TrackingError(f"the model of run {run_id} would go to "
                            f"{'no run' if active is None else 'run ' + active.info.run_id}: "
                            "log it inside that run's pipi_run block")
    with warnings.catch_warnings():
        # MLflow's hint about integer columns (a sequence model's frame index in its output):
        # outputs are never enforced, so it was a dozen lines of noise per sequence model
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
        inferred = infer_signature(input_example, signature_output,
                                   params=dict(params or {}) or None)
        signature = ModelSignature(inputs=image_schema() if image_columns else None,
                                   outputs=inferred.outputs, params=inferred.params)
        return mlflow.pyfunc.log_model(
            name=model_name, python_model=str(python_model), artifacts=artifacts,
            signature=signature, input_example=input_example,
            pip_requirements=list(pip_requirements), code_paths=[str(c) for c in code_paths],
            registered_model_name=registered_model_name,
            params={k: str(v) for k, v in (model_params or {}).items()},
            tags=dict(model_tags or {}), step=int(step),
        )


def image_schema():
    """The input columns of a per-frame model: ``image`` (string: a base64 JPEG or PNG file) or
    ``pixels`` (any: an ``H x W x 3`` array of 0..255 integers or 0..1 floats), one per row."""
    from mlflow.types.schema import AnyType, ColSpec, Schema

    return Schema([ColSpec("string", IMAGE_KEY, required=False),
                   ColSpec(AnyType(), PIXELS_KEY, required=False)])


def set_registered_model_tags(name: str, tags: Mapping[str, Any]) -> None:
    c = MlflowClient()
    for k, v in tags.items():
        c.set_registered_model_tag(name, k, str(v))


#: The tags of every version pipi registers (``train`` and ``import``), all written in the
#: call that creates the version: ``promote`` refuses a version that lacks one.
VERSION_TAGS = ("run_id", "test_macro_auc", "recipe", "recipe_hash", "data_digest",
                "git_commit", "cell", "backbone", "seed")


def run_version(name: str, run_id: str):
    """The version of ``name`` registered from ``run_id`` (the oldest), or None."""
    try:
        found = MlflowClient().search_model_versions(
            f"name='{name}' and run_id='{run_id}'", order_by=["version_number ASC"])
    except Exception:  # noqa: BLE001 - no such registered model yet
        return None
    return found[0] if found else None


def missing_version_tags(mv) -> list[str]:
    """The :data:`VERSION_TAGS` a model version lacks."""
    return [k for k in VERSION_TAGS if k not in (mv.tags or {})]


def register_version(name: str, model_info, *, run_id: str, tags: Mapping[str, Any],
                     description: str | None = None) -> str:
    """Register a logged model as a version of ``name`` with all its tags and description in
    the one call that creates it (a signal never leaves a half-tagged version); a run that
    already has a version of ``name`` (a resume after the registration) keeps that one, its
    missing tags completed, instead of getting a second. Returns the version number."""
    c = MlflowClient()
    tags = {k: str(v)[:5000] for k, v in tags.items()}
    mv = run_version(name, run_id)
    if mv is not None:
        record_on_version(name, str(mv.version),
                          {k: v for k, v in tags.items() if k not in (mv.tags or {})},
                          description=description if description and not mv.description
                          else None)
        link_version(version_model_id(mv), name, str(mv.version))
        return str(mv.version)
    if model_info is None:
        raise TrackingError(f"model={name}: run {run_id} has no version to complete")
    try:
        c.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    model_id = getattr(model_info, "model_id", None)
    mv = c.create_model_version(name, source=model_info.model_uri, run_id=run_id, tags=tags,
                                description=description, model_id=model_id)
    link_version(model_id, name, str(mv.version))
    return str(mv.version)


def version_model_id(mv) -> str | None:
    """The logged model a version was registered from: ``mv.model_id`` where the registry
    keeps it, else the id in its ``models:/<model id>`` source (MLflow's SQL registry store
    keeps only the source: a version read back from it has ``model_id`` None)."""
    mid = getattr(mv, "model_id", None)
    if mid:
        return mid
    source = str(getattr(mv, "source", "") or "")
    if source.startswith("models:/m-"):
        return source.removeprefix("models:/").split("/", 1)[0]
    return None


def link_version(model_id: str | None, name: str, version: str) -> None:
    """Record the version on its logged model as ``mlflow.register_model`` does (the logged
    model's ``mlflow.modelVersions`` tag: a JSON list of ``{"name", "version"}``), so the UI's
    model page shows the registered version instead of a Register button, and its Models tab
    the model. Idempotent (a resume adds no second entry)."""
    if not model_id:
        return
    c = MlflowClient()
    try:
        model = c.get_logged_model(model_id)
    except MlflowException:   # a model id of another workspace: as register_model, no link
        return
    links = json.loads(model.tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
    entry = {"name": name, "version": int(version) if str(version).isdigit() else version}
    if any(str(x.get("name")) == name and str(x.get("version")) == str(version) for x in links):
        return
    c.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(links + [entry])})


def run_model_uri(run_id: str, name: str | None = None) -> str:
    """``models:/<model id>`` of the model called ``name`` that the run logged (``None``: the
    last model it logged; a training run logs one, named ``<prefix>-<backbone>-<cell>``, or
    ``model`` before 0.1's issue 30)."""
    run = get_run(run_id)
    models = [mlflow.get_logged_model(mid) for mid in run.model_ids]
    if name is not None:
        models = [m for m in models if m.name == name]
    if models:
        return f"models:/{max(models, key=lambda m: m.creation_timestamp).model_id}"
    tags = run.tags
    if tags.get(TAG_SOURCE_KIND) == "predictions":
        raise TrackingError(
            f"run {run_id} is an imported prediction file ({tags.get(TAG_SOURCE_FILE, '')}): "
            "it holds predictions, no model, so nothing can be run on new inputs; import the "
            "checkpoint (pipi import checkpoint) or train the cell, and use that run")
    what = f"no model named {name!r}" if name else "no model"
    raise TrackingError(f"run {run_id} logged {what}")


def download_model_files(run_id: str, dst: Path, name: str | None = None) -> Path:
    """Download the files of a run's logged model (MLmodel, artifacts/...) into ``dst``."""
    uri = run_model_uri(run_id, name)
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst)))
    except Exception as exc:
        raise TrackingError(f"run {run_id}: cannot download model {uri} ({exc})") from None


def _registered_ref(uri: str) -> tuple[str, str, str]:
    """(name, version, alias) of ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS``; empty
    strings for another URI (a logged model's ``models:/<id>``, ``runs:/``, a folder)."""
    ref = uri.removeprefix("models:/").strip("/") if uri.startswith("models:/") else ""
    if "@" in ref:
        name, _, alias = ref.partition("@")
        return name, "", alias
    if "/" in ref:
        name, _, version = ref.rpartition("/")
        return name, version, ""
    return "", "", ""


def model_uri_version(uri: str) -> VersionRecord | None:
    """The registered version a ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` URI names
    (an alias read now), None for another URI; TrackingError naming what is missing."""
    name, version, alias = _registered_ref(uri)
    return model_version(name, version or None, alias=alias or None) if name else None


def model_uri_run_id(uri: str) -> str:
    """The run that logged the model of ``models:/NAME/VERSION``, ``models:/NAME@ALIAS`` or
    ``models:/<logged model id>``; TrackingError naming the URI when there is none."""
    ref = uri.removeprefix("models:/").strip("/")
    name, version, alias = _registered_ref(uri)
    c = MlflowClient()
    try:
        if alias:
            run_id = c.get_model_version_by_alias(name, alias).run_id
        elif name:
            run_id = c.get_model_version(name, version).run_id
        else:
            run_id = mlflow.get_logged_model(ref).source_run_id
    except Exception as exc:  # noqa: BLE001 - MlflowException or REST error
        raise TrackingError(f"{uri}: no such registered model version, alias or logged model "
                            f"on {mlflow.get_tracking_uri()} ({exc})") from None
    if not run_id:
        raise TrackingError(f"{uri}: the model is not linked to a run")
    usable_run(run_id, what=uri)
    return run_id


# --------------------------------------------------------------------------- promotion
def model_version(name: str, version: str | None = None, *, alias: str | None = None
                  ) -> VersionRecord:
    """A registered model version by number or alias (TrackingError naming what is missing)."""
    c = MlflowClient()
    try:
        if version:
            return version_record(c.get_model_version(name, str(version)))
        return version_record(c.get_model_version_by_alias(name, alias))
    except Exception as exc:  # noqa: BLE001 - MlflowException (missing) or REST error
        what = f"version {version}" if version else f"alias @{alias}"
        raise TrackingError(f"model={name}: no {what} in the registry of "
                            f"{mlflow.get_tracking_uri()} ({str(exc).splitlines()[0][:200]})"
                            ) from None


def alias_version(name: str, alias: str) -> str | None:
    """The version number an alias points at, or None."""
    try:
        return str(MlflowClient().get_model_version_by_alias(name, alias).version)
    except Exception:  # noqa: BLE001 - no such alias
        return None


def set_aliases(name: str, aliases: Mapping[str, str | None]) -> None:
    """Point each alias at a version (None: delete the alias)."""
    c = MlflowClient()
    for alias, version in aliases.items():
        if version is None:
            if alias_version(name, alias) is not None:
                c.delete_registered_model_alias(name, alias)
        else:
            c.set_registered_model_alias(name, alias, str(version))


def attach_to_version(name: str, version: str, path: Path, artifact_path: str,
                      tag: str) -> str:
    """Keep the file ``path`` beside a registered version: an artifact of the run that logged
    it (under ``artifact_path``), named on the version by the tag ``tag`` (its ``runs:/``
    URI, returned). One line when no run logged the version."""
    run_id = MlflowClient().get_model_version(name, str(version)).run_id
    if not run_id:
        raise TrackingError(f"models:/{name}/{version}: no run logged this version; there is "
                            "nowhere beside it to keep the file")
    log_artifact_to_run(run_id, Path(path), artifact_path)
    uri = f"runs:/{run_id}/{artifact_path}/{Path(path).name}"
    record_on_version(name, version, {tag: uri})
    return uri


def record_on_version(name: str, version: str, tags: Mapping[str, Any],
                      description: str | None = None) -> None:
    """Set version tags (values as strings, at most 5000 characters) and the description."""
    c = MlflowClient()
    for k, v in tags.items():
        c.set_model_version_tag(name, str(version), k, str(v)[:5000])
    if description is not None:
        c.update_model_version(name, str(version), description=description)


@contextlib.contextmanager
def model_lock(name: str, *, wait_s: float = 120.0, stale_s: float = 600.0,
               settle_s: float = 0.5) -> Iterator[None]:
    """Hold the registered model's promotion lock while the block runs.

    MLflow's registry has no compare-and-set, so the lock is a registered-model tag that a
    process writes and reads back after ``settle_s`` (longer than a tag write takes): of two
    writers the last one holds it and the other waits. A lock older than ``stale_s`` (its
    process was killed) is taken over; one held longer than ``wait_s`` is an error.
    """
    c = MlflowClient()
    token = f"{ME} {time.time():.3f}"
    deadline = time.time() + wait_s
    while True:
        held = c.get_registered_model(name).tags.get(TAG_PROMOTE_LOCK, "")
        who, _, since = held.rpartition(" ")
        try:
            age = time.time() - float(since)
        except ValueError:
            age = float("inf")
        if held and who != ME and age < stale_s:
            if time.time() > deadline:
                raise TrackingError(
                    f"model={name}: another promotion ({who}) has held the registry lock for "
                    f"{age:.0f} s; try again when it is done (a lock older than {stale_s:.0f} s "
                    "is taken over)")
            time.sleep(0.25)
            continue
        c.set_registered_model_tag(name, TAG_PROMOTE_LOCK, token)
        time.sleep(settle_s)
        if c.get_registered_model(name).tags.get(TAG_PROMOTE_LOCK) == token:
            break
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            if c.get_registered_model(name).tags.get(TAG_PROMOTE_LOCK) == token:
                c.delete_registered_model_tag(name, TAG_PROMOTE_LOCK)


def check_aliases(name: str, expected: Mapping[str, str | None]) -> None:
    """Re-read the aliases after a move; TrackingError naming what differs."""
    wrong = {a: (v, alias_version(name, a)) for a, v in expected.items()
             if alias_version(name, a) != (str(v) if v is not None else None)}
    if wrong:
        raise TrackingError(f"model={name}: after the move " + "; ".join(
            f"@{a} is version {got}, not {want}" for a, (want, got) in wrong.items())
            + ": another process changed the aliases at the same time; check them with "
            "the MLflow UI and promote again")
