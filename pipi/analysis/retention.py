"""Cross-vendor retention: Delta_Galar / Delta_Kvasir from per-frame predictions only.

The Galar side comes from the children of the ``galar`` entry point (study ``galar``): the
zero-shot predictions of each Kvasir-trained run on the staged Galar frames. A child is
paired with the Kvasir run it scored (tag ``pipi.source_run_id``), so seed s of an arm on
Galar is exactly the model of seed s on Kvasir.

For each (baseline, method) pair of cells with runs on both datasets, each class set and
each Galar subset (all capsule systems, then each system):

* Delta per seed pair = macro-AUC(method, seed s) - macro-AUC(baseline, seed s), on each
  dataset; across seeds, their mean;
* a video-clustered bootstrap of each dataset's cross-seed mean delta
  (:func:`pipi.stats.macro_auc_delta_bootstrap`: one resample of the test videos applied to
  every seed and arm, fixed class set, BCa interval); a dataset with a single video falls
  back to a class-stratified frame bootstrap (said so in ``unit``);
* retention = Delta_Galar / Delta_Kvasir, its interval the percentile interval of
  Delta_Galar* / Delta_Kvasir* over independent draws of the Kvasir test videos and the
  Galar videos, and its band (:func:`pipi.galkva.classify_retention`: undefined when
  Delta_Kvasir <= 0, unstable when Delta_Kvasir's interval includes 0).

Class sets: ``galkva`` = the GalKva-2026 v1.0 6-class intersection, scored on the frames
whose label is in it (as the benchmark does); ``all`` = every evaluable class (Kvasir: the
headline classes of the aggregate; Galar: every mapped class with positives), on all frames.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.analysis.arms import PAIRED_TESTS
from pipi.analysis.evidence import Evidence
from pipi.analysis.selection import check_single_dataset, select_runs
from pipi.cells import PER_FRAME_CELLS, Arm
from pipi.classes import CLASSES, KVASIR_MAP_HINT, ClassSet, class_index, not_kvasir
from pipi.errors import DataError
from pipi.galkva import (
    BENCHMARK_VERSION,
    SCORING_SETS,
    DatasetRuns,
    Retention,
    SeedRun,
    classify_retention,
)
from pipi.predictions import (
    PREDICTIONS_FORMAT,
    PREDICTIONS_VERSION,
    PROB_COLUMNS,
    check_finite,
)
from pipi.stats import (
    ConfidenceInterval,
    DeltaBootstrapResult,
    PairedDeltas,
    compare_arms,
    evaluable_classes,
    ratio_bootstrap,
)

__all__ = ["ALL_SYSTEMS", "CALIBRATED", "CLASS_SETS", "GALAR_STUDY", "ZERO_SHOT",
           "CrossVendorEvidence", "DeltaSide", "GalarArm", "RetentionRow", "build_cross_vendor",
           "fold_label", "galkva_runs", "retention_pairs", "retention_rows",
           "run_calibrate_modes", "run_folds",
           "run_variants", "select_galar_runs", "split_galar_runs"]

GALAR_STUDY = "galar"
ZERO_SHOT, CALIBRATED = "zero_shot", "calibrated"  # variants of galar children
ALL_SYSTEMS = "all capsule systems"
#: Class sets of the retention table: key -> label.
CLASS_SETS = {"galkva": f"GalKva {BENCHMARK_VERSION} (6-class intersection)",
              "all": "every evaluable class"}


def fold_label(fold: str) -> str:
    """How a table names the Galar frames it scored."""
    if fold == "all":
        return "every staged video (zero-shot, the paper's protocol)"
    return (f"the {fold} fold only (the calibration videos left out; not the paper's "
            "whole-subset protocol)")


def split_galar_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs of the Kvasir arms, Galar zero-shot children): the latter never join an arm."""
    study = runs["study"] if "study" in runs else pd.Series("", index=runs.index)
    galar = study.fillna("").astype(str) == GALAR_STUDY
    return runs[~galar].reset_index(drop=True), runs[galar].reset_index(drop=True)


