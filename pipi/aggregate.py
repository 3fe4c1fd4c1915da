"""The ``aggregate`` workflow: the paper's tables, cross-seed statistics and a dashboard,
computed from the per-frame predictions of MLflow runs.

One MLflow read (:func:`pipi.tracking.load_runs`, every page of ``search_runs``), one
download per run of its ``predictions/`` artifact (cached by run id), then pure functions:

    load_runs -> select_runs -> build_evidence -> tidy_metrics -> aggregate_over_seeds
                                               -> compare_cells / compare_pairs -> tables
                                               -> figures -> report files + dashboard

Every number is recomputed from the predictions (never from logged metrics) and every
table row carries the run ids it came from. Arms are paired by seed on identical test
frames; runs of different data digests or class lists are refused, not mixed. A missing
arm or seed is reported in the tables and the printed summary, never silently dropped.

Statistics (``pipi.stats``; sign convention delta = new - reference, z > 0 when the new
arm is better):

* per seed: paired DeLong test of the macro-AUC over the evaluable classes
  (:func:`pipi.stats.delong_macro_test`), per-class DeLong z, McNemar at the argmax;
* across seeds: Stouffer's combination of the per-seed z (the paper's method; it
  **assumes independent seeds**, which seeds sharing one test set are not), the exact
  sign-flip permutation test of the per-seed deltas, Wilcoxon signed-rank, and a
  video-clustered bootstrap of the cross-seed mean delta (one resample of the test videos
  applied to every seed and arm) with percentile and BCa intervals;
* Bonferroni and Benjamini-Hochberg adjustment once per declared family of comparisons.

The video bootstrap is computed for all (arm, seed, class) columns at once from
per-video pair counts (:class:`VideoBootstrap`): resample by resample it equals
:func:`pipi.stats.macro_auc_delta_bootstrap` with ``clusters`` and the same ``rng``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

from pipi.cells import CELLS
from pipi.classes import CLASSES
from pipi.errors import DataError
from pipi.predictions import PREDICTIONS_VERSION, PROB_COLUMNS
from pipi.report.tables import Table, fmt_mean_sd
from pipi.stats import (
    ConfidenceInterval,
    DegenerateDataWarning,
    Family,
    adjust_families,
    bca_constants,
    brier_score,
    delong_macro_test,
    expected_calibration_error,
    macro_auc_delta_bootstrap,
    mcnemar_test,
    paired_wilcoxon,
    per_class_auc,
    sign_flip_test,
    stouffer_combine,
)

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- the paper's arms
#: Backbone of the headline tables (the others appear in the cross-backbone table).
HEADLINE_BACKBONE = "efficientnet_b0"
#: Backbones of the cross-backbone table, in the paper's order.
BACKBONES = ("efficientnet_b0", "convnext_tiny", "resnet18")
#: Per-frame table rows (paper Table "per-frame").
PER_FRAME_CELLS = ("a", "pi", "distill")
#: The eight-cell ablation (paper Table "eight-cell"), with the distillation cell e-dagger.
ABLATION_CELLS = ("a", "b", "c", "c_prime", "c_dprime", "d", "e", "b_plus", "e_plus", "e_dagger")
#: Paired-test comparisons (reference, new) of the paper, plus the per-frame arms.
PAIRED_TESTS = (("a", "pi"), ("a", "distill"), ("b", "b_plus"), ("b", "e_plus"),
                ("e", "e_plus"), ("b_plus", "e_plus"), ("b", "c"), ("b", "c_dprime"),
                ("a", "e_plus"))
#: Per-class and per-patient breakdowns: the first pair present is the per-class table's.
BREAKDOWN_PAIRS = (("b", "e_plus"), ("a", "pi"))
#: Training-time channel ablation: arms compared with the full +PI cell.
CHANNEL_TRAIN_ARMS = ("a", "pblood_only", "phi_only")
#: Inference-time channel ablation variants of ``pi`` (``ablate -P study=channel_infer``).
CHANNEL_INFER_ARMS = ("pi@zero_phi", "pi@zero_pblood", "pi@zero_both")
#: Entry points whose tables are built only when such runs exist (none are built yet).
OTHER_STUDIES = {"transplant": "transplant", "robustness": "robustness",
                 "cross_vendor": "galar"}

CELL_LABELS: dict[str, str] = {
    "a": "(a) RGB-only per-frame baseline",
    "pi": "+PI input fusion (5-channel)",
    "distill": "+PI distillation (3-channel inference)",
    "pblood_only": "P_blood-only (Phi zeroed)",
    "phi_only": "Phi-only (P_blood zeroed)",
    "b": "(b) RGB + C2 (temporal only)",
    "c": "(c) RGB + C2 + C1_8 (train-norm)",
    "c_prime": "(c') RGB + C2 + C1_8 (per-patient z)",
    "c_dprime": "(c'') RGB + C2 + C1_13 (with topology)",
    "d": "(d) RGB + C2 + C1_8 + C3",
    "e": "(e) RGB + C2 + C3",
    "b_plus": "(b+) +PI 5-ch + C2",
    "e_plus": "(e+) +PI 5-ch + C2 + C3",
    "e_dagger": "(e-dagger) distill backbone + C2 + C3",
    "pi@zero_phi": "+PI, zero Phi at inference",
    "pi@zero_pblood": "+PI, zero P_blood at inference",
    "pi@zero_both": "+PI, both prior channels zeroed (strip-and-serve)",
}

STOUFFER_LABEL = "Stouffer (assumes independent seeds)"


def cell_label(cell: str) -> str:
    """The paper's row label of a cell (its description for cells the paper lacks)."""
    if cell in CELL_LABELS:
        return CELL_LABELS[cell]
    base = cell.split("@")[0]
    return f"{cell}: {CELLS[base].description}" if base in CELLS else cell


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class AggregateOptions:
    """Settings of the statistics (all logged as params of the aggregate run)."""

    n_resamples: int = 1000            # bootstrap resamples (paper: 1,000)
    n_permutations: int = 10_000       # sign-flip patterns; exact when 2**seeds <= this (paper)
    confidence_level: float = 0.95
    seed: int = 0                      # rng of the bootstrap (and Monte Carlo sign flips)
    headline_backbone: str = HEADLINE_BACKBONE  # falls back to the backbone with most runs
    fpr_targets: tuple[float, ...] = (0.05, 0.10)  # paper's operating points
    sensitivity_target: float = 0.90
    ece_bins: int = 15                 # paper: 15 equal-width bins
    figures: bool = True


