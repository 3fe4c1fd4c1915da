"""Run selection: which runs of ``load_runs`` are aggregated, and why the others are not."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from pipi.analysis.recipes import check_recipes
from pipi.cells import EXTERNAL_SOURCE, RELEASED, Arm
from pipi.errors import DataError
from pipi.tracking.tags import TAG_SOURCE, TAG_SOURCE_LABEL

__all__ = ["IMPORTED_SOURCE", "check_single_dataset", "mark_imported", "mixed_profile_note",
           "reason_kind", "select_runs"]

#: ``pipi.source`` of runs made by the ``import`` entry point from outside files.
IMPORTED_SOURCE = EXTERNAL_SOURCE


def mark_imported(runs: pd.DataFrame, *, pair: bool = False) -> pd.DataFrame:
    """Imported runs in arms of their own: cell ``a`` -> ``a (released)``.

    A run whose ``pipi.source`` tag is ``external`` (``import`` entry point) gets its
    ``pipi.source_label`` (default ``released``) after its cell, so it is never paired
    with, pooled with or superseded by a trained run of that cell (the paper's paired
    tests name trained cells only). An evaluation child of an imported run (it inherits the
    tags) keeps its variant after the label: ``a (released)@perturb_jpeg25``.
    ``pair=True`` keeps the plain cell name: an imported run then counts as a run of that
    cell (an arm that mixes imported and trained runs is still refused as two recipes).
    A ``source`` column (``external`` or ``""``) is added either way.
    """
    tags = runs["tags"].map(lambda t: json.loads(t) if isinstance(t, str) and t else {}) \
        if "tags" in runs else pd.Series([{}] * len(runs), index=runs.index)
    source = tags.map(lambda t: t.get(TAG_SOURCE, ""))
    out = runs.assign(source=source)
    if pair:
        return out
    ext = (source == IMPORTED_SOURCE) & (out["cell"].fillna("") != "")
    if not ext.any():
        return out
    label = tags.map(lambda t: t.get(TAG_SOURCE_LABEL, "") or RELEASED)
    # an evaluation child of an imported run: a@perturb_jpeg25 -> a (released)@perturb_jpeg25
    out.loc[ext, "cell"] = [str(replace(Arm.parse(c), source=s))
                            for c, s in zip(out.loc[ext, "cell"], label[ext], strict=True)]
    return out



def select_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``load_runs`` output into model runs to aggregate and excluded runs (with reasons).

    Kept: FINISHED runs with ``pipi.cell``, ``pipi.backbone`` and ``pipi.seed`` tags, the
    newest one per (backbone, cell, seed) among runs of the same recipe. Excluded, with a
    ``reason`` column: other statuses (FAILED with its ``pipi.failure_reason``), runs that
    are not model runs (stage, sweep parents, aggregate, ...), runs missing a tag, and older
    repeats of the same recipe (superseded by a newer run of the same arm, seed and recipe).

    Raises
    ------
    DataError
        An arm has runs of several recipes (:func:`pipi.analysis.recipes.check_recipes`).
    """
    reasons = pd.Series("", index=runs.index, dtype=object)
    status = runs["status"].astype(str)
    why = runs["failure_reason"].fillna("").astype(str).str.strip() \
        if "failure_reason" in runs else pd.Series("", index=runs.index)
    why = why.str.replace(r"\s+", " ", regex=True)
    reasons[status != "FINISHED"] = "status " + status + why.where(why == "", ": " + why)
    free = reasons == ""
    no_cell = free & (runs["cell"].fillna("") == "")
    reasons[no_cell] = "not a model run (entry point " + runs["entry_point"].replace(
        "", "?").astype(str) + ")"
    free = reasons == ""
    reasons[free & (runs["backbone"].fillna("") == "")] = "no pipi.backbone tag"
    free = reasons == ""
    reasons[free & runs["seed"].isna()] = "no pipi.seed tag"
    cand = runs[reasons == ""].sort_values("start_time", ascending=False, kind="stable")
    cand = cand.assign(_recipe=check_recipes(cand))
    key = ["backbone", "cell", "seed", "_recipe"]
    dup = cand.duplicated(key, keep="first")
    newest = cand[~dup].set_index(key)["run_id"]
    for idx, row in cand[dup].iterrows():
        keep_id = newest.loc[tuple(row[k] for k in key)]
        reasons[idx] = f"superseded by newer run {keep_id} (same backbone, cell, seed, recipe)"
    kept = runs[reasons == ""].copy()
    excluded = runs[reasons != ""].copy()
    excluded["reason"] = reasons[reasons != ""]
    kept["seed"] = kept["seed"].astype(int)
    return (kept.sort_values(["backbone", "cell", "seed"]).reset_index(drop=True),
            excluded.reset_index(drop=True))


def reason_kind(reasons: pd.Series) -> pd.Series:
    """Reasons without their details (for counts): 'status FAILED', 'superseded', ..."""
    return reasons.str.replace(r" \(.*| by newer run.*|: .*", "", regex=True)


def check_single_dataset(runs: pd.DataFrame) -> str:
    """The one data digest of ``runs``; DataError naming the digests when they differ."""
    digests = runs["data_digest"].fillna("").replace("", "(no digest tag)")
    counts = digests.value_counts()
    if len(counts) > 1:
        detail = "; ".join(
            f"{d[:16]}: {n} runs (e.g. cell {runs.loc[digests == d, 'cell'].iloc[0]}, seed "
            f"{runs.loc[digests == d, 'seed'].iloc[0]})" for d, n in counts.items())
        first = counts.index[0]
        raise DataError(
            f"refusing to pair runs trained on different data ({len(counts)} data digests: "
            f"{detail}). Select one dataset, e.g. --filter \"tags.`pipi.data_digest` = "
            f"'{first}'\"")
    return "" if counts.empty or counts.index[0] == "(no digest tag)" else str(counts.index[0])



def mixed_profile_note(runs: pd.DataFrame) -> str | None:
    """A note when the runs come from different profiles (recipes), which should not be paired."""
    if "profile" not in runs:
        return None
    counts = runs["profile"].fillna("").replace("", "(none)").value_counts()
    if len(counts) < 2:
        return None
    return ("runs of different profiles are aggregated together ("
            + ", ".join(f"{p}: {n} runs" for p, n in counts.items())
            + "); select one with --filter \"params.profile = 'paper'\"")