# --------------------------------------------------------------------------- evidence
@dataclass(frozen=True)
class GalarArm:
    """The Galar predictions of one (backbone, cell)'s Kvasir runs, seed by seed."""

    backbone: str
    cell: str                       # the Kvasir cell (tag pipi.cell without "@variant")
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]        # galar children
    source_run_ids: tuple[str, ...]  # the Kvasir runs they scored
    probs: np.ndarray               # (S, N, 14), frames in CrossVendorEvidence order

    def runs(self) -> dict[int, str]:
        return dict(zip(self.seeds, self.run_ids, strict=True))

    def sources(self) -> dict[int, str]:
        return dict(zip(self.seeds, self.source_run_ids, strict=True))


@dataclass(frozen=True)
class CrossVendorEvidence:
    """Every aggregated Galar child's predictions, aligned on the same frames."""

    labels: np.ndarray   # (N,)
    videos: np.ndarray   # (N,)
    systems: np.ndarray  # (N,) capsule system of every frame
    paths: np.ndarray    # (N,)
    arms: Mapping[tuple[str, str], GalarArm]
    runs: pd.DataFrame
    excluded: pd.DataFrame
    data_digest: str
    fold: str            # "all" (every staged video) or "evaluation" (the vendor folds' fold)
    variant: str = ZERO_SHOT
    #: (backbone, cell) arms scored with the variant; the others are zero-shot children
    tuned: frozenset = frozenset()

    def arm(self, backbone: str, cell: str) -> GalarArm | None:
        return self.arms.get((backbone, cell))


def _read(folder: Path, run_id: str) -> pd.DataFrame:
    try:
        schema = json.loads((Path(folder) / "schema.json").read_text())
        df = pd.read_parquet(Path(folder) / "test.parquet")
    except (OSError, ValueError) as exc:
        raise DataError(f"galar run {run_id}: unreadable predictions ({exc})") from None
    if schema.get("format") != PREDICTIONS_FORMAT or schema.get("version") != PREDICTIONS_VERSION \
            or list(schema.get("classes", [])) != list(CLASSES):
        raise DataError(f"galar run {run_id}: unsupported predictions schema {schema}")
    check_finite(df, f"galar run {run_id} predictions/test.parquet")
    return df


def run_variants(runs: pd.DataFrame) -> pd.Series:
    """Each galar child's variant (``zero_shot`` where the tag is missing or empty)."""
    if "variant" not in runs:
        return pd.Series(ZERO_SHOT, index=runs.index, dtype=object)
    return runs["variant"].fillna("").astype(str).replace("", ZERO_SHOT)


def run_calibrate_modes(runs: pd.DataFrame) -> pd.Series:
    """How each calibrated galar child's prior was fitted (param ``galar.calibrate_mode``:
    ``train``; ``frozen`` where a run does not say, as before ``calibrate -P mode=train``)."""
    if "params" not in runs:
        return pd.Series("frozen", index=runs.index, dtype=object)
    return runs["params"].map(
        lambda p: str(json.loads(p).get("galar.calibrate_mode", "frozen"))
        if isinstance(p, str) and p else "frozen")


def run_folds(runs: pd.DataFrame) -> pd.Series:
    """Each galar child's scored fold (param ``galar.fold``: ``all`` or ``evaluation``; "?"
    where a run does not say)."""
    if "params" not in runs:
        return pd.Series("?", index=runs.index, dtype=object)
    return runs["params"].map(
        lambda p: str(json.loads(p).get("galar.fold", "?")) if isinstance(p, str) and p else "?")