# --------------------------------------------------------------------------- run selection
def select_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``load_runs`` output into model runs to aggregate and excluded runs (with reasons).

    Kept: FINISHED runs with ``pipi.cell``, ``pipi.backbone`` and ``pipi.seed`` tags, the
    newest one per (backbone, cell, seed). Excluded, with a ``reason`` column: other
    statuses, runs that are not model runs (stage, sweep parents, aggregate, ...), runs
    missing a tag, and older duplicates (superseded by a newer run of the same arm and seed).
    """
    reasons = pd.Series("", index=runs.index, dtype=object)
    reasons[runs["status"] != "FINISHED"] = "status " + runs["status"].astype(str)
    free = reasons == ""
    no_cell = free & (runs["cell"].fillna("") == "")
    reasons[no_cell] = "not a model run (entry point " + runs["entry_point"].replace(
        "", "?").astype(str) + ")"
    free = reasons == ""
    reasons[free & (runs["backbone"].fillna("") == "")] = "no pipi.backbone tag"
    free = reasons == ""
    reasons[free & runs["seed"].isna()] = "no pipi.seed tag"
    cand = runs[reasons == ""].sort_values("start_time", ascending=False, kind="stable")
    dup = cand.duplicated(["backbone", "cell", "seed"], keep="first")
    newest = cand[~dup].set_index(["backbone", "cell", "seed"])["run_id"]
    for idx, row in cand[dup].iterrows():
        keep_id = newest.loc[(row["backbone"], row["cell"], row["seed"])]
        reasons[idx] = f"superseded by newer run {keep_id} (same backbone, cell, seed)"
    kept = runs[reasons == ""].copy()
    excluded = runs[reasons != ""].copy()
    excluded["reason"] = reasons[reasons != ""]
    kept["seed"] = kept["seed"].astype(int)
    return (kept.sort_values(["backbone", "cell", "seed"]).reset_index(drop=True),
            excluded.reset_index(drop=True))


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


# --------------------------------------------------------------------------- evidence
@dataclass(frozen=True)
class Arm:
    """All seeds of one (backbone, cell) on the shared test frames."""

    backbone: str
    cell: str
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]
    probs: np.ndarray    # (S, N, 14) float32 softmax probabilities, frames in Evidence order
    auc: np.ndarray      # (S, K) per-class test AUC over Evidence.classes

    @property
    def key(self) -> tuple[str, str]:
        return (self.backbone, self.cell)

    @property
    def macro(self) -> np.ndarray:
        """(S,) test macro-AUC over the evaluable classes, recomputed from predictions."""
        return np.nanmean(self.auc, axis=1) if self.auc.size else np.zeros(0)

    def runs(self) -> dict[int, str]:
        return dict(zip(self.seeds, self.run_ids, strict=True))

    def index(self, seed: int) -> int:
        return self.seeds.index(seed)


@dataclass(frozen=True)
class Evidence:
    """Everything the statistics need, read once: test labels, videos and every arm."""

    labels: np.ndarray           # (N,) class index of every test row
    videos: np.ndarray           # (N,) video (patient) id
    paths: np.ndarray            # (N,)
    classes: tuple[int, ...]     # evaluable classes (positives in val and test)
    arms: Mapping[tuple[str, str], Arm]
    runs: pd.DataFrame           # included runs (one row each)
    excluded: pd.DataFrame       # excluded runs with a reason
    data_digest: str = ""
    experiment: str = ""
    experiment_id: str = ""
    tracking_uri: str = ""
    filter_string: str = ""
    all_runs: pd.DataFrame = field(default_factory=pd.DataFrame)

    def arm(self, backbone: str, cell: str) -> Arm | None:
        return self.arms.get((backbone, cell))

    def backbones(self) -> list[str]:
        found = {b for b, _ in self.arms}
        return [b for b in BACKBONES if b in found] + sorted(found - set(BACKBONES))

    def cells(self, backbone: str) -> list[str]:
        return [c for b, c in self.arms if b == backbone]

    def seed_universe(self, backbone: str) -> tuple[int, ...]:
        return tuple(sorted({s for (b, _), a in self.arms.items() if b == backbone
                             for s in a.seeds}))

    @property
    def class_names(self) -> list[str]:
        return [CLASSES[k] for k in self.classes]


def _frame_key(df: pd.DataFrame) -> np.ndarray:
    return (df["path"].astype(str) + "\x00" + df["label"].astype(str)).to_numpy()


def _read_schema(folder: Path, run_id: str) -> dict:
    try:
        schema = json.loads((Path(folder) / "schema.json").read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"run {run_id}: unreadable predictions/schema.json ({exc})") from None
    if schema.get("format") != "pipi.predictions" or schema.get("version") != PREDICTIONS_VERSION:
        raise DataError(f"run {run_id}: unsupported predictions format "
                        f"{schema.get('format')!r} version {schema.get('version')!r} "
                        f"(aggregate reads pipi.predictions version {PREDICTIONS_VERSION})")
    return schema


def build_evidence(runs: pd.DataFrame, prediction_dirs: Mapping[str, Path], *,
                   excluded: pd.DataFrame | None = None, all_runs: pd.DataFrame | None = None,
                   experiment: str = "", experiment_id: str = "", tracking_uri: str = "",
                   filter_string: str = "") -> Evidence:
    """Read every run's test predictions and align them on the same frames.

    Parameters
    ----------
    runs : pandas.DataFrame
        Runs to aggregate (``select_runs`` output): columns run_id, backbone, cell, seed,
        data_digest, evaluable_classes (JSON list of class names or "").
    prediction_dirs : mapping of run id -> Path
        The run's ``predictions/`` folder (format ``pipi.predictions`` version 1).

    Returns
    -------
    Evidence

    Raises
    ------
    DataError
        Runs of different data digests, different class lists (schema or
        ``pipi.evaluable_classes``), or different test frames.
    """
    if runs.empty:
        raise DataError("no runs to aggregate")
    digest = check_single_dataset(runs)
    ref_key = ref_frame = None
    tagged: dict[str, list[str]] = {}
    per_run: dict[str, np.ndarray] = {}
    for row in runs.itertuples(index=False):
        folder = Path(prediction_dirs[row.run_id])
        schema = _read_schema(folder, row.run_id)
        if list(schema.get("classes", [])) != list(CLASSES):
            raise DataError(
                f"refusing to pair run {row.run_id} (cell {row.cell}, seed {row.seed}): its "
                f"class list {schema.get('classes')} differs from pipi's {list(CLASSES)}")
        df = pd.read_parquet(folder / "test.parquet")
        missing = [c for c in ("path", "video_id", "label", *PROB_COLUMNS) if c not in df]
        if missing:
            raise DataError(f"run {row.run_id}: test predictions lack columns {missing}")
        key = _frame_key(df)
        order = np.argsort(key, kind="stable")
        key = key[order]
        if ref_key is None:
            ref_key, ref_frame, ref_run = key, df.iloc[order].reset_index(drop=True), row
        elif key.shape != ref_key.shape or not np.array_equal(key, ref_key):
            diff = len(set(key) ^ set(ref_key))
            raise DataError(
                f"refusing to pair run {row.run_id} (cell {row.cell}, seed {row.seed}) with run "
                f"{ref_run.run_id}: their test frames differ ({diff} frames in one but not the "
                "other) although the data digest is the same")
        per_run[row.run_id] = df[list(PROB_COLUMNS)].to_numpy(np.float32)[order]
        if isinstance(row.evaluable_classes, str) and row.evaluable_classes:
            tagged.setdefault(row.evaluable_classes, []).append(row.run_id)
    classes = _evaluable(tagged, ref_frame, prediction_dirs[ref_run.run_id])
    labels = ref_frame["label"].to_numpy(np.int64)
    arms: dict[tuple[str, str], Arm] = {}
    for (backbone, cell), grp in runs.groupby(["backbone", "cell"], sort=False):
        grp = grp.sort_values("seed")
        probs = np.stack([per_run[r] for r in grp["run_id"]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # classes are evaluable: positives exist
            auc = np.stack([per_class_auc(labels, p, classes=classes) for p in probs])
        arms[(backbone, cell)] = Arm(backbone, cell, tuple(int(s) for s in grp["seed"]),
                                     tuple(grp["run_id"]), probs, auc)
    return Evidence(
        labels=labels, videos=ref_frame["video_id"].astype(str).to_numpy(),
        paths=ref_frame["path"].astype(str).to_numpy(), classes=classes, arms=arms,
        runs=runs.reset_index(drop=True),
        excluded=excluded if excluded is not None else pd.DataFrame(),
        data_digest=digest, experiment=experiment, experiment_id=experiment_id,
        tracking_uri=tracking_uri, filter_string=filter_string,
        all_runs=all_runs if all_runs is not None else runs)


def _evaluable(tagged: Mapping[str, list[str]], test: pd.DataFrame, folder: Path) -> tuple:
    """Evaluable classes: the runs' common ``pipi.evaluable_classes`` tag, else from val+test."""
    if len(tagged) > 1:
        detail = "; ".join(f"{names} ({len(ids)} runs, e.g. {ids[0]})"
                           for names, ids in tagged.items())
        raise DataError(f"refusing to pair runs with different evaluable class lists: {detail}")
    if tagged:
        names = json.loads(next(iter(tagged)))
        unknown = [n for n in names if n not in CLASSES]
        if unknown:
            raise DataError(f"pipi.evaluable_classes names unknown classes {unknown}")
        cls = tuple(sorted(CLASSES.index(n) for n in names))
    else:
        val_path = Path(folder) / "val.parquet"
        val = set(pd.read_parquet(val_path, columns=["label"])["label"]) if val_path.is_file() \
            else set(test["label"])
        cls = tuple(sorted(val & set(test["label"])))
    present = set(test["label"])
    cls = tuple(k for k in cls if k in present and len(present) > 1)
    if not cls:
        raise DataError("no evaluable class: no class has positives in the test predictions")
    return cls


