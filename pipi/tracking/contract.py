"""The run contract's keys and tags, built in one place for every kind of run.

``config_key`` (recipe + data digest + code version) is what makes two runs the same
experiment: its hash, tag ``pipi.config_hash``, is the idempotency key of sweeps.
``recipe_key`` leaves the code version out: its hash, ``pipi.recipe_hash``, tells
``aggregate`` which runs share a recipe. A run made from an outside file (``import``) has
its own key (:func:`import_key`: the file's hash, its settings, the data, the label) and
says where it came from (:func:`import_tags`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pipi.cells import EXTERNAL_SOURCE
from pipi.classes import CLASSES
from pipi.config import TrainConfig, recipe_command, recipe_key
from pipi.tracking.store import code_version, config_hash
from pipi.tracking.tags import (
    TAG_BACKBONE,
    TAG_BASE_RUN,
    TAG_CELL,
    TAG_CONFIG_HASH,
    TAG_DATA_DIGEST,
    TAG_DATASET,
    TAG_EVALUABLE_CLASSES,
    TAG_IMPORT_PREFIX,
    TAG_PARENT_RUN,
    TAG_RECIPE,
    TAG_RECIPE_HASH,
    TAG_SEED,
    TAG_SOURCE,
    TAG_SOURCE_FILE,
    TAG_SOURCE_KIND,
    TAG_SOURCE_LABEL,
    TAG_SOURCE_RUN,
    TAG_SOURCE_SHA,
    TAG_SPLIT_SHA,
    TAG_STUDY,
    TAG_TEST_CLASSES,
    TAG_VAL_CLASSES,
    TAG_VARIANT,
)

__all__ = [
    "SOURCE_EXTERNAL", "class_tags", "config_key", "data_tags", "evaluation_key",
    "evaluation_tags", "import_key", "import_tags", "import_version_tags", "train_tags",
]

#: ``pipi.source`` of a run made from an outside file (``aggregate`` keeps such runs in their
#: own arms).
SOURCE_EXTERNAL = EXTERNAL_SOURCE


def config_key(cfg: TrainConfig, data_digest: str) -> dict:
    """What makes two training runs the same experiment (the idempotency key of sweeps)."""
    return {**recipe_key(cfg, data_digest), "code": code_version()}


def data_tags(manifest: Mapping[str, Any]) -> dict:
    """Which data, exactly: dataset name, data digest, split hash."""
    return {TAG_DATASET: manifest.get("dataset", "kvasir-capsule"),
            TAG_DATA_DIGEST: manifest["data_digest"], TAG_SPLIT_SHA: manifest["content_sha256"]}


def train_tags(cfg: TrainConfig, manifest: Mapping[str, Any], *, data: str | None = None,
               precision: str | None = None, env_manager: str = "local") -> dict:
    """The tags of a training run: data, arm, config and recipe hashes, the recipe command
    (naming the resolved ``precision`` when ``auto`` gave mixed precision, and the
    ``env_manager`` the run computed in: :func:`pipi.tracking.runs.launch_env_manager`)."""
    digest = manifest["data_digest"]
    return {**data_tags(manifest), TAG_CELL: cfg.cell, TAG_BACKBONE: cfg.backbone,
            TAG_SEED: str(cfg.seed), TAG_CONFIG_HASH: config_hash(config_key(cfg, digest)),
            TAG_RECIPE_HASH: config_hash(recipe_key(cfg, digest)),
            TAG_RECIPE: recipe_command(cfg, data=data, precision=precision,
                                       env_manager=env_manager)}


def evaluation_key(*, study: str, variant: str, source_run_id: str, data_digest: str,
                   options: Mapping[str, Any] | None = None) -> str:
    """Idempotency key of scoring a finished run under a transform (a child of a study)."""
    return config_hash({"study": study, "variant": variant, "source_run_id": source_run_id,
                        "data_digest": data_digest, "options": dict(options or {}),
                        "code": code_version()})


def evaluation_tags(cfg: TrainConfig, manifest: Mapping[str, Any], *, study: str, variant: str,
                    source_run_id: str, key: str, parent_run_id: str | None) -> dict:
    """Tags of an evaluation child: arm ``<cell>@<variant>``, study, source run, data."""
    tags = {**data_tags(manifest), TAG_CELL: f"{cfg.cell}@{variant}", TAG_BACKBONE: cfg.backbone,
            TAG_SEED: str(cfg.seed), TAG_CONFIG_HASH: key, TAG_BASE_RUN: source_run_id,
            TAG_SOURCE_RUN: source_run_id, TAG_STUDY: study, TAG_VARIANT: variant}
    if parent_run_id:
        tags[TAG_PARENT_RUN] = parent_run_id
    return tags


def class_tags(*, test: Sequence[int], val: Sequence[int],
               names: Sequence[str] = CLASSES) -> dict:
    """Headline classes (test positives) and selection classes (val positives), by name
    (``names``: the class set in index order, Kvasir's 14 by default)."""
    test_names = json.dumps([names[k] for k in test])
    return {TAG_TEST_CLASSES: test_names, TAG_VAL_CLASSES: json.dumps([names[k] for k in val]),
            TAG_EVALUABLE_CLASSES: test_names}


def import_key(*, kind: str, sha256: str, params: Mapping[str, Any], data_digest: str,
               label: str) -> dict:
    """What makes two imports the same (code version left out): the file, its settings,
    the data and the label."""
    return {"import": kind, "sha256": sha256, "config": dict(params), "data_digest": data_digest,
            "label": label}


def import_tags(manifest: Mapping[str, Any], *, kind: str, cell: str, backbone: str, seed: int,
                params: Mapping[str, Any], sha256: str, file_name: str, label: str, recipe: str,
                facts: Mapping[str, Any]) -> dict:
    """The tags of an ``import`` run: data, arm, config hash (:func:`import_key` + code
    version; the idempotency key), recipe hash (the key without the file hash), the recipe
    command, where the file came from (``pipi.source*``) and one ``pipi.import.<fact>`` per
    fact of the file."""
    key = import_key(kind=kind, sha256=sha256, params=params,
                     data_digest=manifest["data_digest"], label=label)
    return {**data_tags(manifest), TAG_CELL: cell, TAG_BACKBONE: backbone, TAG_SEED: str(seed),
            TAG_CONFIG_HASH: config_hash({**key, "code": code_version()}),
            TAG_RECIPE_HASH: config_hash(key | {"sha256": ""}), TAG_RECIPE: recipe,
            TAG_SOURCE: SOURCE_EXTERNAL, TAG_SOURCE_KIND: kind, TAG_SOURCE_SHA: sha256,
            TAG_SOURCE_FILE: file_name, TAG_SOURCE_LABEL: label,
            **{TAG_IMPORT_PREFIX + k: v for k, v in facts.items()}}


def import_version_tags(*, sha256: str, label: str) -> dict:
    """What the registered model version of an imported checkpoint says of its source."""
    return {"source": SOURCE_EXTERNAL, "source_sha256": sha256, "source_label": label}