def select_galar_runs(galar_runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``select_runs`` on the galar children, fold by fold: children of one source run on
    two folds (``all`` and ``evaluation``) are two sets of frames, not two recipes of one
    arm; :func:`build_cross_vendor` then keeps one fold per table."""
    folds = run_folds(galar_runs)
    parts = [select_runs(galar_runs[folds == f].reset_index(drop=True))
             for f in sorted(set(folds))]
    if not parts:
        return select_runs(galar_runs)
    return (pd.concat([k for k, _ in parts], ignore_index=True),
            pd.concat([x for _, x in parts], ignore_index=True))


def _pick_fold(folds: pd.Series, own: list[str], variant: str) -> str | None:
    """The fold a table uses: ``all`` (the paper's protocol) for zero-shot when any child has
    it; for the calibrated comparison, the fold its calibrated children scored."""
    if variant == ZERO_SHOT:
        cands = folds[[o == ZERO_SHOT for o in own]]
        prefer = ("all", "evaluation")
    else:
        cands = folds[[o == variant for o in own]]
        prefer = ("evaluation", "all")
    have = set(cands)
    for f in prefer:
        if f in have:
            return f
    return min(have) if have else None


def build_cross_vendor(galar_runs: pd.DataFrame, prediction_dirs: Mapping[str, Path],
                       kvasir: Evidence, *, excluded: pd.DataFrame | None = None,
                       variant: str = ZERO_SHOT
                       ) -> tuple[CrossVendorEvidence | None, pd.DataFrame]:
    """Align the Galar children (``select_runs`` output) and pair each with its Kvasir run.

    ``variant="zero_shot"`` takes the zero-shot children only. ``variant="calibrated"``
    takes the children scored with a calibrated prior (``galar -P prior_params=``) and, for
    the arms that have none (the RGB baseline: it has no prior to calibrate), their
    zero-shot children: the deployment comparison, zero-shot baseline vs calibrated method.
    A child whose source run is not the aggregated Kvasir run of its (backbone, cell, seed)
    is excluded with the reason. Children of one fold only are used (scored frames must be
    the same): zero-shot, ``all`` (every staged video, the paper's protocol) where any child
    has it; calibrated, the fold of the calibrated children (``evaluation`` by default); the
    children of another fold are excluded with the reason. Returns (evidence, or None when no child remains; the
    excluded galar runs with a ``reason`` column, ``excluded`` included).

    Raises
    ------
    DataError
        Children of different Galar data digests, or that scored different frames (e.g.
        ``fold=evaluation`` and ``fold=all`` mixed: select one with a filter).
    """
    excl = [excluded] if excluded is not None and not excluded.empty else []
    rows, reasons = [], []
    own_variants = run_variants(galar_runs).tolist()
    folds = run_folds(galar_runs).reset_index(drop=True)
    fold = _pick_fold(folds, own_variants, variant)
    tuned = frozenset((r.backbone, str(Arm.parse(r.cell).base))
                      for r, own in zip(galar_runs.itertuples(index=False), own_variants)
                      if variant != ZERO_SHOT and own == variant)
    for r, own, f in zip(galar_runs.itertuples(index=False), own_variants, folds):
        cell = str(Arm.parse(r.cell).base)
        arm = kvasir.arm(r.backbone, cell)
        src = str(r.base_run_id or "")
        if own != variant and not (own == ZERO_SHOT and (r.backbone, cell) not in tuned):
            reasons.append((r, f"variant {own}, not {variant}" + (
                " (a calibrated prior: see the zero-shot vs calibrated table)"
                if variant == ZERO_SHOT else "")))
        elif f != fold:
            reasons.append((r, f"scored fold {f}; this table uses the children of fold {fold}"
                               + (" (every staged video, the paper's protocol)"
                                  if fold == "all" else "")))
        elif arm is None or int(r.seed) not in arm.seeds:
            reasons.append((r, f"its Kvasir arm {r.backbone}/{cell} seed {r.seed} is not aggregated"))
        elif arm.runs()[int(r.seed)] != src:
            reasons.append((r, f"it scored run {src}, not the aggregated Kvasir run "
                               f"{arm.runs()[int(r.seed)]} of {r.backbone}/{cell} seed {r.seed}"))
        else:
            rows.append(r)
    if reasons:
        ex = pd.DataFrame([x._asdict() for x, _ in reasons])
        ex["reason"] = [why for _, why in reasons]
        excl.append(ex)
    excluded = pd.concat(excl, ignore_index=True) if excl else pd.DataFrame()
    if not rows:
        return None, excluded
    runs = pd.DataFrame(rows)
    digest = check_single_dataset(runs)
    ref_key, per_run, ref = None, {}, None
    for r in runs.itertuples(index=False):
        df = _read(prediction_dirs[r.run_id], r.run_id)
        key = (df["path"].astype(str) + "\x00" + df["label"].astype(str)).to_numpy()
        order = np.argsort(key, kind="stable")
        if ref_key is None:
            ref_key, ref, ref_id = key[order], df.iloc[order].reset_index(drop=True), r.run_id
        elif not np.array_equal(key[order], ref_key):
            raise DataError(f"refusing to pair galar runs {r.run_id} and {ref_id}: they scored "
                            "different Galar frames (another staging or frame selection); select "
                            "one with --filter")
        per_run[r.run_id] = df[list(PROB_COLUMNS)].to_numpy(np.float32)[order]
    arms = {}
    runs["cell"] = runs["cell"].astype(str).map(lambda c: str(Arm.parse(c).base))
    for (backbone, cell), grp in runs.groupby(["backbone", "cell"], sort=False):
        grp = grp.sort_values("seed")
        arms[(backbone, cell)] = GalarArm(
            backbone, cell, tuple(int(s) for s in grp["seed"]), tuple(grp["run_id"]),
            tuple(grp["base_run_id"]), np.stack([per_run[x] for x in grp["run_id"]]))
    systems = (ref["capsule_system"].astype(str).to_numpy() if "capsule_system" in ref
               else np.full(len(ref), "unknown"))
    folds = sorted({json.loads(p).get("galar.fold", "?") for p in runs["params"]}
                   ) if "params" in runs else ["?"]
    cv = CrossVendorEvidence(ref["label"].to_numpy(np.int64),
                             ref["video_id"].astype(str).to_numpy(), systems,
                             ref["path"].astype(str).to_numpy(), arms, runs.reset_index(drop=True),
                             excluded, digest, ",".join(folds), variant, tuned)
    return cv, excluded


def retention_pairs(ev: Evidence, cv: CrossVendorEvidence) -> list[tuple[str, str, str]]:
    """(backbone, baseline, method) with Galar and Kvasir runs of both cells: the paper's
    per-frame pairs first, then RGB ``a`` against every other per-frame cell."""
    out = []
    for backbone in dict.fromkeys(b for b, _ in cv.arms):
        cells = [c for b, c in cv.arms if b == backbone]
        cand = [p for p in PAIRED_TESTS if p[0] in PER_FRAME_CELLS and p[1] in PER_FRAME_CELLS]
        cand += [("a", c) for c in PER_FRAME_CELLS if c != "a"]
        for ref, new in dict.fromkeys(cand):
            if ref in cells and new in cells and ev.arm(backbone, ref) and ev.arm(backbone, new):
                out.append((backbone, ref, new))
    return out


# --------------------------------------------------------------------------- the statistics
@dataclass(frozen=True)
class DeltaSide(PairedDeltas):
    """One dataset's paired deltas (method - baseline) on one subset and class set."""

    dataset: str
    classes: tuple[str, ...]
    n_frames: int
    n_videos: int
    baseline_macro: np.ndarray  # (S,)
    method_macro: np.ndarray    # (S,)
    bootstrap: DeltaBootstrapResult | None

    @property
    def distribution(self) -> np.ndarray:
        return self.bootstrap.bootstrap_distribution

    @property
    def ci_method(self) -> str:
        """BCa, or the percentile interval where BCa is undefined (degenerate jackknife)."""
        bca = self.bootstrap.bca_interval
        return "BCa" if np.isfinite([bca.low, bca.high]).all() else "percentile"

    @property
    def ci(self) -> ConfidenceInterval:
        b = self.bootstrap
        return b.bca_interval if self.ci_method == "BCa" else b.percentile_interval


def delta_side(dataset: str, y: np.ndarray, videos: np.ndarray, base: np.ndarray,
               meth: np.ndarray, classes: list[int], *, restrict: bool, n_resamples: int,
               confidence_level: float, rng: np.random.Generator) -> DeltaSide | None:
    """Per-seed macro-AUCs of both arms and the bootstrap of the mean delta
    (:func:`pipi.stats.compare_arms`; None: no class with positive and negative frames).
    ``restrict``: keep only frames of ``classes``."""
    if restrict:
        keep = np.isin(y, classes)
        y, videos, base, meth = y[keep], videos[keep], base[:, keep], meth[:, keep]
    if not evaluable_classes(y, classes):
        return None
    comp = compare_arms(y, videos, base, meth, classes=classes, n_resamples=n_resamples,
                        confidence_level=confidence_level, method="BCa", rng=rng)
    return DeltaSide(dataset, tuple(CLASSES[c] for c in comp.classes), comp.n_frames,
                     comp.n_videos, comp.baseline_macro, comp.method_macro, comp.bootstrap)


@dataclass(frozen=True)
class RetentionRow:
    """One row of the cross-vendor table."""

    backbone: str
    baseline: str
    method: str
    class_set: str               # key of CLASS_SETS
    subset: str                  # ALL_SYSTEMS or a capsule system
    seeds: tuple[int, ...]
    kvasir: DeltaSide
    galar: DeltaSide | None      # None: no class with positives and negatives in the subset
    retention: Retention
    distribution: np.ndarray     # (B,) Delta_Galar* / Delta_Kvasir*
    run_ids: dict                # arm label -> seed -> run id

    @property
    def per_seed_ratio(self) -> np.ndarray:
        if self.galar is None:
            return np.full(len(self.seeds), np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.galar.deltas / self.kvasir.deltas


def _ratio_ci(kv: DeltaSide, gs: DeltaSide, level: float):
    """(Delta_Galar* / Delta_Kvasir* per draw, its percentile interval or None)."""
    res = ratio_bootstrap(gs.bootstrap, kv.bootstrap,
                          confidence_level=level)
    return res.distribution, (res.percentile_interval if res.n_finite >= 2 else None)


def _rng(seed: int, *key: str) -> np.random.Generator:
    """A stream per row identity, so adding a row never changes the others."""
    return np.random.default_rng([seed, zlib.crc32("\x00".join(key).encode())])


def retention_rows(ev: Evidence, cv: CrossVendorEvidence, *, n_resamples: int = 1000,
                   confidence_level: float = 0.95, seed: int = 0) -> list[RetentionRow]:
    """Every (pair, class set, subset) row; see the module docstring."""
    out = []
    galkva = [class_index(c) for c in SCORING_SETS[BENCHMARK_VERSION]]
    galar_present = sorted(set(cv.labels.tolist()))
    sets = {"galkva": (galkva, galkva, True), "all": (list(ev.classes), galar_present, False)}
    subsets = [(ALL_SYSTEMS, np.ones(len(cv.labels), bool))] + [
        (s, cv.systems == s) for s in sorted(set(cv.systems))]
    for backbone, ref, new in retention_pairs(ev, cv):
        kb, km = ev.arm(backbone, ref), ev.arm(backbone, new)
        gb, gm = cv.arm(backbone, ref), cv.arm(backbone, new)
        seeds = tuple(s for s in kb.seeds if s in km.seeds and s in gb.seeds and s in gm.seeds)
        if not seeds:
            continue
        ids = {f"kvasir {ref}": {s: kb.runs()[s] for s in seeds},
               f"kvasir {new}": {s: km.runs()[s] for s in seeds},
               f"galar {ref}": {s: gb.runs()[s] for s in seeds},
               f"galar {new}": {s: gm.runs()[s] for s in seeds}}

        def stack(arm, all_seeds):
            return np.stack([arm.probs[all_seeds.index(s)] for s in seeds]).astype(np.float64)

        for cs, (kcls, gcls, restrict) in sets.items():
            kv = delta_side("kvasir", ev.labels, ev.videos, stack(kb, kb.seeds),
                            stack(km, km.seeds), kcls, restrict=restrict,
                            n_resamples=n_resamples, confidence_level=confidence_level,
                            rng=_rng(seed, "kvasir", backbone, ref, new, cs))
            if kv is None:
                continue
            gbp, gmp = stack(gb, gb.seeds), stack(gm, gm.seeds)
            for name, m in subsets:
                gs = delta_side("galar", cv.labels[m], cv.videos[m], gbp[:, m], gmp[:, m], gcls,
                                restrict=restrict, n_resamples=n_resamples,
                                confidence_level=confidence_level,
                                rng=_rng(seed, "galar", backbone, ref, new, cs, name))
                if gs is None:
                    ret = classify_retention(kv.delta, None)
                    ratio = np.zeros(0)
                else:
                    ratio, ci = _ratio_ci(kv, gs, confidence_level)
                    ret = classify_retention(kv.delta, gs.delta, delta_kvasir_ci=kv.ci,
                                             confidence_interval=ci)
                out.append(RetentionRow(backbone, ref, new, cs, name, seeds, kv, gs, ret,
                                        ratio, ids))
    return out


# --------------------------------------------------------------------------- GalKva input
def _seed_runs(labels, videos, paths, arm_probs, seeds, all_seeds, run_ids
               ) -> tuple[SeedRun, ...]:
    out = []
    for s in seeds:
        df = pd.DataFrame({"path": paths, "video_id": videos, "label": labels})
        p = arm_probs[all_seeds.index(s)]
        for i, col in enumerate(PROB_COLUMNS):
            df[col] = p[:, i]
        out.append(SeedRun(str(s), df, run_ids[s]))
    return tuple(out)


def galkva_runs(ev: Evidence, cv: CrossVendorEvidence | None, *, backbone: str, baseline: str,
                method: str) -> dict[str, DatasetRuns]:
    """The GalKva input (:func:`pipi.galkva.recompute`) of one pair: the seeds with runs of
    both cells on both datasets; DataError naming what is missing."""
    if tuple(ev.names) != CLASSES:
        ids = [r for c in (baseline, method) if ev.arm(backbone, c)
               for r in ev.arm(backbone, c).run_ids][:4]
        who = f"runs {', '.join(ids)}" if ids else "the selected runs"
        raise DataError(f"{not_kvasir(who, ClassSet(tuple(ev.names)), 'predict')}; GalKva scores "
                        f"Kvasir-Capsule's 14 classes (Galar's labels are mapped onto them): "
                        f"{KVASIR_MAP_HINT}")
    kb, km = ev.arm(backbone, baseline), ev.arm(backbone, method)
    gb, gm = (cv.arm(backbone, baseline), cv.arm(backbone, method)) if cv else (None, None)
    missing = [f"{d} {c}" for d, c, a in (("kvasir", baseline, kb), ("kvasir", method, km),
                                          ("galar", baseline, gb), ("galar", method, gm))
               if a is None]
    if missing:
        raise DataError(f"no runs of {', '.join(missing)} (backbone {backbone}) in this "
                        "selection; GalKva needs both cells on Kvasir and their `galar` "
                        "zero-shot runs")
    seeds = [s for s in kb.seeds if s in km.seeds and s in gb.seeds and s in gm.seeds]
    if not seeds:
        raise DataError(f"{baseline} and {method} ({backbone}) share no seed with runs on both "
                        "datasets")
    return {
        "kvasir": DatasetRuns(
            baseline=_seed_runs(ev.labels, ev.videos, ev.paths, kb.probs, seeds, kb.seeds, kb.runs()),
            method=_seed_runs(ev.labels, ev.videos, ev.paths, km.probs, seeds, km.seeds, km.runs())),
        "galar": DatasetRuns(
            baseline=_seed_runs(cv.labels, cv.videos, cv.paths, gb.probs, seeds, gb.seeds, gb.runs()),
            method=_seed_runs(cv.labels, cv.videos, cv.paths, gm.probs, seeds, gm.seeds, gm.runs())),
    }