# --------------------------------------------------------------------------- tidy table
def tidy_metrics(evidence: Evidence, *, ece_bins: int = 15) -> pd.DataFrame:
    """One row per (run, metric), recomputed from the test predictions.

    Metrics: ``macro_auc`` (evaluable classes), ``auc/<Class>``, ``accuracy`` (argmax),
    ``ece`` (15 bins, mean over evaluable classes), ``brier`` (one-vs-rest, mean over
    evaluable classes) and ``brier_multiclass``. Columns: run_id, backbone, cell, seed,
    metric, value.
    """
    rows = []
    y, cls = evidence.labels, evidence.classes
    for arm in evidence.arms.values():
        for i, (seed, rid) in enumerate(zip(arm.seeds, arm.run_ids, strict=True)):
            p = arm.probs[i].astype(np.float64)
            vals = {"macro_auc": float(arm.macro[i]),
                    **{f"auc/{CLASSES[k]}": float(a) for k, a in zip(cls, arm.auc[i], strict=True)},
                    "accuracy": float((p.argmax(1) == y).mean())}
            ece = expected_calibration_error(y, p, n_bins=ece_bins, classes=cls)
            brier = brier_score(y, p, classes=cls)
            vals.update(ece=ece.statistic, brier=brier.statistic,
                        brier_multiclass=brier.multiclass)
            rows += [(rid, arm.backbone, arm.cell, seed, m, v) for m, v in vals.items()]
    return pd.DataFrame(rows, columns=["run_id", "backbone", "cell", "seed", "metric", "value"])


