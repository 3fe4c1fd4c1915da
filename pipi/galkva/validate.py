"""Validate a GalKva-2026 submission against the benchmark's released draft-07 JSON Schema.

The schema is the released file itself (``pipi/galkva/submission_schema.json`` is a
byte-exact copy of the benchmark's ``submission_schema.json``; a test keeps them identical),
checked with ``jsonschema.Draft7Validator`` and format checking (e-mail, URIs). What it
accepts is accepted: ``n_positive`` and every per-class key are optional, and the top level
allows extra keys. Two kinds of problems:

* **errors** (:func:`validate_submission`): the released schema refuses the document, or it
  is not JSON the benchmark can read (unreadable, binary, nested too deeply, or a number
  written ``NaN``/``Infinity``, which JSON does not have);
* **pipi's warnings** (:func:`check_submission`): numbers that contradict each other, a
  ``sign_positive_seeds`` over another count of seeds than ``per_seed_values``, keys the
  schema does not know (probably misspelt) ... reported, labelled as pipi's, never a refusal.

Each problem is a :class:`Violation` with its JSON path and a one-line fix.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from pipi.classes import CLASSES
from pipi.errors import DataError

__all__ = ["SCHEMA_FILE", "Violation", "check_submission", "load_submission",
           "submission_schema", "validate_submission"]

#: Where the released schema lives in the package (a byte-exact copy of the released file).
SCHEMA_FILE = "pipi/galkva/submission_schema.json"
ERROR, WARNING = "error", "warning"
#: Deepest nesting read (the submission format is 5 levels deep).
MAX_DEPTH = 64


@dataclass(frozen=True)
class Violation:
    """One problem of a submission: where (JSON path), what, and how to fix it.

    ``severity`` "error": the released schema refuses it (or it is not readable JSON);
    "warning": one of pipi's own checks, beyond the released schema (never a refusal).
    """

    path: str  # "$.results.galar.macro_auc.sd"
    message: str
    fix: str
    severity: str = ERROR

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}. Fix: {self.fix}"
        return f"pipi warning (not a schema error): {text}" if self.severity == WARNING else text


@cache
def submission_schema() -> dict:
    """The released draft-07 schema of a submission (:data:`SCHEMA_FILE`)."""
    text = resources.files("pipi.galkva").joinpath("submission_schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator() -> Draft7Validator:
    schema = submission_schema()
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema, format_checker=Draft7Validator.FORMAT_CHECKER)


def _depth(doc) -> int:
    """Nesting depth of a JSON value, without recursion (a hostile file cannot overflow it)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def load_submission(obj_or_path) -> dict:
    """A submission as a dict: a dict passes through; a path is read as JSON.

    Raises :class:`DataError` (one line naming the file) when the file cannot be read, is not
    UTF-8 text, is not valid JSON or is nested deeper than :data:`MAX_DEPTH`.
    """
    if isinstance(obj_or_path, dict):
        return obj_or_path
    path = Path(obj_or_path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise DataError(f"{path}: cannot read the submission ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not a UTF-8 text file (byte {exc.start}); a submission is "
                        "a JSON file") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}, line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to read; a submission is at most "
                        "5 levels deep") from None
    except ValueError as exc:  # valid JSON Python will not read, e.g. a 5,000-digit integer
        raise DataError(f"{path}: a JSON value pipi cannot read "
                        f"({str(exc).split(';')[0].strip()}); a submission's numbers are "
                        "AUCs, counts and seeds") from None
    if _depth(doc) > MAX_DEPTH:
        raise DataError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep; a submission "
                        "is at most 5 levels deep")
    return doc


def _non_finite(doc) -> list[Violation]:
    """Every NaN / Infinity (JSON has no such numbers; Python's json reads them anyway)."""
    out, stack = [], [(doc, [])]
    while stack:
        x, parts = stack.pop()
        if isinstance(x, dict):
            stack.extend((v, [*parts, k]) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, [*parts, i]) for i, v in enumerate(x))
        elif isinstance(x, float) and not math.isfinite(x):
            word = "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
            out.append(Violation(_json_path(parts), f"{word} is not a JSON number",
                                 "write a finite number, or leave the field out where it is "
                                 "optional"))
    return sorted(out, key=lambda v: v.path)


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
    """The option closest to ``name``, ignoring case (None if none is close)."""
    lower = {str(o).lower(): o for o in options}
    hits = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=0.6)
    return lower[hits[0]] if hits else None


