"""Which finished runs a mechanism study (``robustness``, ``transplant``) works on.

A ``runs`` parameter is either comma-separated MLflow run ids or an MLflow search filter
(anything with a comparison, e.g. ``tags.`pipi.cell` = 'a'``). Either way only FINISHED
per-frame model runs qualify (a trained run of a per-frame cell, not an evaluation child);
anything else is refused with one line naming the parameter and the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.cells import CELLS
from pipi.errors import ConfigError
from pipi.runs.data import load_data

__all__ = ["SourceRun", "check_digest", "looks_like_filter", "resolve_runs", "staged_for"]

_FILTER = re.compile(r"[=<>!]|\s(like|ilike|in)\s", re.IGNORECASE)


@dataclass(frozen=True)
class SourceRun:
    """A finished per-frame run a study evaluates."""

    run_id: str
    cell: str
    backbone: str
    seed: int
    data_digest: str
    data_dir: str

    @property
    def input_channels(self) -> int:
        return CELLS[self.cell].input_channels

    @property
    def label(self) -> str:
        return f"{self.cell}/{self.backbone}/seed {self.seed} ({self.run_id})"


def looks_like_filter(spec: str) -> bool:
    """An MLflow filter (has a comparison) rather than a list of run ids."""
    return bool(_FILTER.search(spec))


def _source(run_id: str, tags: dict, params: dict, status: str, *, name: str) -> SourceRun:
    cell = tags.get(tracking.tags.TAG_CELL, "")
    if status != "FINISHED":
        raise ConfigError(f"{name}: run {run_id} is {status}, not FINISHED")
    if not cell or cell not in CELLS or CELLS[cell].is_sequence:
        what = f"cell {cell!r}" if cell else "no pipi.cell tag"
        raise ConfigError(f"{name}: run {run_id} is not a per-frame model run ({what}); pass "
                          "runs of the train entry point with a per-frame cell (a, pi, ...)")
    seed = tags.get(tracking.tags.TAG_SEED, "")
    return SourceRun(run_id, cell, tags.get(tracking.tags.TAG_BACKBONE, ""),
                     int(seed) if seed.lstrip("-").isdigit() else 0,
                     tags.get(tracking.tags.TAG_DATA_DIGEST, ""), params.get("data_dir", ""))


def resolve_runs(spec: str, *, name: str = "runs", experiment: str | None = None,
                 cells: Sequence[str] = ()) -> list[SourceRun]:
    """The runs named by ``spec`` (ids or a filter), optionally only those of ``cells``.

    Raises
    ------
    ConfigError
        Empty ``spec``, an unknown id, a run that is not a FINISHED per-frame model run, a run
        of another cell than ``cells`` (ids), or a filter that selects nothing.
    """
    spec = (spec or "").strip()
    if not spec:
        raise ConfigError(f"{name} is empty: pass run ids (comma-separated) or an MLflow filter "
                          "such as \"tags.`pipi.cell` = 'a'\"")
    if looks_like_filter(spec):
        exp = experiment or tracking.default_experiment()
        df = tracking.load_runs(exp, spec)
        out = []
        for r in df.itertuples(index=False):
            if (r.status != "FINISHED" or r.cell not in CELLS or CELLS[r.cell].is_sequence
                    or (cells and r.cell not in cells)):
                continue
            params = json.loads(r.params or "{}")
            out.append(SourceRun(r.run_id, r.cell, r.backbone,
            0 if pd.isna(r.seed) else int(r.seed),
                                 r.data_digest,
                                 params.get("data_dir", "")))
        if not out:
            want = f" of cells {list(cells)}" if cells else ""
            raise ConfigError(f"{name}={spec!r}: no FINISHED per-frame model run{want} in "
                              f"experiment {exp!r} matches")
        # the newest run per (cell, backbone, seed): load_runs is oldest first
        newest = {(s.cell, s.backbone, s.seed): s for s in out}
        return sorted(newest.values(), key=lambda s: (s.backbone, s.cell, s.seed))
    out = []
    for rid in dict.fromkeys(x.strip() for x in spec.split(",") if x.strip()):
        run = tracking.get_run(rid)
        src = _source(rid, run.tags, run.params, run.status, name=name)
        if cells and src.cell not in cells:
            raise ConfigError(f"{name}: run {rid} is a {src.cell} run; expected cells "
                              f"{list(cells)}")
        out.append(src)
    return out


def staged_for(data: str, runs: Sequence[SourceRun], *, name: str = "data") -> tuple[Path, str]:
    """(staged folder, data digest): ``data``, or where the first run was trained when empty."""
    if not data:
        dirs = [r.data_dir for r in runs if r.data_dir]
        if not dirs or not Path(dirs[0]).joinpath("manifest.json").is_file():
            raise ConfigError(f"{name} is empty and run {runs[0].run_id}'s staged folder "
                              f"({dirs[0] if dirs else 'not logged'}) is not there; pass "
                              f"{name}=<staged folder>")
        data = dirs[0]
    staged = load_data(data)
    check_digest(runs, staged.digest, data=str(data), name=name)
    return staged.root, staged.digest


def check_digest(runs: Sequence[SourceRun], digest: str, *, data: str, name: str = "data"):
    """ConfigError naming the first run trained on other data than ``digest``."""
    for r in runs:
        if r.data_digest and r.data_digest != digest:
            raise ConfigError(f"{name}={data}: its data digest {digest[:12]} differs from the one "
                              f"run {r.run_id} was trained on ({r.data_digest[:12]}); pass the "
                              "staged folder the runs were trained on")
