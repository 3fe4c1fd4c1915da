"""The Galar -> Kvasir-Capsule class mapping and the class of every Galar frame.

:func:`load_mapping` reads a mapping in the format of the GalKva-2026 release's
``class_mapping.json`` (the default, ``pipi/data/staging/galar_mapping.json``, is the paper's);
:func:`assign_classes` turns a label table into Kvasir classes under a stated rule for frames
positive for several mapped classes; :func:`column_roles` says, for every Galar column,
whether it is mapped, used by the Normal clean mucosa derivation, or dropped, and why.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from pipi.classes import CLASSES, canonical, is_known
from pipi.data.staging.galar_labelfile import (
    ALL_COLUMNS,
    HEADER_32,
    SECTION_COLUMNS,
    LabelTable,
    canonical_section,
)
from pipi.errors import DataError

log = logging.getLogger(__name__)

__all__ = [
    "MULTILABEL_RULES",
    "NOT_EVALUABLE",
    "GalarMapping",
    "NormalRule",
    "assign_classes",
    "column_roles",
    "load_mapping",
]

#: Rules for a frame positive for several mapped classes (see :func:`assign_classes`).
MULTILABEL_RULES: tuple[str, ...] = ("priority", "duplicate", "exclude")

#: Why an unmapped column is not a class (reported in the staged manifest).
_DROP_REASONS: dict[str, str] = {
    "index": "row counter within the file (bookkeeping)",
    "frame": "frame number: names the image file (bookkeeping)",
    "section": "the anatomical section (by name, or a 0/1 marker); no Kvasir-Capsule class",
    "z-line": "landmark with no Kvasir-Capsule class",
    "blood": "set together with 'active bleeding' and 'hematin'; those two are the mapped classes",
    "IBD": "no Kvasir-Capsule class",
    "esophagitis": "no Kvasir-Capsule class (oesophagus, outside the small-bowel classes)",
    "varices": "no Kvasir-Capsule class",
    "celiac": "no Kvasir-Capsule class",
    "cancer": "no Kvasir-Capsule class",
    "bubbles": "image-quality annotation (6 videos only)",
    "dirt": "image-quality annotation (6 videos only)",
    "no view": "image-quality annotation (6 videos only)",
    "reduced view": (
        "image quality of 6 videos only: Reduced Mucosal View is not evaluable on Galar "
        "(74 of 80 videos carry no view-quality labels, so unlabelled frames are not negatives)"
    ),
    "good view": "image-quality annotation (6 videos only)",
    "mouth": "anatomical section; Normal clean mucosa is small-bowel mucosa only",
    "esophagus": "anatomical section; Normal clean mucosa is small-bowel mucosa only",
    "stomach": "anatomical section; Normal clean mucosa is small-bowel mucosa only",
    "small intestine": "anatomical section (not used by this mapping)",
    "colon": "anatomical section; Normal clean mucosa is small-bowel mucosa only",
}
NOT_EVALUABLE: dict[str, str] = {"Reduced Mucosal View": _DROP_REASONS["reduced view"]}


#: The two ways a mapping file writes the section condition of Normal clean mucosa.
SECTION_BY_NAME, SECTION_BY_COLUMN = "section by name", "one-hot section column"


@dataclass(frozen=True)
class NormalRule:
    """How "Normal clean mucosa" is derived from Galar columns (it has no column of its own).

    Two forms of the section condition: the GalKva-2026 release's ``{"section_column":
    "section", "section_required_value": "small intestine"}`` (the frame's anatomical
    section, by name: :meth:`LabelTable.sections`), and pipi's ``{"section_column": "small
    intestine", "section_required_value": 1}`` (a one-hot column must hold that value).
    """

    section_column: str  # "section" (by name), or the one-hot column
    section_value: int | str  # the section's name, or 0/1 for a one-hot column
    pathology_columns: tuple[str, ...]  # every one of these must be 0
    view_column: str | None  # if the file has this column, it must be 1 (good view)
    written: tuple = ()  # (section_column, section_required_value) as the file wrote them

    @property
    def form(self) -> str:
        return SECTION_BY_NAME if isinstance(self.section_value, str) else SECTION_BY_COLUMN

    @property
    def columns(self) -> tuple[str, ...]:
        """Label columns the rule reads (must be 0/1 in every row, except ``section``)."""
        sec = SECTION_COLUMNS if self.form == SECTION_BY_NAME else (self.section_column,)
        cols = (*sec, *self.pathology_columns) + ((self.view_column,) if self.view_column else ())
        return tuple(c for c in dict.fromkeys(cols) if c != "section")  # name or 0/1: never checked

    def in_section(self, table: LabelTable) -> np.ndarray:
        """(N,) bool: the frame is in the required section."""
        if self.form == SECTION_BY_NAME:
            return table.sections() == self.section_value
        return table.column(self.section_column) == self.section_value

    def describe(self) -> str:
        """The rule in words (recorded in the staged manifest)."""
        if self.form == SECTION_BY_NAME:
            sec = (f"the frame's anatomical section is {self.section_value!r} (the 'section' "
                   "column where it names the section, else the one-hot section columns "
                   f"{list(SECTION_COLUMNS)})")
        else:
            sec = f"column {self.section_column!r} is {self.section_value}"
        view = (f", and {self.view_column!r} is 1 where the file has that column"
                if self.view_column else "")
        return (f"no mapped class, {sec}, every one of {len(self.pathology_columns)} pathology "
                f"columns is 0{view}")


@dataclass(frozen=True)
class GalarMapping:
    """A Galar -> Kvasir-Capsule mapping (the release's ``class_mapping.json`` format)."""

    source: str  # file it was read from (or "pipi default")
    table: tuple[tuple[str, str], ...]  # (galar column, canonical Kvasir class)
    normal: NormalRule | None  # None: Normal clean mucosa is not derived
    metadata_column: str  # metadata.csv column naming the capsule system
    pillcam_subset: tuple[int, ...]  # video ids the release stratifies as PillCam ...
    olympus_subset: tuple[int, ...]  # ... and as Olympus (empty: no restriction)
    priority: tuple[str, ...]  # multilabel priority over the mapped classes, first wins
    ignored: tuple[str, ...] = ()  # informational keys of the file that pipi does not use
    #: capsule-system names (values of ``metadata_column``) the subsets list, as written; the
    #: videos they stand for are resolved against the staged metadata.csv
    #: (:func:`pipi.data.staging.galar_release.resolve_subsets`)
    pillcam_systems: tuple[str, ...] = ()
    olympus_systems: tuple[str, ...] = ()
    available_systems: tuple[tuple[str, int], ...] = ()  # as stated: system -> number of videos
    metadata_csv_path: str = "metadata.csv"  # relative to the release root

    @property
    def has_subsets(self) -> bool:
        return bool(self.pillcam_subset or self.olympus_subset or self.pillcam_systems
                    or self.olympus_systems)

    @property
    def used_columns(self) -> tuple[str, ...]:
        """Label columns this mapping reads: each must hold 0/1 in every row."""
        cols = [g for g, _ in self.table] + list(self.normal.columns if self.normal else ())
        return tuple(dict.fromkeys(cols))

    @property
    def classes(self) -> tuple[str, ...]:
        """Kvasir classes this mapping can produce, in class-index order."""
        out = {k for _, k in self.table} | ({"Normal clean mucosa"} if self.normal else set())
        return tuple(c for c in CLASSES if c in out)

    def as_dict(self) -> dict:
        """JSON form recorded in the staged manifest."""
        return {
            "source": self.source,
            "table": [{"galar_column": g, "kvasir_class": k} for g, k in self.table],
            "normal_clean_mucosa": None if self.normal is None else {
                "section_column": self.normal.section_column,
                "section_required_value": self.normal.section_value,
                "pathology_columns_must_all_be_zero": list(self.normal.pathology_columns),
                "view_quality_column_optional": self.normal.view_column,
                "form": self.normal.form,
                "written_as": {"section_column": self.normal.written[0],
                               "section_required_value": self.normal.written[1]}
                if self.normal.written else None,
                "rule": self.normal.describe(),
            },
            "ignored_keys": list(self.ignored),
            "metadata_column": self.metadata_column,
            "metadata_csv_path": self.metadata_csv_path,
            "available_systems": dict(self.available_systems),
            "pillcam_video_subset": list(self.pillcam_subset),
            "olympus_video_subset": list(self.olympus_subset),
            "pillcam_capsule_systems": list(self.pillcam_systems),
            "olympus_capsule_systems": list(self.olympus_systems),
            "multilabel_priority": list(self.priority),
        }


# --------------------------------------------------------------------------- mapping
def _line_of(text: str, needle: str) -> int | None:
    """1-based line of the first occurrence of ``needle`` (a JSON string) in ``text``."""
    pos = text.find(json.dumps(needle))
    return None if pos < 0 else text.count("\n", 0, pos) + 1


def _where(source: str, text: str, needle: str) -> str:
    line = _line_of(text, needle) if text else None
    return f"{source}, line {line}" if line else source


def _galar_column(name, source: str, text: str, what: str) -> str:
    if not isinstance(name, str) or name.strip() not in ALL_COLUMNS:
        raise DataError(
            f"{_where(source, text, str(name))}: {what} {name!r} is not a Galar label column. "
            f"Galar columns: {sorted(ALL_COLUMNS - {'index', 'frame'})}"
        )
    return name.strip()


def _subset(value, source: str, text: str, key: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """A stratification subset: (video ids, capsule-system names). The release lists names
    (``["PillCam SB3", "PillCam Colon2", "PillCam SB2"]``); integer ids (or digit strings)
    are video ids. Anything else is refused, naming the file and line."""
    if value is None:
        return (), ()
    if not isinstance(value, list):
        raise DataError(f"{source}: {key} must be a list of capsule-system names (values of "
                        f"the metadata column) or integer video ids, got {value!r}")
    ids: set[int] = set()
    names: list[str] = []
    for v in value:
        if isinstance(v, int) and not isinstance(v, bool):
            ids.add(v)
        elif isinstance(v, str) and v.strip().isdigit():
            ids.add(int(v.strip()))
        elif isinstance(v, str) and v.strip():
            names.append(v.strip())
        else:
            raise DataError(
                f"{_where(source, text, key)}: {key} lists {v!r}; expected a capsule-system "
                "name (e.g. 'PillCam SB3') or an integer video id"
            )
    return tuple(sorted(ids)), tuple(dict.fromkeys(names))


def _available_systems(value, source: str, text: str) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
            for k, n in value.items()):
        raise DataError(f"{_where(source, text, 'available_systems')}: available_systems must "
                        f"map capsule-system names to numbers of videos, got {value!r}")
    return tuple((k.strip(), n) for k, n in value.items())


_USED_KEYS = frozenset({"_galar_to_kvasir_mapping_table", "_normal_clean_mucosa_derivation",
                        "_capsule_system_stratification", "_multilabel_priority"})


def _normal_rule(deriv, source: str, text: str) -> NormalRule | None:
    """The Normal clean mucosa derivation, in either form (:class:`NormalRule`)."""
    if deriv is None:
        return None
    if not isinstance(deriv, dict) or "section_column" not in deriv:
        raise DataError(f"{source}: _normal_clean_mucosa_derivation needs 'section_column'")
    column = _galar_column(deriv["section_column"], source, text, "section_column")
    value = deriv.get("section_required_value", 1)
    written = (deriv["section_column"], value)
    if isinstance(value, str) and value.strip() not in ("0", "1"):
        name = canonical_section(value)
        if name not in SECTION_COLUMNS:
            raise DataError(
                f"{_where(source, text, value)}: section_required_value {value!r} is not an "
                f"anatomical section; Galar's sections are {list(SECTION_COLUMNS)} (or 0/1 "
                "for a one-hot section column)"
            )
        if column not in ("section", *SECTION_COLUMNS) or column in SECTION_COLUMNS and column != name:
            raise DataError(
                f"{_where(source, text, value)}: section_column {column!r} with the section "
                f"name {value!r}; write \"section_column\": \"section\" (the frame's section "
                "by name)"
            )
        section_value: int | str = name
    elif isinstance(value, str) or isinstance(value, (bool, int, float)) and value in (0, 1):
        section_value = int(float(value))  # "1", 1, 1.0, True
    else:
        raise DataError(
            f"{source}: section_required_value must be a section name "
            f"({', '.join(SECTION_COLUMNS)}) or 0/1, got {value!r}"
        )
    patho = deriv.get("pathology_columns_must_all_be_zero", [])
    if not isinstance(patho, list):
        raise DataError(f"{source}: pathology_columns_must_all_be_zero must be a list")
    view = deriv.get("view_quality_column_optional")
    return NormalRule(
        section_column=column,
        section_value=section_value,
        pathology_columns=tuple(_galar_column(c, source, text, "pathology column") for c in patho),
        view_column=None if view in (None, "") else _galar_column(
            view, source, text, "view_quality_column_optional"),
        written=written,
    )


def load_mapping(path: Path | None = None) -> GalarMapping:
    """Read a Galar -> Kvasir mapping file; ``None`` reads pipi's default (the paper's).

    Used keys: ``_galar_to_kvasir_mapping_table`` (rows ``{"galar_column", "kvasir_class"}``),
    ``_normal_clean_mucosa_derivation``, ``_capsule_system_stratification`` and pipi's own
    ``_multilabel_priority``; a plain ``{"<galar column>": "<Kvasir class>"}`` entry (a key
    without ``_``) is a mapping row too. Other ``_`` keys are ignored. In
    ``_capsule_system_stratification``, ``pillcam_video_subset`` / ``olympus_video_subset``
    list capsule-system names (the release's form, values of ``metadata_column``) and/or
    integer video ids; ``available_systems`` and ``metadata_csv_path`` are read too. A Kvasir class that
    does not exist, a Galar column that does not exist, a column mapped twice or a row
    mapping to Reduced Mucosal View (not evaluable on Galar) raise :class:`DataError` naming
    the file and line.
    """
    doc, text, source = _read_mapping_doc(path)
    rows, ignored = _mapping_rows(doc, source)
    table = _checked_table(rows, source, text)
    normal = _normal_rule(doc.get("_normal_clean_mucosa_derivation"), source, text)
    strat = _stratification(doc, source, text)
    prio = _priority(doc.get("_multilabel_priority", []), [k for _, k in table], source, text)
    raw = doc.get("_capsule_system_stratification") or {}
    return GalarMapping(
        source=source, table=table, normal=normal, priority=prio, ignored=tuple(ignored),
        available_systems=_available_systems(raw.get("available_systems"), source, text),
        **strat,
    )


def _read_mapping_doc(path: Path | None) -> tuple[dict, str, str]:
    """``(the parsed JSON object, its text, where it came from)``."""
    if path is None:
        text = resources.files("pipi.data.staging").joinpath("galar_mapping.json").read_text(
            "utf-8")
        source = "pipi default mapping (pipi/data/staging/galar_mapping.json)"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise DataError(f"{path}: cannot read the mapping file ({exc})") from None
        source = str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{source}, line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise DataError(f"{source}: expected a JSON object with '_galar_to_kvasir_mapping_table'")
    return doc, text, source


def _mapping_rows(doc: dict, source: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``(the (Galar column, class) rows as written, the keys not used)``."""
    rows: list[tuple[str, str]] = []
    ignored: list[str] = []
    table = doc.get("_galar_to_kvasir_mapping_table", [])
    if not isinstance(table, list):
        raise DataError(f"{source}: '_galar_to_kvasir_mapping_table' must be a list of rows")
    derived = isinstance(doc.get("_normal_clean_mucosa_derivation"), dict)
    for i, row in enumerate(table):
        if not isinstance(row, dict) or "galar_column" not in row or "kvasir_class" not in row:
            raise DataError(
                f"{source}: _galar_to_kvasir_mapping_table[{i}] needs the keys 'galar_column' "
                f"and 'kvasir_class', got {row!r}"
            )
        k = row["kvasir_class"]
        if derived and isinstance(k, str) and is_known(k) and canonical(k) == "Normal clean mucosa":
            ignored.append(f"_galar_to_kvasir_mapping_table[{i}] (Normal clean mucosa: derived "
                           "by _normal_clean_mucosa_derivation)")
            continue
        rows.append((row["galar_column"], k))
    for key, value in doc.items():
        if key.startswith("_"):
            if key not in _USED_KEYS:
                ignored.append(key)
        elif isinstance(value, str) and key.strip() in ALL_COLUMNS - {"index", "frame"}:
            rows.append((key, value))
        else:  # informational (positives, n_videos, expected_positives, a comment ...)
            ignored.append(key)
    if ignored:
        log.info("%s: not used by pipi (informational): %s", source, ", ".join(ignored))
    if not rows:
        raise DataError(f"{source}: no mapping rows; add '_galar_to_kvasir_mapping_table'")
    return rows, ignored


def _checked_table(rows: list[tuple[str, str]], source: str,
                   text: str) -> tuple[tuple[str, str], ...]:
    """The mapping table: known columns and evaluable classes, each column once."""
    out: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for g, k in rows:
        col = _galar_column(g, source, text, "mapped column")
        if not isinstance(k, str) or not is_known(k):
            raise DataError(
                f"{_where(source, text, str(k))}: unknown Kvasir-Capsule class {k!r} for Galar "
                f"column {col!r}. Known classes: {list(CLASSES)}"
            )
        cls = canonical(k)
        if cls in NOT_EVALUABLE:
            raise DataError(
                f"{_where(source, text, k)}: {cls} is not evaluable on Galar "
                f"({NOT_EVALUABLE[cls]}); remove the row for {col!r}"
            )
        if cls == "Normal clean mucosa":
            raise DataError(
                f"{_where(source, text, k)}: Normal clean mucosa is derived "
                "(_normal_clean_mucosa_derivation), not mapped from a column"
            )
        if col in seen and seen[col] != cls:
            raise DataError(
                f"{_where(source, text, g)}: Galar column {col!r} is mapped twice "
                f"({seen[col]!r} and {cls!r}); keep one row"
            )
        if col not in seen:
            seen[col] = cls
            out.append((col, cls))
    return tuple(out)


def _stratification(doc: dict, source: str, text: str) -> dict:
    """The :class:`GalarMapping` fields of ``_capsule_system_stratification`` but
    ``available_systems``: the PillCam and Olympus subsets and the metadata.csv to read."""
    strat = doc.get("_capsule_system_stratification") or {}
    if not isinstance(strat, dict):
        raise DataError(f"{source}: _capsule_system_stratification must be an object")
    pill, pill_names = _subset(strat.get("pillcam_video_subset"), source, text,
                               "pillcam_video_subset")
    oly, oly_names = _subset(strat.get("olympus_video_subset"), source, text,
                             "olympus_video_subset")
    if set(pill) & set(oly):
        raise DataError(
            f"{source}: video(s) {sorted(set(pill) & set(oly))} are in both the PillCam and "
            "the Olympus subsets"
        )
    both = {n.lower() for n in pill_names} & {n.lower() for n in oly_names}
    if both:
        raise DataError(f"{source}: capsule system(s) {sorted(both)} are in both the PillCam "
                        "and the Olympus subsets")
    csv_path = strat.get("metadata_csv_path") or "metadata.csv"
    if not isinstance(csv_path, str) or Path(csv_path).is_absolute() or ".." in Path(csv_path).parts:
        raise DataError(f"{source}: metadata_csv_path must be a path inside the release, "
                        f"got {csv_path!r}")
    return {"metadata_column": str(strat.get("metadata_column") or "Capsule System"),
            "pillcam_subset": pill, "olympus_subset": oly, "pillcam_systems": pill_names,
            "olympus_systems": oly_names, "metadata_csv_path": csv_path}


def _priority(prio_raw, mapped: list[str], source: str, text: str) -> tuple[str, ...]:
    """``_multilabel_priority`` over the mapped classes; the ones it leaves out come after
    it, in class-index order."""
    prio: list[str] = []
    for k in prio_raw if isinstance(prio_raw, list) else []:
        if not isinstance(k, str) or not is_known(k):
            raise DataError(
                f"{_where(source, text, str(k))}: unknown Kvasir-Capsule class {k!r} in "
                f"_multilabel_priority. Known classes: {list(CLASSES)}"
            )
        if canonical(k) in mapped and canonical(k) not in prio:
            prio.append(canonical(k))
    prio += [c for c in CLASSES if c in mapped and c not in prio]
    return tuple(prio)


def column_roles(mapping: GalarMapping) -> dict[str, dict[str, str]]:
    """Every Galar column -> {"role": mapped|derivation|dropped, "detail": ...}."""
    roles: dict[str, dict[str, str]] = {}
    mapped = dict(mapping.table)
    used: dict[str, str] = {}
    if mapping.normal is not None:
        n = mapping.normal
        if n.form == SECTION_BY_NAME:
            used["section"] = (f"Normal clean mucosa: the frame's section must be "
                               f"{n.section_value!r} (read by name where the file names it)")
            for c in SECTION_COLUMNS:
                used[c] = (f"Normal clean mucosa: the frame's section, where the 'section' "
                           f"column does not name it (must be {n.section_value!r})")
        else:
            used[n.section_column] = f"Normal clean mucosa: must be {n.section_value}"
        for c in n.pathology_columns:
            used.setdefault(c, "Normal clean mucosa: must be 0")
        if n.view_column:
            used.setdefault(n.view_column, "Normal clean mucosa: must be 1 where annotated")
    for col in HEADER_32:
        if col in mapped:
            detail = mapped[col]
            if col in used:
                detail += f"; {used[col]}"
            roles[col] = {"role": "mapped", "detail": detail}
        elif col in used:
            roles[col] = {"role": "derivation", "detail": used[col]}
        else:
            roles[col] = {"role": "dropped", "detail": _DROP_REASONS.get(col, "not mapped")}
    return roles



# --------------------------------------------------------------------------- classes
def assign_classes(
    table: LabelTable, mapping: GalarMapping, *, multilabel: str = "priority",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kvasir class of every frame of a label table.

    Returns ``(rows, classes, n_mapped)``: row indices into the table and the canonical
    class name of each (a row may appear once per class under ``"duplicate"``), and the
    number of mapped classes each *table row* is positive for (0 for derived Normal frames).

    Rules, in order:

    * a frame positive for one mapped column gets that column's class;
    * a frame positive for several mapped classes (``n_mapped > 1``) follows ``multilabel``:
      ``"priority"`` keeps the first of them in ``mapping.priority``, ``"duplicate"`` keeps
      one row per class (Kvasir staging's convention for its 9 multilabel frames),
      ``"exclude"`` drops the frame;
    * a frame positive for no mapped class is Normal clean mucosa when the derivation holds
      (section column equals the required value, every pathology column 0 and, where the
      file has it, the view-quality column 1); otherwise it is not staged.
    """
    if multilabel not in MULTILABEL_RULES:
        raise DataError(f"multilabel must be one of {list(MULTILABEL_RULES)}, got {multilabel!r}")
    n = table.frame.shape[0]
    classes = [k for k in mapping.priority]  # priority order
    col_of = {}
    for g, k in mapping.table:
        col_of.setdefault(k, []).append(g)
    pos = np.zeros((n, len(classes)), dtype=bool)  # (N, K) positive per mapped class
    for j, k in enumerate(classes):
        for g in col_of[k]:
            v = table.column(g)
            if v is not None:
                pos[:, j] |= v == 1
    n_mapped = pos.sum(axis=1)
    rows_out: list[np.ndarray] = []
    cls_out: list[np.ndarray] = []
    single = n_mapped == 1
    multi = n_mapped > 1
    if multilabel == "duplicate":
        r, j = np.nonzero(pos)
        rows_out.append(r)
        cls_out.append(np.asarray(classes, dtype=object)[j])
    else:
        keep = single | (multi if multilabel == "priority" else np.zeros(n, bool))
        first = np.argmax(pos, axis=1)  # first True in priority order
        r = np.nonzero(keep)[0]
        rows_out.append(r)
        cls_out.append(np.asarray(classes, dtype=object)[first[r]])
    if mapping.normal is not None:
        rule = mapping.normal
        ok = n_mapped == 0
        ok &= rule.in_section(table)
        for c in rule.pathology_columns:
            v = table.column(c)
            if v is not None:
                ok &= v == 0
        if rule.view_column:
            v = table.column(rule.view_column)
            if v is not None:
                ok &= v == 1
        r = np.nonzero(ok)[0]
        rows_out.append(r)
        cls_out.append(np.full(r.shape[0], "Normal clean mucosa", dtype=object))
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, np.int64)
    cls = np.concatenate(cls_out) if cls_out else np.zeros(0, object)
    order = np.argsort(rows, kind="stable")  # per row: priority order, Normal last
    return rows[order].astype(np.int64), cls[order], n_mapped.astype(np.int64)
