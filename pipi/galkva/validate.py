"""Validate a GalKva-2026 submission against its draft-07 JSON Schema (shipped with pipi).

The published evaluator never validates; here every submission is checked with
``jsonschema.Draft7Validator`` and format checking (e-mail, URIs), plus two consistency
rules the schema cannot express (sign-positive seeds k <= n, seed counts that agree).
Each problem is a :class:`Violation` with its JSON path and a one-line fix.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from pipi.classes import CLASSES
from pipi.errors import DataError

__all__ = ["Violation", "load_submission", "submission_schema", "validate_submission"]


@dataclass(frozen=True)
class Violation:
    """One problem of a submission: where (JSON path), what, and how to fix it."""

    path: str  # "$.results.galar.macro_auc.sd"
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.fix}"


@cache
def submission_schema() -> dict:
    """The draft-07 schema of a submission (``pipi/galkva/submission_schema.json``)."""
    text = resources.files("pipi.galkva").joinpath("submission_schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator() -> Draft7Validator:
    schema = submission_schema()
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema, format_checker=Draft7Validator.FORMAT_CHECKER)


def load_submission(obj_or_path) -> dict:
    """A submission as a dict: a dict passes through; a path is read as JSON."""
    if isinstance(obj_or_path, dict):
        return obj_or_path
    path = Path(obj_or_path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read the submission ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}, line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    return doc


# Field-specific fixes, keyed by the last path element.
_FIELD_FIX = {
    "benchmark_version": 'write the version as "v<major>.<minor>", e.g. "v1.0"',
    "sign_positive_seeds": 'write "<positive seeds>/<seeds>", e.g. "4/6"',
    "email": "give a contact e-mail address such as name@lab.org",
    "preprint_url": "give an absolute URL such as https://arxiv.org/abs/2605.01234",
    "code_url": "give an absolute URL such as https://github.com/lab/method",
    "trained_on": 'use one of "Kvasir-Capsule", "Galar", "Both", "Other"',
    "description": "describe the method in at least 20 characters",
    "name": "give a non-empty name (at most 120 characters for a method)",
}
_TYPE_WORDS = {"number": "a number", "integer": "an integer", "string": "a string",
               "object": "an object", "array": "a list", "null": "null"}


def _json_path(parts) -> str:
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(p)):
            out += f".{p}"
        else:
            out += f"[{json.dumps(p)}]"
    return out


def _closest(name: str, options) -> str | None:
    hits = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return hits[0] if hits else None


def _from_error(err: ValidationError) -> list[Violation]:
    parts = list(err.absolute_path)
    path = _json_path(parts)
    field = str(parts[-1]) if parts else ""
    kw = err.validator
    if kw == "required":
        missing = re.match(r"'(.+)' is a required property", err.message)
        name = missing.group(1) if missing else "?"
        hint = _FIELD_FIX.get(name, "see the schema (pipi/galkva/submission_schema.json)")
        return [Violation(_json_path([*parts, name]), "required field is missing",
                          f"add '{name}': {hint}")]
    if kw == "additionalProperties":
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - allowed) if isinstance(err.instance, dict) else []
        out = []
        for name in extra:
            near = _closest(name, allowed)
            fix = (f"rename it to '{near}'" if near
                   else f"remove it; allowed here: {sorted(allowed)}")
            out.append(Violation(_json_path([*parts, name]), "field not allowed by the schema", fix))
        return out or [Violation(path, err.message, "remove the unexpected fields")]
    if "propertyNames" in err.absolute_schema_path:  # a key not in the allowed names
        name = err.instance
        options = err.validator_value if kw == "enum" else []
        near = _closest(str(name), options)
        fix = f"rename it to '{near}'" if near else f"use one of {options}"
        what = "class name" if set(options) <= set(CLASSES) else "key"
        return [Violation(_json_path([*parts, name]), f"unknown {what} {name!r}", fix)]
    if kw == "type":
        want = err.validator_value
        want = [want] if isinstance(want, str) else want
        words = " or ".join(_TYPE_WORDS.get(w, w) for w in want)
        return [Violation(path, f"{err.instance!r} is not {words}", f"make it {words}")]
    if kw in ("minimum", "maximum"):
        side = ">=" if kw == "minimum" else "<="
        return [Violation(path, f"{err.instance!r} is out of range",
                          f"use a value {side} {err.validator_value}")]
    if kw == "minLength":
        return [Violation(path, f"too short ({len(err.instance)} characters)",
                          _FIELD_FIX.get(field, f"write at least {err.validator_value} characters"))]
    if kw == "maxLength":
        return [Violation(path, f"too long ({len(err.instance)} characters)",
                          f"shorten it to at most {err.validator_value} characters")]
    if kw == "minItems":
        return [Violation(path, "empty list", f"give at least {err.validator_value} value(s)")]
    if kw == "enum":
        near = _closest(str(err.instance), [str(v) for v in err.validator_value])
        fix = f"use '{near}'" if near else f"use one of {err.validator_value}"
        return [Violation(path, f"{err.instance!r} is not an allowed value", fix)]
    if kw in ("pattern", "format"):
        what = ("does not match the required format" if kw == "pattern"
                else f"is not a valid {err.validator_value}")
        return [Violation(path, f"{err.instance!r} {what}",
                          _FIELD_FIX.get(field, f"follow the {kw} {err.validator_value!r}"))]
    return [Violation(path, err.message, "see the schema (pipi/galkva/submission_schema.json)")]


def _consistency(doc: dict) -> list[Violation]:
    """Rules the schema cannot state; run only on a schema-valid submission."""
    out = []
    n_seeds = doc.get("n_seeds")
    for ds in ("kvasir", "galar"):
        res = doc["results"][ds]
        sps = res.get("sign_positive_seeds")
        per_seed = res["macro_auc"].get("per_seed_values")
        if sps is not None:
            k, n = (int(x) for x in sps.split("/"))
            p = f"$.results.{ds}.sign_positive_seeds"
            if n == 0 or k > n:
                out.append(Violation(p, f"{sps!r} counts {k} positive of {n} seeds",
                                     "write k/n with 0 <= k <= n and n >= 1"))
            elif n_seeds is not None and n != n_seeds:
                out.append(Violation(p, f"{sps!r} is over {n} seeds but n_seeds is {n_seeds}",
                                     "make the two seed counts agree"))
        if per_seed is not None and n_seeds is not None and len(per_seed) != n_seeds:
            out.append(Violation(
                f"$.results.{ds}.macro_auc.per_seed_values",
                f"{len(per_seed)} values but n_seeds is {n_seeds}",
                "give one value per seed, or correct n_seeds",
            ))
    return out


def validate_submission(obj_or_path) -> list[Violation]:
    """Every problem of a submission (a dict or a JSON file); an empty list when valid.

    Unreadable or malformed JSON is reported as a single violation at ``$``.
    """
    try:
        doc = load_submission(obj_or_path)
    except DataError as exc:
        return [Violation("$", str(exc), "fix the file so that it is one JSON object")]
    errors = sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    out: list[Violation] = []
    for err in errors:
        out.extend(_from_error(err))
    if not out:
        out = _consistency(doc)
    return out