def aggregate_over_seeds(tidy: pd.DataFrame, *, metric: str = "macro_auc") -> pd.DataFrame:
    """Cross-seed summary of one metric per (backbone, cell).

    Returns columns backbone, cell, metric, n_seeds, mean, sd (sample sd, ddof = 1; NaN for
    one seed), min, max, seeds (tuple) and run_ids (tuple, same order as seeds).
    """
    sub = tidy[tidy["metric"] == metric].sort_values(["backbone", "cell", "seed"])
    out = []
    for (backbone, cell), g in sub.groupby(["backbone", "cell"], sort=False):
        v = g["value"].to_numpy(float)
        out.append({"backbone": backbone, "cell": cell, "metric": metric, "n_seeds": len(v),
                    "mean": float(np.mean(v)),
                    "sd": float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                    "min": float(v.min()), "max": float(v.max()),
                    "seeds": tuple(int(s) for s in g["seed"]), "run_ids": tuple(g["run_id"])})
    return pd.DataFrame(out, columns=["backbone", "cell", "metric", "n_seeds", "mean", "sd",
                                      "min", "max", "seeds", "run_ids"])


# --------------------------------------------------------------------------- video bootstrap
@dataclass(frozen=True)
class DeltaCI:
    """Bootstrap of a cross-seed mean AUC delta: percentile and BCa intervals, z0 and a."""

    statistic: float
    pvalue: float                      # two-sided percentile-bootstrap p of delta = 0
    percentile: ConfidenceInterval
    bca: ConfidenceInterval
    z0: float
    acceleration: float
    unit: str                          # videos | frames
    n_units: int
    n_resamples: int


_NAN_CI = ConfidenceInterval(float("nan"), float("nan"))


def _intervals(theta_hat: float, theta_star: np.ndarray, jack: np.ndarray, level: float):
    """(percentile CI, BCa CI, z0, a), the formulas of :func:`pipi.stats.bootstrap_ci`."""
    alpha = (1.0 - level) / 2.0
    if not (np.isfinite(theta_star).all() and np.isfinite(jack).all()
            and np.isfinite(theta_hat)):
        return _NAN_CI, _NAN_CI, float("nan"), float("nan")
    pct = ConfidenceInterval(*map(float, np.percentile(theta_star, [100 * alpha,
                                                                    100 * (1 - alpha)])))
    z0, a = bca_constants(theta_hat, theta_star, jack)
    if not (np.isfinite(z0) and np.isfinite(a)):
        return pct, _NAN_CI, z0, a
    z = special.ndtri(np.array([alpha, 1.0 - alpha]))
    adj = special.ndtr(z0 + (z0 + z) / (1.0 - a * (z0 + z)))
    return pct, ConfidenceInterval(*map(float, np.percentile(theta_star, 100 * adj))), z0, a


