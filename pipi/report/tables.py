"""The table model of ``aggregate`` and its Markdown, CSV and JSON forms.

A :class:`Table` carries two frames with the same rows: ``data`` (numbers, for CSV and
JSON) and ``display`` (formatted strings as in the paper, for Markdown and HTML), plus the
run ids behind every row, so that each number can be traced to the MLflow runs it was
computed from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

#: Status of a table whose runs do not exist (it is still written, saying so).
NO_RUNS = "no runs"

RunIds = Mapping[str, Mapping[int, str]]  # arm label -> seed -> run id


@dataclass(frozen=True)
class Table:
    """One output table.

    Parameters
    ----------
    key : str
        File stem (``tables/<key>.md|csv``) and HTML anchor.
    title : str
        One-line caption.
    data : pandas.DataFrame
        Machine-readable values, one row per table row.
    display : pandas.DataFrame
        The same rows formatted for reading (``0.760 ± 0.027``).
    run_ids : tuple of mapping
        Per row: arm label -> {seed: run id} of the runs behind the row's numbers.
    notes : tuple of str
        Method notes, missing arms and seeds, warnings raised while computing.
    status : str
        ``"ok"`` or ``"no runs"`` (the table's runs do not exist; rows are empty).
    paper : str
        The paper table this one reproduces (its LaTeX label).
    """

    key: str
    title: str
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    display: pd.DataFrame = field(default_factory=pd.DataFrame)
    run_ids: tuple[RunIds, ...] = ()
    notes: tuple[str, ...] = ()
    status: str = "ok"
    paper: str = ""

    def __post_init__(self):
        if len(self.data) != len(self.display):
            raise ValueError(f"table {self.key}: data has {len(self.data)} rows, display "
                             f"{len(self.display)}")
        if self.run_ids and len(self.run_ids) != len(self.display):
            raise ValueError(f"table {self.key}: {len(self.run_ids)} run-id rows for "
                             f"{len(self.display)} rows")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def run_ids_text(self, i: int) -> str:
        """Row i's run ids as ``arm:seed=run_id;...`` (the CSV column)."""
        if not self.run_ids:
            return ""
        return ";".join(f"{arm}:{seed}={rid}" for arm, seeds in self.run_ids[i].items()
                        for seed, rid in sorted(seeds.items()))

    def to_csv(self) -> str:
        df = self.data.copy()
        if self.run_ids:
            df["run_ids"] = [self.run_ids_text(i) for i in range(len(df))]
        return df.to_csv(index=False)

    def to_json(self) -> dict:
        return {
            "title": self.title, "status": self.status, "paper": self.paper,
            "notes": list(self.notes), "columns": [str(c) for c in self.data.columns],
            "rows": json_safe(self.data.to_dict(orient="records")),
            "display": json_safe(self.display.to_dict(orient="records")),
            "run_ids": [{arm: {str(s): r for s, r in seeds.items()} for arm, seeds in row.items()}
                        for row in self.run_ids],
        }

    def write(self, folder: Path) -> None:
        """Write ``<key>.md`` and ``<key>.csv`` into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.key}.md").write_text(table_markdown(self))
        (folder / f"{self.key}.csv").write_text(self.to_csv())


def _md_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table, *, level: int = 2) -> str:
    """A Markdown section: title, the display table (or the reason it is empty), notes."""
    lines = [f"{'#' * level} {table.title}", ""]
    if table.paper:
        lines += [f"Paper: `{table.paper}`.", ""]
    if not table.ok or table.display.empty:
        lines += [f"**{table.status if not table.ok else 'none'}**", ""]
    else:
        cols = [str(c) for c in table.display.columns]
        lines.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
        lines.append("|" + "|".join("---" for _ in cols) + "|")
        for row in table.display.itertuples(index=False):
            lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
        lines.append("")
    for note in table.notes:
        lines.append(f"- {note}")
    if table.notes:
        lines.append("")
    if table.run_ids:
        lines += [f"Run ids per row: `tables/{table.key}.csv` (column `run_ids`), `aggregate.json`.",
                  ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- formatting
def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_auc(x, digits: int = 3) -> str:
    """``0.760``; ``n/a`` for NaN."""
    return f"{float(x):.{digits}f}" if _finite(x) else "n/a"


def fmt_mean_sd(mean, sd, digits: int = 3) -> str:
    """``0.760 ± 0.027``; ``0.760 ± n/a`` when the sd is undefined (one seed: no spread is
    measured, never shown as 0)."""
    if not _finite(mean):
        return "n/a"
    if not _finite(sd):
        return f"{float(mean):.{digits}f} ± n/a"
    return f"{float(mean):.{digits}f} ± {float(sd):.{digits}f}"


def fmt_delta(x, digits: int = 3) -> str:
    """Signed: ``+0.023`` / ``-0.017``."""
    return f"{float(x):+.{digits}f}" if _finite(x) else "n/a"


def fmt_z(x) -> str:
    return f"{float(x):+.2f}" if _finite(x) else "n/a"


def fmt_p(p) -> str:
    """``< 1e-4`` below 1e-4, else three significant digits."""
    if not _finite(p):
        return "n/a"
    p = float(p)
    if p < 1e-4:
        return "< 1e-4"
    return f"{p:.3g}"


def fmt_ci(low, high, digits: int = 3) -> str:
    """``[-0.005, +0.032]``."""
    if not (_finite(low) and _finite(high)):
        return "n/a"
    return f"[{float(low):+.{digits}f}, {float(high):+.{digits}f}]"


def json_safe(obj):
    """Plain JSON types: numpy scalars and arrays converted, NaN and inf -> None."""
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(float(obj)) else None
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj


def dump_json(obj, path: Path) -> None:
    path.write_text(json.dumps(json_safe(obj), indent=2, allow_nan=False))
