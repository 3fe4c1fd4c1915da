"""Recipes: which runs of one arm were trained the same way, so that they may be aggregated.

A run's recipe is everything that made it except its seed, its data path and the code
version. It is read from the run contract: the ``pipi.recipe`` tag (the ``mlflow run``
command that reproduces the run, seed and data left out here) and ``pipi.recipe_hash``
(hash of the full recipe of that seed); runs logged before those tags fall back to their
params. Runs of one arm must share one recipe: a ``select_metric=macro_f1``, an ``alpha=6``
or a 10-epoch run never replaces or joins the paper runs silently (:func:`check_recipes`).
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Mapping

import pandas as pd

from pipi.errors import DataError
from pipi.tracking.tags import TAG_RECIPE_HASH

__all__ = ["NOT_RECIPE", "check_recipes", "recipe_of", "recipe_signatures"]

#: Params and ``-P`` options that differ between runs of one recipe (not part of it).
#: A study's own option (``<study>.<name>``) is matched by its last part, so a transplant
#: child's ``transplant.donor_run_id`` (the +PI run of the same seed) is not a recipe either.
#: An imported run's ``file`` (one released file per seed) is not a recipe either.
NOT_RECIPE = frozenset({"seed", "data", "data_dir", "resume", "base_run_id", "source_run_id",
                        "donor_run_id", "experiment", "num_workers", "file"})


def _in_recipe(key: str) -> bool:
    return key not in NOT_RECIPE and key.rpartition(".")[2] not in NOT_RECIPE


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def recipe_of(run: Mapping, *, source: str) -> dict[str, str]:
    """The recipe of one run (a ``load_runs`` row) as option -> value.

    ``source`` ``"recipe"``: the ``-P key=value`` options of its ``pipi.recipe`` command;
    ``"params"``: its logged params. Keys in :data:`NOT_RECIPE` are left out.
    """
    if source == "recipe":
        words = shlex.split(_text(run.get("recipe")))
        pairs = [w.partition("=") for a, w in itertools.pairwise(words) if a == "-P"]
        return {k: v for k, _, v in pairs if _in_recipe(k)}
    raw = _text(run.get("params"))
    params = json.loads(raw) if raw else {}
    return {str(k): str(v) for k, v in params.items() if _in_recipe(str(k))}


def _signature(recipe: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(recipe.items())), separators=(",", ":"))


def recipe_signatures(runs: pd.DataFrame) -> pd.Series:
    """One seed-free recipe signature per run, comparable within a (backbone, cell).

    Within an arm, the ``pipi.recipe`` command is used when every run has one, else the
    params (runs logged before the tag), compared on the params every run of the arm logged
    (a param added to pipi later is not a difference). Runs with neither share the empty
    recipe.
    """
    out = pd.Series("", index=runs.index, dtype=object)
    if runs.empty:
        return out
    has_recipe = (runs["recipe"].fillna("") != "") if "recipe" in runs else \
        pd.Series(False, index=runs.index)
    for _, grp in runs.groupby(["backbone", "cell"], sort=False):
        source = "recipe" if has_recipe[grp.index].all() else "params"
        recipes = {idx: recipe_of(row, source=source) for idx, row in grp.iterrows()}
        if source == "params":  # a param that older runs did not log yet is not compared
            common = set.intersection(*(set(r) for r in recipes.values()))
            recipes = {i: {k: v for k, v in r.items() if k in common} for i, r in recipes.items()}
        for idx, r in recipes.items():
            out[idx] = source + ":" + _signature(r)
    return out


def _quote(key: str) -> str:
    return key if key.replace("_", "").isalnum() else f"`{key}`"


def _params(run: Mapping) -> dict[str, str]:
    return recipe_of(run, source="params")


def _describe(arm: str, grp: pd.DataFrame, sigs: pd.Series) -> tuple[str, str]:
    """(one-clause description of an arm's recipes, a filter that selects the largest).

    An option a recipe command leaves out (its default) is shown with the value the run
    logged as a param, when it did.
    """
    sig = sigs[grp.index]
    recipes = {s: json.loads(s.partition(":")[2]) for s in dict.fromkeys(sig)}
    keys = sorted({k for r in recipes.values() for k in r})
    differ = [k for k in keys if len({r.get(k) for r in recipes.values()}) > 1]
    # the largest recipe first; among equals, the one whose first run is oldest
    by_size = sorted(recipes, key=lambda s: (-int((sig == s).sum()),
                                             grp.loc[sig == s, "start_time"].min()))
    shown: dict[str, dict[str, str]] = {}
    for s in by_size:
        first = _params(grp[sig == s].iloc[0])
        shown[s] = {k: recipes[s].get(k, first.get(k, "(default)")) for k in differ}
    parts = []
    for i, s in enumerate(by_size, 1):
        runs = grp[sig == s]
        seeds = ",".join(str(int(x)) for x in sorted(runs["seed"].unique()))
        what = ", ".join(f"{k}={v}" for k, v in shown[s].items()) or "?"
        parts.append(f"recipe {i}: {what} ({len(runs)} runs, seeds {seeds}, e.g. run "
                     f"{runs['run_id'].iloc[0]})")
    flt = None
    for k in differ:  # a logged param that tells the largest recipe from the others
        values = {s: {_params(r).get(k) for _, r in grp[sig == s].iterrows()} for s in by_size}
        mine = values[by_size[0]]
        if len(mine) == 1 and None not in mine and all(
                not (v & mine) for s, v in values.items() if s != by_size[0]):
            flt = f"params.{_quote(k)} = '{next(iter(mine))}'"
            break
    if flt is None:
        other = grp[sig != by_size[0]]["run_id"]
        flt = "attributes.run_id NOT IN (" + ", ".join(f"'{r}'" for r in other) + ")"
    return f"{arm} has runs of {len(recipes)} recipes: " + "; ".join(parts), flt


def check_recipes(runs: pd.DataFrame) -> pd.Series:
    """Refuse arms whose runs come from several recipes; return the runs' signatures.

    ``runs``: candidate runs (FINISHED, with cell, backbone and seed tags). Raises a
    DataError naming every mixed arm, its recipes (the options that differ, the seeds and a
    run of each) and an MLflow filter that selects one recipe. Two runs of the same arm and
    seed whose ``pipi.recipe_hash`` tags differ are different recipes too.
    """
    sigs = recipe_signatures(runs)
    if runs.empty:
        return sigs
    hashes = runs["recipe_hash"].fillna("") if "recipe_hash" in runs else \
        pd.Series("", index=runs.index)
    problems, filters = [], []
    for (backbone, cell), grp in runs.groupby(["backbone", "cell"], sort=False):
        arm = f"{backbone}/{cell}"
        if sigs[grp.index].nunique() > 1:
            text, flt = _describe(arm, grp, sigs)
            problems.append(text)
            filters.append(flt)
            continue
        for seed, same in grp.groupby("seed"):
            hs = hashes[same.index]
            if hs[hs != ""].nunique() > 1:
                ids = ", ".join(f"{r} ({h})" for r, h in zip(same["run_id"], hs, strict=True))
                problems.append(f"{arm} seed {int(seed)} has runs of different "
                                f"{TAG_RECIPE_HASH}: {ids}")
                filters.append("attributes.run_id != '" + str(same["run_id"].iloc[-1]) + "'")
    if problems:
        shown = problems[:3] + ([f"... and {len(problems) - 3} more arms"]
                                if len(problems) > 3 else [])
        raise DataError(
            "refusing to mix recipes within an arm (aggregate never picks a run by recency "
            "across recipes): " + " | ".join(shown) + f". Select one recipe, e.g. --filter "
            f"\"{filters[0]}\"")
    return sigs