def _from_error(err: ValidationError) -> list[Violation]:
    parts = list(err.absolute_path)
    path = _json_path(parts)
    field = str(parts[-1]) if parts else ""
    kw = err.validator
    if kw == "required":
        missing = re.match(r"'(.+)' is a required property", err.message)
        name = missing.group(1) if missing else "?"
        hint = _FIELD_FIX.get(name, f"see the schema ({SCHEMA_FILE})")
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
    return [Violation(path, err.message, f"see the schema ({SCHEMA_FILE})")]


def validate_submission(obj_or_path) -> list[Violation]:
    """Every error of a submission (a dict or a JSON file) under the released schema; an
    empty list when the benchmark accepts it. pipi's own checks: :func:`check_submission`.

    An unreadable file, a file that is not JSON, or one nested too deeply is one violation at
    ``$``; NaN/Infinity are violations at their JSON path.
    """
    try:
        doc = load_submission(obj_or_path)
    except DataError as exc:
        return [Violation("$", str(exc), "fix the file so that it is one JSON object")]
    out = _non_finite(doc)
    try:
        errors = sorted(_validator().iter_errors(doc),
                        key=lambda e: [str(p) for p in e.absolute_path])
    except RecursionError:
        return [Violation("$", "nested too deeply to validate", "a submission is at most "
                          "5 levels deep")]
    for err in errors:
        out.extend(_from_error(err))
    return out


# --------------------------------------------------------------------------- pipi's checks
def _warn(parts, message: str, fix: str) -> Violation:
    return Violation(_json_path(parts), message, fix, WARNING)


def _known_keys(schema: dict) -> set[str]:
    return set(schema.get("properties", {}))


def _unknown_keys(obj, schema: dict, parts: list, extra: set[str] = frozenset()) -> list[Violation]:
    """Keys the schema does not name that look like a misspelt known key."""
    if not isinstance(obj, dict):
        return []
    known = _known_keys(schema) | set(extra)
    out = []
    for k in sorted(set(obj) - known):
        near = _closest(k, known)  # extra keys are allowed: only a probable typo is reported
        if near is not None:
            out.append(_warn([*parts, k], f"key not in the released schema, close to {near!r} "
                             "(kept, not scored)", f"rename it to '{near}'"))
    return out