def pair_counts(scores: np.ndarray, positive: np.ndarray, video: np.ndarray,
                n_videos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-video Mann-Whitney pair sums of one score column.

    Returns ``K`` (V, V) with K[u, v] = sum over positives i of video u and negatives j of
    video v of psi(s_i, s_j) (1 if s_i > s_j, 1/2 if equal), and the per-video positive and
    negative counts ``P`` (V,), ``Q`` (V,). Under video weights c (how often each video is
    drawn) the AUC is ``c K c / ((c P) (c Q))``. One sort, O(N V).
    """
    n = scores.size
    order = np.argsort(scores, kind="stable")
    s, pos, g = scores[order], positive[order], video[order]
    neg = np.zeros((n + 1, n_videos))
    neg[1:][~pos, g[~pos]] = 1.0
    cum = np.cumsum(neg, axis=0)             # (N + 1, V): negatives per video before position
    starts = np.r_[True, s[1:] != s[:-1]]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)           # first position of each tie group
    last = np.r_[first[1:], n] - 1           # last position of each tie group
    pi = np.flatnonzero(pos)
    contrib = 0.5 * (cum[first[group[pi]]] + cum[last[group[pi]] + 1])  # (m, V)
    onehot = np.zeros((n_videos, pi.size))
    onehot[g[pi], np.arange(pi.size)] = 1.0
    k = onehot @ contrib
    p = np.bincount(video[positive], minlength=n_videos).astype(float)
    q = np.bincount(video[~positive], minlength=n_videos).astype(float)
    return k, p, q


class VideoBootstrap:
    """Video-clustered bootstrap of every (arm, seed, class) AUC at once.

    A resample draws as many test videos as there are, with replacement (the draws of
    :func:`pipi.stats.macro_auc_delta_bootstrap` with ``clusters``, in the same rng order),
    and is applied to every arm and seed, so deltas are paired and seeds are not treated as
    independent. AUCs under video weights come from per-video pair counts
    (:func:`pair_counts`): a resample costs O(V^2) per column instead of O(N). The BCa
    jackknife leaves out one video. With fewer than two test videos it falls back to the
    class-stratified frame bootstrap of :func:`macro_auc_delta_bootstrap`.
    """

    def __init__(self, evidence: Evidence, *, n_resamples: int = 1000,
                 confidence_level: float = 0.95, rng: int = 0):
        self.evidence = evidence
        self.n_resamples = int(n_resamples)
        self.level = confidence_level
        self.rng = rng
        vids, g = np.unique(evidence.videos, return_inverse=True)
        self.n_videos = len(vids)
        self.unit = "videos" if self.n_videos >= 2 else "frames"
        self._row: dict[tuple[str, str, int, int], int] = {}
        if self.unit == "videos":
            self._build(g)

    def _build(self, g: np.ndarray) -> None:
        ev, v = self.evidence, self.n_videos
        ks, ps, qs = [], [], []
        positives = {k: ev.labels == k for k in ev.classes}
        for arm in ev.arms.values():
            for i, seed in enumerate(arm.seeds):
                for k in ev.classes:
                    self._row[(arm.backbone, arm.cell, seed, k)] = len(ks)
                    kk, p, q = pair_counts(arm.probs[i][:, k].astype(np.float64),
                                           positives[k], g, v)
                    ks.append(kk)
                    ps.append(p)
                    qs.append(q)
        kmat, pmat, qmat = np.stack(ks), np.stack(ps), np.stack(qs)  # (R,V,V), (R,V), (R,V)
        gen = np.random.default_rng(self.rng)
        counts = np.empty((self.n_resamples, v))
        for b in range(self.n_resamples):
            counts[b] = np.bincount(gen.integers(0, v, v), minlength=v)
        self.auc_hat = self._auc(np.ones((1, v)), kmat, pmat, qmat)[0]         # (R,)
        self.auc_star = self._auc(counts, kmat, pmat, qmat)                     # (B, R)
        self.auc_jack = self._auc(1.0 - np.eye(v), kmat, pmat, qmat)            # (V, R)

    @staticmethod
    def _auc(c: np.ndarray, kmat, pmat, qmat, chunk: int = 256) -> np.ndarray:
        """AUC of every column under each row of video weights c (B, V) -> (B, R)."""
        out = np.empty((c.shape[0], kmat.shape[0]))
        for lo in range(0, kmat.shape[0], chunk):
            k = kmat[lo:lo + chunk]
            kc = np.tensordot(c, k, axes=([1], [2]))            # (B, r, V): sum_v c_v K[u, v]
            num = np.einsum("bru,bu->br", kc, c)
            den = (c @ pmat[lo:lo + chunk].T) * (c @ qmat[lo:lo + chunk].T)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[:, lo:lo + chunk] = np.where(den > 0, num / den, np.nan)
        return out

    def delta(self, backbone: str, reference: str, new: str, seeds: Sequence[int], *,
              classes: Sequence[int] | None = None) -> DeltaCI:
        """Bootstrap of mean over seeds and classes of AUC(new) - AUC(reference)."""
        cls = tuple(classes) if classes is not None else self.evidence.classes
        if self.unit == "frames":
            return self._frames_delta(backbone, reference, new, seeds, cls)
        rows_ref = np.array([[self._row[(backbone, reference, s, k)] for k in cls] for s in seeds])
        rows_new = np.array([[self._row[(backbone, new, s, k)] for k in cls] for s in seeds])

        def stat(auc: np.ndarray) -> np.ndarray:  # (B, R) -> (B,)
            d = auc[:, rows_new] - auc[:, rows_ref]  # (B, S, K)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN resample -> NaN
                return np.nanmean(d.reshape(d.shape[0], -1), axis=1)

        theta_hat = float(stat(self.auc_hat[None])[0])
        star, jack = stat(self.auc_star), stat(self.auc_jack)
        pct, bca, z0, a = _intervals(theta_hat, star, jack, self.level)
        below, above = int((star <= 0).sum()) + 1, int((star >= 0).sum()) + 1
        p = min(1.0, 2.0 * min(below, above) / (star.size + 1))
        return DeltaCI(theta_hat, p, pct, bca, z0, a, "videos", self.n_videos, star.size)

    def _frames_delta(self, backbone, reference, new, seeds, cls) -> DeltaCI:
        ev = self.evidence
        ra, na = ev.arm(backbone, reference), ev.arm(backbone, new)
        ref = np.stack([ra.probs[ra.index(s)] for s in seeds]).astype(np.float64)
        nw = np.stack([na.probs[na.index(s)] for s in seeds]).astype(np.float64)
        r = macro_auc_delta_bootstrap(ev.labels, ref, nw, classes=cls, strata=ev.labels,
                                      n_resamples=self.n_resamples,
                                      confidence_level=self.level, rng=self.rng)
        b = r.bootstrap
        return DeltaCI(r.statistic, r.pvalue, b.percentile_interval, b.bca_interval,
                       b.bias_correction, b.acceleration, "frames (stratified by class)",
                       ev.labels.size, b.n_resamples)


# --------------------------------------------------------------------------- comparisons
@dataclass(frozen=True)
class Comparison:
    """A paired comparison of two arms (new - reference) over their common seeds."""

    backbone: str
    reference: str
    new: str
    seeds: tuple[int, ...]                 # paired seeds
    notes: tuple[str, ...]                 # missing arm / seeds
    ref_runs: Mapping[int, str]
    new_runs: Mapping[int, str]
    ref_macro: np.ndarray                  # (S,)
    new_macro: np.ndarray                  # (S,)
    delong_z: np.ndarray                   # (S,) paired DeLong z of the macro-AUC per seed
    delong_p: np.ndarray                   # (S,)
    per_class_z: np.ndarray                # (S, K) per-class paired DeLong z per seed
    mcnemar_p: np.ndarray                  # (S,) McNemar at the argmax per seed
    accuracy_delta: np.ndarray             # (S,)
    stouffer_z: float = float("nan")
    stouffer_p: float = float("nan")
    sign_flip_p: float = float("nan")
    sign_flip_exact: bool = False
    wilcoxon_p: float = float("nan")
    bootstrap: DeltaCI | None = None
    family: str = ""
    adjusted: Mapping[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.reference} vs {self.new}"

    @property
    def available(self) -> bool:
        return len(self.seeds) > 0

    @property
    def deltas(self) -> np.ndarray:
        return self.new_macro - self.ref_macro

    @property
    def mean_delta(self) -> float:
        return float(self.deltas.mean()) if self.available else float("nan")

    @property
    def n_positive(self) -> int:
        return int((self.deltas > 0).sum())

    @property
    def sign_text(self) -> str:
        return f"{self.n_positive}/{len(self.seeds)}" if self.available else "n/a"

    def run_ids(self) -> dict[str, dict[int, str]]:
        return {self.reference: dict(self.ref_runs), self.new: dict(self.new_runs)}


@contextlib.contextmanager
def _collect_warnings(notes: list[str]) -> Iterator[None]:
    """Turn the statistics' DegenerateDataWarnings into table notes (once each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if not issubclass(w.category, DegenerateDataWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        msg = f"warning: {w.message}"
        if msg not in notes:
            notes.append(msg)


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


class Analysis:
    """Evidence plus options, the shared video bootstrap and a cache of per-seed DeLong tests."""

    def __init__(self, evidence: Evidence, options: AggregateOptions = AggregateOptions()):
        self.evidence = evidence
        self.options = options
        backbones = evidence.backbones()
        if options.headline_backbone in backbones:
            self.headline = options.headline_backbone
        else:
            counts = evidence.runs["backbone"].value_counts()
            self.headline = str(counts.index[0])
        self._bootstrap: VideoBootstrap | None = None
        self._delong: dict = {}
        self._tidy: pd.DataFrame | None = None

    @property
    def bootstrap(self) -> VideoBootstrap:
        if self._bootstrap is None:
            o = self.options
            self._bootstrap = VideoBootstrap(self.evidence, n_resamples=o.n_resamples,
                                             confidence_level=o.confidence_level, rng=o.seed)
        return self._bootstrap

    @property
    def tidy(self) -> pd.DataFrame:
        if self._tidy is None:
            self._tidy = tidy_metrics(self.evidence, ece_bins=self.options.ece_bins)
        return self._tidy

    def delong(self, backbone: str, reference: str, new: str, seed: int):
        key = (backbone, reference, new, seed)
        if key not in self._delong:
            ev = self.evidence
            ra, na = ev.arm(backbone, reference), ev.arm(backbone, new)
            self._delong[key] = delong_macro_test(
                ev.labels, ra.probs[ra.index(seed)].astype(np.float64),
                na.probs[na.index(seed)].astype(np.float64), classes=ev.classes,
                confidence_level=self.options.confidence_level)
        return self._delong[key]


def _seeds_text(seeds: Sequence[int]) -> str:
    return ",".join(str(s) for s in seeds) if len(seeds) else "-"


def _missing_notes(ev: Evidence, backbone: str, cells: Sequence[str]) -> list[str]:
    """'cell X: no runs' / 'cell X: missing seeds [..]' against the backbone's seed universe."""
    universe = ev.seed_universe(backbone)
    notes = []
    for c in cells:
        arm = ev.arm(backbone, c)
        if arm is None:
            notes.append(f"{c} ({backbone}): no runs")
        elif set(universe) - set(arm.seeds):
            notes.append(f"{c} ({backbone}): missing seeds "
                         f"{sorted(set(universe) - set(arm.seeds))} (present in other arms)")
    return notes


def _compare(an: Analysis, backbone: str, reference: str, new: str) -> Comparison:
    ev, o = an.evidence, an.options
    ra, na = ev.arm(backbone, reference), ev.arm(backbone, new)
    k = len(ev.classes)
    empty = np.zeros(0)
    if ra is None or na is None:
        missing = [c for c, a in ((reference, ra), (new, na)) if a is None]
        return Comparison(backbone, reference, new, (), tuple(f"{c} ({backbone}): no runs"
                                                             for c in missing),
                          {}, {}, empty, empty, empty, empty, np.zeros((0, k)), empty, empty)
    seeds = tuple(sorted(set(ra.seeds) & set(na.seeds)))
    notes = []
    for arm, other in ((ra, na), (na, ra)):
        lack = sorted(set(other.seeds) - set(arm.seeds))
        if lack:
            notes.append(f"{arm.cell} ({backbone}): no run for seeds {lack}; those seeds of "
                         f"{other.cell} are unpaired and left out of this comparison")
    if not seeds:
        notes.append(f"{reference} and {new} share no seed")
        return Comparison(backbone, reference, new, (), tuple(notes), ra.runs(), na.runs(),
                          empty, empty, empty, empty, np.zeros((0, k)), empty, empty)
    ri = [ra.index(s) for s in seeds]
    ni = [na.index(s) for s in seeds]
    dl = [an.delong(backbone, reference, new, s) for s in seeds]
    mc = [mcnemar_test(ev.labels, ra.probs[i], na.probs[j]) for i, j in zip(ri, ni, strict=True)]
    c = Comparison(
        backbone, reference, new, seeds, tuple(notes),
        {s: ra.run_ids[i] for s, i in zip(seeds, ri, strict=True)},
        {s: na.run_ids[j] for s, j in zip(seeds, ni, strict=True)},
        ra.macro[ri], na.macro[ni],
        np.array([d.statistic for d in dl]), np.array([d.pvalue for d in dl]),
        np.stack([d.per_class_statistic for d in dl]),
        np.array([m.pvalue for m in mc]), np.array([m.delta for m in mc]))
    z = c.delong_z
    st = stouffer_combine(z) if np.isfinite(z).all() else None
    sf = sign_flip_test(c.deltas, n_resamples=o.n_permutations, rng=o.seed)
    wx = paired_wilcoxon(c.ref_macro, c.new_macro) if len(seeds) >= 2 else None
    boot = an.bootstrap.delta(backbone, reference, new, seeds)
    return replace(c, stouffer_z=st.statistic if st else float("nan"),
                   stouffer_p=st.pvalue if st else float("nan"), sign_flip_p=sf.pvalue,
                   sign_flip_exact=sf.exact, wilcoxon_p=wx.pvalue if wx else float("nan"),
                   bootstrap=boot)


#: p-values adjusted within each family, and the names of the adjusted entries.
ADJUSTED_TESTS = ("stouffer", "sign_flip", "wilcoxon", "bootstrap")


def compare_pairs(an: Analysis, pairs: Sequence[tuple[str, str]], *, family: str,
                  backbone: str | None = None, notes: list[str] | None = None
                  ) -> list[Comparison]:
    """Paired comparisons of (reference, new) arms, adjusted once as one family.

    Each comparison pairs the arms by seed and gets the per-seed DeLong macro z and p,
    Stouffer's combination (assumes independent seeds), the exact sign-flip p, Wilcoxon's p,
    the video-clustered bootstrap (percentile and BCa) and McNemar per seed. The raw
    p-values of each kind (``ADJUSTED_TESTS``) are then adjusted by Bonferroni and BH over
    the comparisons of this family that could be tested: ``adjusted["<test>_bonferroni"]``
    and ``adjusted["<test>_bh"]``. A pair whose arm is missing is returned with no seeds.
    """
    backbone = backbone or an.headline
    notes = notes if notes is not None else []
    with _collect_warnings(notes):
        comps = [_compare(an, backbone, r, n) for r, n in pairs]
    return adjust_comparisons(comps, family=family)


def compare_cells(an: Analysis, *, baseline: str, cells: Sequence[str], family: str,
                  backbone: str | None = None, notes: list[str] | None = None
                  ) -> list[Comparison]:
    """Every cell of ``cells`` against ``baseline`` (delta = cell - baseline), one family."""
    return compare_pairs(an, [(baseline, c) for c in cells if c != baseline], family=family,
                         backbone=backbone, notes=notes)


def adjust_comparisons(comps: Sequence[Comparison], *, family: str) -> list[Comparison]:
    """Bonferroni and BH over the family, per kind of p-value (NaN stays NaN)."""
    labels = [f"{c.backbone}:{c.label}" for c in comps]
    raw = {"stouffer": [c.stouffer_p for c in comps],
           "sign_flip": [c.sign_flip_p for c in comps],
           "wilcoxon": [c.wilcoxon_p for c in comps],
           "bootstrap": [c.bootstrap.pvalue if c.bootstrap else float("nan") for c in comps]}
    adjusted: list[dict[str, float]] = [{} for _ in comps]
    for test, ps in raw.items():
        if not comps or np.isnan(np.asarray(ps, float)).all():
            continue
        fam = Family(f"{family}/{test}", dict(zip(labels, ps, strict=True)))
        for method in ("bonferroni", "bh"):
            res = adjust_families([fam], method=method)[fam.name]
            for i, p in enumerate(res.adjusted):
                adjusted[i][f"{test}_{method}"] = float(p)
    return [replace(c, family=family, adjusted=a) for c, a in zip(comps, adjusted, strict=True)]


# --------------------------------------------------------------------------- report
@dataclass(frozen=True)
class Report:
    """All outputs of one aggregation, before they are written."""

    tables: tuple[Table, ...]
    figures: Mapping[str, bytes]            # name -> PNG bytes
    captions: Mapping[str, str]
    figure_runs: Mapping[str, dict]         # name -> arm -> seed -> run id
    meta: dict
    summary: str
    curves: dict

    def table(self, key: str) -> Table:
        for t in self.tables:
            if t.key == key:
                return t
        raise KeyError(f"no table {key!r}; tables: {[t.key for t in self.tables]}")


def build_report(evidence: Evidence, options: AggregateOptions = AggregateOptions()) -> Report:
    """Every table and figure the evidence allows (pure: no MLflow, no network)."""
    from pipi.report import paper_tables as pt

    an = Analysis(evidence, options)
    tables: list[Table] = [pt.coverage_table(an), pt.per_frame_table(an),
                           pt.eight_cell_table(an), *pt.paired_tests_tables(an),
                           pt.per_class_table(an), pt.per_patient_table(an),
                           pt.operating_points_table(an), pt.calibration_table(an),
                           pt.cross_backbone_table(an), pt.channel_train_table(an),
                           pt.channel_infer_table(an), *pt.other_study_tables(an),
                           pt.runs_table(an), pt.excluded_table(an)]
    curves = pt.curve_data(an)
    figures, captions, fig_runs = {}, {}, {}
    if options.figures:
        from pipi.report import figures as figs

        figures, captions, fig_runs = figs.all_figures(an, tables, curves)
    meta = _meta(an)
    return Report(tuple(tables), figures, captions, fig_runs, meta, _summary(an, tables), curves)


def _meta(an: Analysis) -> dict:
    ev = an.evidence
    arms = {}
    for b in ev.backbones():
        uni = ev.seed_universe(b)
        for c in ev.cells(b):
            arm = ev.arm(b, c)
            arms[f"{b}/{c}"] = {"backbone": b, "cell": c, "seeds": arm.runs(),
                                "missing_seeds": sorted(set(uni) - set(arm.seeds))}
    return {
        "format": "pipi.aggregate", "version": 1, "experiment": ev.experiment,
        "experiment_id": ev.experiment_id, "filter": ev.filter_string,
        "tracking_uri": ev.tracking_uri, "data_digest": ev.data_digest,
        "headline_backbone": an.headline, "classes": list(CLASSES),
        "evaluable_classes": ev.class_names, "n_test_frames": int(ev.labels.size),
        "test_videos": sorted(set(ev.videos)),
        "bootstrap_unit": an.bootstrap.unit if an._bootstrap is not None else "videos",
        "options": {k: getattr(an.options, k) for k in an.options.__dataclass_fields__},
        "arms": arms,
        "runs": [{"run_id": r.run_id, "backbone": r.backbone, "cell": r.cell, "seed": int(r.seed)}
                 for r in ev.runs.itertuples()],
        "excluded": ([{"run_id": r.run_id, "status": r.status, "cell": r.cell,
                       "reason": r.reason} for r in ev.excluded.itertuples()]
                     if ev.excluded is not None and not ev.excluded.empty else []),
    }


def _summary(an: Analysis, tables: Sequence[Table]) -> str:
    ev = an.evidence
    lines = [f"aggregate: {len(ev.runs)} runs of experiment {ev.experiment or '?'!r}"
             + (f" (filter {ev.filter_string!r})" if ev.filter_string else "")
             + f", data digest {ev.data_digest[:16] or '?'}, {ev.labels.size} test frames in "
             f"{len(set(ev.videos))} videos, {len(ev.classes)} evaluable classes"]
    mixed = mixed_profile_note(ev.runs)
    if mixed:
        lines.append(f"WARNING: {mixed}")
    if ev.excluded is not None and not ev.excluded.empty:
        reasons = ev.excluded["reason"].str.replace(r" \(.*| by newer run.*", "", regex=True)
        lines.append("excluded: " + ", ".join(f"{n} {r}" for r, n in reasons.value_counts().items()))
    for b in ev.backbones():
        uni = ev.seed_universe(b)
        for c in ev.cells(b):
            arm = ev.arm(b, c)
            miss = sorted(set(uni) - set(arm.seeds))
            lines.append(f"  {b:16s} {c:16s} seeds {_seeds_text(arm.seeds):24s} macro-AUC "
                         f"{fmt_mean_sd(arm.macro.mean(), arm.macro.std(ddof=1) if len(arm.seeds) > 1 else float('nan'))}"
                         + (f"  MISSING seeds {miss}" if miss else ""))
    built = [t.key for t in tables if t.ok]
    empty = [t.key for t in tables if not t.ok]
    lines.append(f"tables built: {', '.join(built)}")
    if empty:
        lines.append(f"tables without runs: {', '.join(empty)}")
    absent: dict[str, list[str]] = {}
    for t in tables:
        for n in t.notes:
            if n.endswith(": no runs"):
                absent.setdefault(n[: -len(": no runs")], []).append(t.key)
    if absent:
        lines.append("arms with no runs (tables that expect them): " + ", ".join(
            f"{arm} ({'/'.join(dict.fromkeys(keys))})" for arm, keys in absent.items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------- writing
def write_report(report: Report, folder: Path, *, aggregate_run_id: str = "",
                 aggregate_experiment_id: str = "") -> Path:
    """Write Markdown, CSV, JSON, figures and the dashboard into ``folder``."""
    from pipi.report import dashboard
    from pipi.report.tables import dump_json, table_markdown

    folder = Path(folder)
    (folder / "tables").mkdir(parents=True, exist_ok=True)
    for t in report.tables:
        t.write(folder / "tables")
    fig_files = {}
    if report.figures:
        (folder / "figures").mkdir(exist_ok=True)
        for name, png in report.figures.items():
            (folder / "figures" / f"{name}.png").write_bytes(png)
            fig_files[name] = f"figures/{name}.png"
    meta = {**report.meta, "aggregate_run_id": aggregate_run_id,
            "aggregate_experiment_id": aggregate_experiment_id or report.meta["experiment_id"]}
    doc = {**meta, "summary": report.summary,
           "tables": {t.key: t.to_json() for t in report.tables},
           "figures": {n: {"file": f, "caption": report.captions.get(n, ""),
                           "run_ids": report.figure_runs.get(n, {})} for n, f in fig_files.items()},
           "curves": report.curves}
    dump_json(doc, folder / "aggregate.json")
    md = [f"# pipi aggregate: {meta.get('experiment', '')}", "", "```", report.summary, "```", ""]
    for t in report.tables:
        md.append(table_markdown(t))
    for n, f in fig_files.items():
        md += [f"![{report.captions.get(n, n)}]({f})", "", report.captions.get(n, ""), ""]
    (folder / "report.md").write_text("\n".join(md))
    (folder / "dashboard.html").write_text(dashboard.render_dashboard(report, meta=meta))
    return folder


# --------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class AggregateResult:
    run_id: str | None
    out: Path | None
    report: Report
    summary: str


def fetch_predictions(runs: pd.DataFrame, cache_dir: Path) -> tuple[dict[str, Path], pd.DataFrame]:
    """Download each run's ``predictions/`` once (cache by run id); runs without it excluded."""
    from pipi import tracking

    dirs, missing = {}, []
    for r in runs.itertuples(index=False):
        cached = Path(cache_dir) / r.run_id / "predictions" / "schema.json"
        if not cached.is_file() and not tracking.has_artifact(r.run_id, "predictions"):
            missing.append(r.run_id)
            continue
        dirs[r.run_id] = tracking.download_predictions(r.run_id, cache_dir)
    return dirs, runs[runs["run_id"].isin(missing)].assign(reason="no predictions artifact")


def default_cache_dir() -> Path:
    from pipi.paths import pipi_home

    return pipi_home() / "cache" / "predictions"


def run_aggregate(*, experiment: str = "pipi", filter_string: str = "", out: Path | None = None,
                  cache_dir: Path | None = None, options: AggregateOptions = AggregateOptions(),
                  log_run: bool = True) -> AggregateResult:
    """Query the runs, compute every table and figure, log them as an ``aggregate`` run.

    Parameters
    ----------
    experiment : str
        MLflow experiment whose runs are aggregated (the aggregate run is logged there too).
    filter_string : str
        MLflow search filter, e.g. ``"tags.`pipi.backbone` = 'efficientnet_b0'"``.
    out : Path, optional
        Also keep a local copy of everything logged (tables, JSON, figures, dashboard).
    cache_dir : Path, optional
        Where predictions are cached by run id (default ``$PIPI_HOME/cache/predictions``).
    options : AggregateOptions
    log_run : bool
        Log an MLflow run of entry point ``aggregate`` with the outputs as artifacts.

    Raises
    ------
    DataError
        No run to aggregate, or runs of different data digests / class lists / test frames.
    """
    from pipi import tracking

    runs = tracking.load_runs(experiment, filter_string)
    kept, excluded = select_runs(runs)
    if kept.empty:
        raise DataError(f"no FINISHED model runs in experiment {experiment!r}"
                        + (f" matching {filter_string!r}" if filter_string else "")
                        + f" ({len(runs)} runs seen, all excluded)")
    check_single_dataset(kept)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    dirs, no_preds = fetch_predictions(kept, cache)
    kept = kept[kept["run_id"].isin(dirs)].reset_index(drop=True)
    excluded = pd.concat([excluded, no_preds], ignore_index=True)
    if kept.empty:
        raise DataError(f"no run of experiment {experiment!r} has a predictions/ artifact")
    uri = tracking.current_tracking_uri()
    ev = build_evidence(kept, dirs, excluded=excluded, all_runs=runs, experiment=experiment,
                        experiment_id=str(runs["experiment_id"].iloc[0]), tracking_uri=uri,
                        filter_string=filter_string)
    report = build_report(ev, options)
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="pipi-aggregate-"))
    run_id = None
    try:
        if log_run:
            tags = {tracking.TAG_DATA_DIGEST: ev.data_digest, "pipi.aggregate.n_runs": len(kept)}
            # under `mlflow run` the run exists already (MLFLOW_RUN_ID), in the experiment
            # that `mlflow run` chose: attach to it instead of switching experiments
            attached = bool(os.environ.get("MLFLOW_RUN_ID"))
            with tracking.pipi_run(entry_point="aggregate",
                                   experiment=None if attached else experiment,
                                   run_name="aggregate", tags=tags) as run:
                run_id = run.info.run_id
                # prefixed: `mlflow run` has already logged its own experiment/filter/out
                tracking.log_params({f"aggregate.{k}": v for k, v in {
                    "experiment": experiment, "filter": filter_string, "n_runs": len(kept),
                    **report.meta["options"]}.items()})
                write_report(report, folder, aggregate_run_id=run_id,
                             aggregate_experiment_id=run.info.experiment_id)
                tracking.log_artifacts(folder)
        else:
            write_report(report, folder)
    finally:
        if not out:
            shutil.rmtree(folder, ignore_errors=True)
    summary = report.summary
    if run_id:
        summary += f"\naggregate run {run_id}: {tracking.ui_hint(run_id)}"
    if out:
        summary += f"\nlocal copy: {Path(out).resolve()}"
    log.info("aggregated %d runs into %d tables", len(kept), len(report.tables))
    return AggregateResult(run_id, Path(out) if out else None, report, summary)
