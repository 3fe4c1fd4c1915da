"""The ``promote`` workflow: move a registered model's ``champion`` alias only on evidence.

The evidence is computed by ``aggregate``'s own statistics (:mod:`pipi.analysis`), from the
per-frame test predictions of the runs behind the version:

* the **new arm**: FINISHED ``train`` runs of the version's cell and backbone on the same
  data digest and with the same recipe as the version's run (every seed it has); for a
  version made by ``import``, the imported runs of that cell and source (``pi (released)``),
  and the baseline arm is the imported ``baseline`` of that source (``a (released)``);
* the **baseline arm**: FINISHED ``train`` runs of ``baseline`` (default ``a``) with the same
  backbone, data digest and profile, in the same experiment; paired with the new arm by seed.

The gate passes when all of these hold:

1. at least ``min_sign_positive`` paired seeds (fewer is a refusal that gives the count);
2. the cross-seed mean macro-AUC delta (new - baseline) is positive and its BCa bootstrap
   interval excludes zero: with ``evidence="videos"`` (default) the video-clustered interval
   (:class:`pipi.stats.PairedAUCBootstrap`, test videos resampled), with ``evidence="seeds"``
   the paper's interval over the per-seed deltas (:func:`pipi.stats.seed_delta_bca`, seeds
   resampled; a note says where so few seeds make it unstable). Which one is recorded on the
   version (``pipi.promote.evidence``), with both intervals;
3. at least ``min_sign_positive`` seeds have a positive delta;
4. no class regresses significantly: per class, the bootstrap p-value of the cross-seed AUC
   delta, Benjamini-Hochberg adjusted over the classes; a class with a negative delta and
   adjusted p < 0.05 blocks promotion.

The evidence table is printed and recorded on the version (``pipi.promote.*`` tags and the
description) whether the gate passes or not. On promotion the current champion (if any)
becomes ``previous-champion``; ``rollback`` points ``champion`` back at it. A forced
promotion (``force_reason``) skips the gate, records the reason and says so.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.analysis import (
    AggregateOptions,
    Analysis,
    build_evidence,
    compare_cells,
    mark_imported,
    select_runs,
)
from pipi.analysis.recipes import recipe_signatures
from pipi.cells import CELLS, EXTERNAL_SOURCE, RELEASED, Arm
from pipi.errors import ConfigError, DataError, PipiError
from pipi.report.descriptions import model_card, training_evidence
from pipi.runs.evidence import default_cache_dir, fetch_predictions
from pipi.stats import adjust_pvalues

__all__ = ["CHAMPION", "EVIDENCE", "PREVIOUS", "Evidence", "PromoteResult", "gather_evidence",
           "promote", "rollback"]

log = logging.getLogger(__name__)

CHAMPION, PREVIOUS, CANDIDATE = "champion", "previous-champion", "candidate"
ALPHA = 0.05
#: What the gate's interval resamples: test videos (clustered) or seeds (the paper's).
EVIDENCE = ("videos", "seeds")
#: <prefix>-<backbone>-<cell>; the prefix is pipi unless PIPI_MODEL_PREFIX chose another
_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9][A-Za-z0-9_.-]*)-(?P<backbone>[a-z0-9_]+)"
                   r"-(?P<cell>[a-z_]+)$")


@dataclass
class Evidence:
    """What the gate saw: the comparison, the per-class deltas and each criterion."""

    cell: str
    baseline: str
    backbone: str
    seeds: tuple[int, ...] = ()
    deltas: tuple[float, ...] = ()
    new_runs: dict = field(default_factory=dict)
    baseline_runs: dict = field(default_factory=dict)
    delta: float = float("nan")
    ci: tuple[float, float] = (float("nan"), float("nan"))
    pvalue: float = float("nan")
    unit: str = ""
    evidence: str = "videos"                    # which interval gates: videos | seeds
    intervals: dict = field(default_factory=dict)  # unit -> (low, high), both kinds
    per_class: pd.DataFrame | None = None       # class, delta, p, p_bh
    #: the runs' classes in index order (their predictions' schema; Kvasir's 14 or the
    #: staged data's): the per-class rows and the model card name them
    names: tuple[str, ...] = ()
    criteria: list = field(default_factory=list)  # (criterion, value, required, ok)
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.criteria) and all(ok for *_, ok in self.criteria)

    def table(self) -> str:
        """The evidence as Markdown (printed and stored as the version's description)."""
        lines = [f"Evidence: {self.cell} vs {self.baseline} ({self.backbone}), seeds "
                 f"{','.join(map(str, self.seeds)) or '-'}", "",
                 "| criterion | value | required | ok |", "|---|---|---|---|"]
        lines += [f"| {c} | {v} | {r} | {'yes' if ok else 'NO'} |"
                  for c, v, r, ok in self.criteria]
        if self.seeds:
            lines += ["", "| seed | baseline run | new run | macro-AUC delta |",
            "|---|---|---|---|"]
            lines += [f"| {s} | {self.baseline_runs.get(s, '')} | {self.new_runs.get(s, '')} | "
                      f"{d:+.4f} |" for s, d in zip(self.seeds, self.deltas, strict=True)]
        if self.per_class is not None and len(self.per_class):
            lines += ["", "| class | AUC delta | p | p (BH) |", "|---|---|---|---|"]
            lines += [f"| {r['class']} | {r['delta']:+.4f} | {r['p']:.4f} | {r['p_bh']:.4f} |"
                      for _, r in self.per_class.iterrows()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class PromoteResult:
    promoted: bool
    model: str
    version: str
    previous: str | None
    text: str


# --------------------------------------------------------------------------- evidence
def _runs_of_version(mv: tracking.VersionRecord) -> dict:
    run = tracking.usable_run(mv.run_id, what=f"version {mv.version}")
    t = run.tags
    need = [tracking.tags.TAG_CELL, tracking.tags.TAG_BACKBONE, tracking.tags.TAG_DATA_DIGEST]
    missing = [k for k in need if not t.get(k)]
    if missing:
        raise DataError(f"version {mv.version} (run {mv.run_id}) lacks the tags {missing}; "
                        "only versions registered by pipi train can be promoted")
    # a version imported from outside (entry point import) is judged against imported
    # baseline runs of the same source, as aggregate keeps them (analysis.mark_imported)
    external = t.get(tracking.tags.TAG_SOURCE) == EXTERNAL_SOURCE
    label = (t.get(tracking.tags.TAG_SOURCE_LABEL) or RELEASED) if external else ""
    return {"run_id": mv.run_id, "experiment_id": run.experiment_id,
            "cell": t[tracking.tags.TAG_CELL] + (f" ({label})" if label else ""), "label": label,
            "backbone": t[tracking.tags.TAG_BACKBONE],
            "digest": t[tracking.tags.TAG_DATA_DIGEST],
            "profile": tracking.resolved_param(run.params, "profile")}


def _select(runs: pd.DataFrame, src: dict, baseline: str) -> pd.DataFrame:
    """The new arm (same recipe as the version's run) and the baseline arm (same profile)."""
    runs = runs[runs["status"] == "FINISHED"]
    new = runs[runs["cell"] == src["cell"]]
    sigs = recipe_signatures(new)
    mine = sigs[new["run_id"] == src["run_id"]]
    if mine.empty:
        raise DataError(f"run {src['run_id']} of the version is not a FINISHED train run of "
                        "its experiment")
    new = new[sigs == mine.iloc[0]]
    base = runs[(runs["cell"] == baseline) & (runs["profile"] == src["profile"])]
    return pd.concat([new, base], ignore_index=True)


def _check_evidence(evidence: str) -> None:
    if evidence not in EVIDENCE:
        raise ConfigError(f"evidence={evidence!r}; use one of {list(EVIDENCE)} (what the "
                          "gate's interval resamples)")


def gather_evidence(src: dict, *, baseline: str, min_sign_positive: int,
                    options: AggregateOptions | None = None,
                    cache_dir: Path | None = None, evidence: str = "videos") -> Evidence:
    """The evidence of the module docstring for the version's run ``src``."""
    _check_evidence(evidence)
    if src.get("label"):
        baseline = f"{baseline} ({src['label']})"
    ev = Evidence(cell=src["cell"], baseline=baseline, backbone=src["backbone"],
                  evidence=evidence)
    flt = (f"tags.`{tracking.tags.TAG_DATA_DIGEST}` = '{src['digest']}' and "
           f"tags.`{tracking.tags.TAG_BACKBONE}` = '{src['backbone']}'")
    runs = tracking.load_runs(src["experiment_id"], flt)
    runs = mark_imported(runs[runs["entry_point"].isin(("train", "import"))])
    kept, _ = select_runs(_select(runs, src, baseline))
    n_base = int((kept["cell"] == baseline).sum())
    if n_base == 0:
        ev.criteria.append(("baseline runs", f"0 FINISHED {baseline} runs", "same data, "
                            "backbone and profile", False))
        return ev
    dirs, no_preds = fetch_predictions(kept, Path(cache_dir) if cache_dir else
                                       default_cache_dir())
    kept = kept[kept["run_id"].isin(dirs)].reset_index(drop=True)
    ev.notes += [f"run {r} has no predictions artifact" for r in no_preds["run_id"]]
    found = build_evidence(kept, dirs, all_runs=runs, experiment_id=src["experiment_id"],
                              tracking_uri=tracking.current_tracking_uri(), filter_string=flt)
    ev.names = tuple(found.names)
    an = Analysis(found, options or AggregateOptions())
    notes: list[str] = []
    comp = compare_cells(an, baseline=baseline, cells=[src["cell"]], family="promote",
                         backbone=src["backbone"], notes=notes)[0]
    ev.notes += notes + list(comp.notes)
    ev.seeds = tuple(int(s) for s in comp.seeds)
    ev.deltas = tuple(float(d) for d in comp.deltas)
    ev.new_runs, ev.baseline_runs = dict(comp.new_runs), dict(comp.ref_runs)
    n = len(ev.seeds)
    ev.criteria.append(("paired seeds", str(n), f">= {min_sign_positive}",
                        n >= min_sign_positive))
    if n < max(min_sign_positive, 2):
        return ev
    boot, sb = comp.bootstrap, comp.seed_bca
    ev.delta, ev.pvalue = float(boot.statistic), float(boot.pvalue)
    ev.intervals = {boot.unit: (float(boot.bca_interval.low), float(boot.bca_interval.high))}
    if sb is not None:
        ev.intervals["seeds"] = tuple(float(x) for x in sb.confidence_interval)
        if sb.unstable:
            ev.notes.append(f"BCa CI (seeds): {sb.reason}")
    if evidence == "seeds":
        ev.unit = "seeds"
        ev.ci = ev.intervals.get("seeds", (float("nan"), float("nan")))
    else:
        ev.unit, ev.ci = boot.unit, ev.intervals[boot.unit]
    level = round(100 * an.options.confidence_level)
    ev.criteria.append(("mean macro-AUC delta", f"{ev.delta:+.4f}", "> 0", ev.delta > 0))
    ev.criteria.append((f"{level}% BCa CI ({ev.unit})", f"[{ev.ci[0]:+.4f}, {ev.ci[1]:+.4f}]",
                        "excludes 0", bool(ev.ci[0] > 0)))
    ev.criteria.append(("positive seeds", comp.sign_text, f">= {min_sign_positive}",
                        comp.n_positive >= min_sign_positive))
    rows = []
    seeds = list(comp.seeds)
    for k in found.classes:
        d = an.delta_ci(src["backbone"], baseline, src["cell"], seeds, classes=[k])
        rows.append({"class": found.names[k], "delta": float(d.statistic), "p": float(d.pvalue)})
    pc = pd.DataFrame(rows)
    pc["p_bh"] = adjust_pvalues(pc["p"].to_numpy(float), method="bh")
    ev.per_class = pc
    worse = pc[(pc["delta"] < 0) & (pc["p_bh"] < ALPHA)]
    ev.criteria.append(("classes with a significant regression (BH)",
                        ", ".join(worse["class"]) or "none", f"none at p_BH < {ALPHA}",
                        worse.empty))
    return ev


# --------------------------------------------------------------------------- the workflow
def _check_name(model: str) -> None:
    if not _NAME.match(model or ""):
        raise ConfigError(f"model={model!r}: expected a registered model name "
                          "<prefix>-<backbone>-<cell>, e.g. pipi-efficientnet_b0-b_plus")


def _record(model: str, version: str, ev: Evidence | None, decision: str, *,
            force_reason: str = "", error: str = "") -> str:
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = ev.table() if ev is not None else "no evidence"
    if error:
        text += f"\nevidence could not be computed: {error}"
    if force_reason:
        text += f"\nFORCED promotion, reason: {force_reason}"
    head = f"pipi promote {now}: {decision}"
    tags = {tracking.tags.TAG_PROMOTE_DECISION: decision, tracking.tags.TAG_PROMOTE_DATE: now}
    if ev is not None:
        tags.update({
            tracking.tags.TAG_PROMOTE_BASELINE: ev.baseline,
            tracking.tags.TAG_PROMOTE_SEEDS: ",".join(map(str, ev.seeds)),
            tracking.tags.TAG_PROMOTE_DELTA: f"{ev.delta:.6f}",
            tracking.tags.TAG_PROMOTE_CI: f"[{ev.ci[0]:.6f}, {ev.ci[1]:.6f}]",
            tracking.tags.TAG_PROMOTE_EVIDENCE: ev.evidence,
            tracking.tags.TAG_PROMOTE_CI_UNIT: ev.unit,
            tracking.tags.TAG_PROMOTE_INTERVALS: json.dumps(
                {u: [round(lo, 6), round(hi, 6)] for u, (lo, hi) in ev.intervals.items()}),
            tracking.tags.TAG_PROMOTE_P_BOOTSTRAP: f"{ev.pvalue:.6g}",
            tracking.tags.TAG_PROMOTE_RUNS: json.dumps({"new": ev.new_runs,
                                                   "baseline": ev.baseline_runs}),
            tracking.tags.TAG_PROMOTE_CRITERIA: json.dumps([[c, v, r, bool(ok)] for c, v, r, ok
                                                          in ev.criteria]),
        })
        if ev.per_class is not None:
            tags[tracking.tags.TAG_PROMOTE_CLASS_P_BH] = json.dumps(
                {r["class"]: [round(r["delta"], 6), round(r["p_bh"], 6)]
                 for _, r in ev.per_class.iterrows()})
    if force_reason:
        tags[tracking.tags.TAG_PROMOTE_FORCE_REASON] = force_reason
    if error:
        tags[tracking.tags.TAG_PROMOTE_ERROR] = error
    # the training evidence written at registration stays below the gate's numbers
    kept = training_evidence(tracking.registry.model_version(model, version).description)
    tracking.registry.record_on_version(model, version, tags,
                               description=f"{head}\n\n{text}" + (f"\n\n{kept}" if kept else ""))
    return f"{head}\n{text}"


def rollback(model: str) -> PromoteResult:
    """Point ``champion`` back at ``previous-champion`` (which then names the demoted one)."""
    _check_name(model)
    with tracking.registry.model_lock(model):
        prev = tracking.registry.alias_version(model, PREVIOUS)
        if prev is None:
            raise ConfigError(f"rollback=true: {model} has no @{PREVIOUS} to restore")
        cur = tracking.registry.alias_version(model, CHAMPION)
        tracking.registry.set_aliases(model, {CHAMPION: prev, PREVIOUS: cur})
        tracking.registry.check_aliases(model, {CHAMPION: prev, PREVIOUS: cur})
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tracking.registry.record_on_version(model, prev,
    {tracking.tags.TAG_PROMOTE_RESTORED: f"{now} (rollback from "
                                                                       f"version {cur})"})
    text = f"rolled back {model}: @{CHAMPION} -> version {prev}" + (
        f", @{PREVIOUS} -> version {cur}" if cur else "")
    return PromoteResult(True, model, prev, cur, text)


def promote(*, model: str, version: str = "", baseline: str = "a", min_sign_positive: int = 4,
            force_reason: str = "", options: AggregateOptions | None = None,
            cache_dir: Path | None = None, evidence: str = "videos") -> PromoteResult:
    """Gate, record and (on evidence or a forced reason) move ``champion`` (module docstring).

    ``evidence``: which interval gates, ``videos`` (test videos resampled) or ``seeds`` (the
    paper's BCa over per-seed deltas)."""
    _check_name(model)
    if force_reason and not force_reason.strip():
        raise ConfigError("force_reason is blank: give the reason for promoting without "
                          "passing the gate (it is recorded on the version)")
    force_reason = force_reason.strip()
    if baseline not in CELLS:
        raise ConfigError(f"baseline={baseline!r}: unknown cell; known: "
                          f"{', '.join(sorted(CELLS))}")
    _check_evidence(evidence)
    if min_sign_positive < 1:
        raise ConfigError(f"min_sign_positive={min_sign_positive}: must be >= 1")
    mv = tracking.registry.model_version(model, version or None, alias=CANDIDATE)
    ver = str(mv.version)
    missing = tracking.registry.missing_version_tags(mv)
    if missing:  # a registration cut short: not a version pipi finished registering
        raise ConfigError(
            f"model={model} version {ver}: lacks the version tags {', '.join(missing)} that "
            f"registration writes (it was cut short); resume its run (pipi train --resume "
            f"{mv.run_id}) to complete it, or promote another version")
    src = _runs_of_version(mv)
    if Arm.parse(src["cell"]).cell == baseline:
        raise ConfigError(f"baseline={baseline}: the version is itself a {baseline} model; "
                          "choose another baseline")
    ev, error = None, ""
    try:
        ev = gather_evidence(src, baseline=baseline, min_sign_positive=min_sign_positive,
                             options=options, cache_dir=cache_dir, evidence=evidence)
    except PipiError as exc:
        if not force_reason:
            _name_project_run(model, ver, "refused", f"refused: {exc}")
            raise
        error = str(exc)
    passed = ev is not None and ev.passed
    forced = bool(force_reason) and not passed
    go = passed or forced
    decision = ("promoted" if passed else "promoted (forced)" if forced else "refused")
    text = _record(model, ver, ev, decision, force_reason=force_reason if forced else "",
                   error=error)
    prev = None
    if go:
        # one promotion at a time per model: read the champion, move, check, under a lock
        with tracking.registry.model_lock(model):
            prev = tracking.registry.alias_version(model, CHAMPION)
            aliases = {PREVIOUS: prev} if prev and prev != ver else {}
            tracking.registry.set_aliases(model, {**aliases, CHAMPION: ver})
            tracking.registry.check_aliases(model, {**aliases, CHAMPION: ver})
        # the model card's serve command now names the champion (train wrote @candidate)
        tracking.set_model_description(model, model_card(
            cell=Arm.parse(src["cell"]).cell, backbone=src["backbone"], name=model,
            alias=CHAMPION, class_names=ev.names if ev is not None and ev.names else None))
        text += f"\n@{CHAMPION} -> {model} version {ver}" + (
            f" (@{PREVIOUS} -> version {prev})" if aliases else "")
        if forced:
            text += f"\nFORCED without passing the gate: {force_reason}"
    else:
        failed = [f"{c} = {v} (need {r})" for c, v, r, ok in (ev.criteria if ev else [])
                  if not ok]
        text += f"\nrefused: {model} version {ver} is not promoted; failed: " + \
            "; ".join(failed)
        prev = tracking.registry.alias_version(model, CHAMPION)
    _name_project_run(model, ver, decision, text)
    return PromoteResult(go, model, ver, prev, text)


def _name_project_run(model: str, version: str, decision: str, text: str) -> None:
    """Under ``mlflow run -e promote``: the run MLflow made says what it was (not MLflow's
    random name) and holds the gate's evidence (or why there was none) as its description."""
    tracking.tag_project_run({tracking.tags.TAG_ENTRY_POINT: "promote",
                              tracking.tags.TAG_PROMOTE_DECISION: decision},
                             note=f"promote {model} version {version}: {decision}\n\n{text}",
                             name=f"promote {model} v{version} ({decision})")
