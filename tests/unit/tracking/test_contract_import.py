"""The run contract of an ``import`` run has one writer, ``tracking.import_tags``: its keys
checked against the published definition (SHA-256 of the canonical JSON, 16 hex)."""

from __future__ import annotations

import hashlib
import json

from pipi import tracking

MANIFEST = {"dataset": "kvasir-capsule", "data_digest": "d" * 64, "content_sha256": "s" * 64}
PARAMS = {"cell": "pi", "backbone": "efficientnet_b0", "seed": "7", "profile": "smoke"}


def _sha16(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _tags(**kw):
    args = {"kind": "checkpoint", "cell": "pi", "backbone": "efficientnet_b0", "seed": 7,
            "params": PARAMS, "sha256": "f" * 64, "file_name": "pi_s7.pth",
            "label": "released", "recipe": "mlflow run . -e import -P kind=checkpoint",
            "facts": {"matched": "42"}}
    return tracking.import_tags(MANIFEST, **{**args, **kw})


def test_import_tags_name_the_data_the_arm_and_the_file(monkeypatch):
    monkeypatch.setenv(tracking.CODE_VERSION_ENV, "code-1")
    t = _tags()
    key = {"import": "checkpoint", "sha256": "f" * 64, "config": PARAMS,
           "data_digest": "d" * 64, "label": "released"}
    assert t == {
        "pipi.dataset": "kvasir-capsule", "pipi.data_digest": "d" * 64,
        "pipi.split_sha256": "s" * 64, "pipi.cell": "pi", "pipi.backbone": "efficientnet_b0",
        "pipi.seed": "7", "pipi.config_hash": _sha16({**key, "code": "code-1"}),
        "pipi.recipe_hash": _sha16({**key, "sha256": ""}),
        "pipi.recipe": "mlflow run . -e import -P kind=checkpoint",
        "pipi.source": "external", "pipi.source_kind": "checkpoint",
        "pipi.source_sha256": "f" * 64, "pipi.source_file": "pi_s7.pth",
        "pipi.source_label": "released", "pipi.import.matched": "42"}
    assert tracking.contract.import_key(kind="checkpoint", sha256="f" * 64, params=PARAMS,
                               data_digest="d" * 64, label="released") == key


def test_the_config_hash_follows_file_and_code_the_recipe_hash_neither(monkeypatch):
    monkeypatch.setenv(tracking.CODE_VERSION_ENV, "code-1")
    a = _tags()
    other_file = _tags(sha256="e" * 64)
    monkeypatch.setenv(tracking.CODE_VERSION_ENV, "code-2")
    other_code = _tags()
    for b in (other_file, other_code):
        assert b[tracking.tags.TAG_CONFIG_HASH] != a[tracking.tags.TAG_CONFIG_HASH]
        assert b[tracking.tags.TAG_RECIPE_HASH] == a[tracking.tags.TAG_RECIPE_HASH]
    assert _tags(label="other")[tracking.tags.TAG_RECIPE_HASH] != other_code[tracking.tags.TAG_RECIPE_HASH]


def test_an_imported_version_says_where_it_came_from():
    assert tracking.import_version_tags(sha256="f" * 64, label="released") == {
        "source": "external", "source_sha256": "f" * 64, "source_label": "released"}