def _seed_count(text) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)/(\d+)", text) if isinstance(text, str) else None
    return (int(m[1]), int(m[2])) if m else None


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _dataset_checks(ds: str, res: dict, n_seeds, tolerance: float, scoring) -> list[Violation]:
    out: list[Violation] = []
    p = ["results", ds]
    defs = submission_schema()["$defs"]["dataset_results"]
    out += _unknown_keys(res, defs, p)
    mac = res.get("macro_auc") if isinstance(res.get("macro_auc"), dict) else {}
    out += _unknown_keys(mac, defs["properties"]["macro_auc"], [*p, "macro_auc"])
    seeds = mac.get("per_seed_values")
    seeds = seeds if isinstance(seeds, list) and all(map(_num, seeds)) else None
    if seeds == []:
        out.append(_warn([*p, "macro_auc", "per_seed_values"], "empty list",
                         "give one value per seed, or leave the field out"))
    if seeds:
        if n_seeds is not None and len(seeds) != n_seeds:
            out.append(_warn([*p, "macro_auc", "per_seed_values"],
                             f"{len(seeds)} values but n_seeds is {n_seeds}",
                             "give one value per seed, or correct n_seeds"))
        if _num(mac.get("mean")) and abs(float(np.mean(seeds)) - mac["mean"]) > tolerance:
            out.append(_warn([*p, "macro_auc", "mean"], f"{mac['mean']} is not the mean of "
                             f"per_seed_values ({np.mean(seeds):.4f})",
                             "report the mean of the per-seed values"))
        if len(seeds) > 1 and _num(mac.get("sd")):
            sds = (float(np.std(seeds, ddof=1)), float(np.std(seeds, ddof=0)))
            if min(abs(s - mac["sd"]) for s in sds) > tolerance:
                out.append(_warn([*p, "macro_auc", "sd"], f"{mac['sd']} is not the sd of "
                                 f"per_seed_values ({sds[0]:.4f} with ddof=1)",
                                 "report the sd of the per-seed values"))
    sps = _seed_count(res.get("sign_positive_seeds"))
    if sps is not None:
        k, n = sps
        q = [*p, "sign_positive_seeds"]
        if n == 0 or k > n:
            out.append(_warn(q, f"{res['sign_positive_seeds']!r} counts {k} positive of {n} "
                             "seeds", "write k/n with 0 <= k <= n and n >= 1"))
        elif n_seeds is not None and n != n_seeds:
            out.append(_warn(q, f"{res['sign_positive_seeds']!r} is over {n} seeds but "
                             f"n_seeds is {n_seeds}", "make the two seed counts agree"))
        elif seeds and n != len(seeds):
            out.append(_warn(q, f"{res['sign_positive_seeds']!r} is over {n} seeds but "
                             f"macro_auc.per_seed_values has {len(seeds)}",
                             "count the same seeds in both"))
    delta = res.get("delta_vs_rgb_baseline")
    if _num(delta) and not -1 <= delta <= 1:
        out.append(_warn([*p, "delta_vs_rgb_baseline"], f"{delta} is not a difference of "
                         "two AUCs", "give method minus baseline macro-AUC, in [-1, 1]"))
    pcs = res.get("per_class_auc") if isinstance(res.get("per_class_auc"), dict) else {}
    entry_schema = defs["properties"]["per_class_auc"]["additionalProperties"]
    for c, entry in sorted(pcs.items()):
        q = [*p, "per_class_auc", c]
        if c not in CLASSES:
            near = _closest(c, CLASSES)
            out.append(_warn(q, f"unknown class name {c!r} (kept, not scored)",
                             f"rename it to '{near}'" if near else f"use one of {list(CLASSES)}"))
        out += _unknown_keys(entry, entry_schema, q)
    if scoring is not None and pcs:
        extra = sorted(c for c in pcs if c in CLASSES and c not in scoring)
        if extra:
            out.append(_warn([*p, "per_class_auc"], f"classes outside the scoring set: {extra}",
                             "fine to report; they are not scored"))
        present = [pcs[c].get("mean") for c in scoring if isinstance(pcs.get(c), dict)]
        if len(present) == len(scoring) and all(map(_num, present)) and _num(mac.get("mean")):
            m = float(np.mean(present))
            if abs(m - mac["mean"]) > max(tolerance, 0.002):
                out.append(_warn([*p, "macro_auc", "mean"], f"{mac['mean']} is not the mean of "
                                 f"the scoring-set per-class AUCs ({m:.4f})",
                                 "report the macro-AUC over the scoring set"))
    npos = [e.get("n_positive") for e in pcs.values() if isinstance(e, dict)]
    npos = [n for n in npos if isinstance(n, int) and not isinstance(n, bool)]
    frames = res.get("n_test_frames")
    if npos and isinstance(frames, int) and sum(npos) > frames:
        out.append(_warn([*p, "n_test_frames"], f"{frames} frames but the per-class "
                         f"n_positive add up to {sum(npos)}",
                         "count every scored frame in n_test_frames"))
    return out


def check_submission(obj_or_path, *, tolerance: float = 1e-3,
                     scoring_sets: dict | None = None) -> list[Violation]:
    """pipi's checks beyond the released schema, as warnings (never a refusal): numbers
    that contradict each other, seed counts that disagree, keys the schema does not know.
    ``scoring_sets``: benchmark version -> scored classes (checks the per-class AUCs)."""
    try:
        doc = load_submission(obj_or_path)
    except DataError:
        return []
    if not isinstance(doc, dict):
        return []
    schema = submission_schema()
    out = _unknown_keys(doc, schema, [], extra={"$schema", "provenance"})
    for key in ("submitter", "method"):
        out += _unknown_keys(doc.get(key), schema["properties"][key], [key])
    version = doc.get("benchmark_version")
    scoring = (scoring_sets or {}).get(version)
    if scoring_sets is not None and isinstance(version, str) and scoring is None:
        out.append(_warn(["benchmark_version"], f"{version!r} is not a version pipi knows "
                         f"({sorted(scoring_sets)})", "per-class checks skipped"))
    n_seeds = doc.get("n_seeds") if isinstance(doc.get("n_seeds"), int) else None
    results = doc.get("results") if isinstance(doc.get("results"), dict) else {}
    out += _unknown_keys(results, schema["properties"]["results"], ["results"])
    counts = {}
    for ds in ("kvasir", "galar"):
        if isinstance(results.get(ds), dict):
            out += _dataset_checks(ds, results[ds], n_seeds, tolerance, scoring)
            sps = _seed_count(results[ds].get("sign_positive_seeds"))
            if sps:
                counts[ds] = sps[1]
    if len(counts) == 2 and counts["kvasir"] != counts["galar"]:
        out.append(_warn(["results", "galar", "sign_positive_seeds"],
                         f"over {counts['galar']} seeds on Galar but {counts['kvasir']} on "
                         "Kvasir", "report the same seeds (the Kvasir-trained models) on both"))
    return out
