"""Evidence: every aggregated run's test predictions, read once and aligned on the same frames."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.analysis.arms import BACKBONES
from pipi.analysis.selection import check_single_dataset
from pipi.classes import CLASSES
from pipi.errors import DataError
from pipi.predictions import (
    PREDICTIONS_FORMAT,
    PREDICTIONS_VERSION,
    check_finite,
    prob_columns,
)
from pipi.stats import per_class_auc
from pipi.tracking.tags import TAG_EVALUABLE_CLASSES, TAG_TEST_CLASSES

__all__ = ["ArmEvidence", "Evidence", "build_evidence"]


@dataclass(frozen=True)
class ArmEvidence:
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
        """(S,) test macro-AUC over the headline classes, recomputed from predictions."""
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
    classes: tuple[int, ...]     # headline classes (with test positives; see class_source)
    arms: Mapping[tuple[str, str], ArmEvidence]
    runs: pd.DataFrame           # included runs (one row each)
    excluded: pd.DataFrame       # excluded runs with a reason
    data_digest: str = ""
    experiment: str = ""
    experiment_id: str = ""
    tracking_uri: str = ""
    filter_string: str = ""
    all_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    class_source: str = ""       # where ``classes`` came from (tag or test predictions)
    cross_vendor: object = None  # analysis.retention.CrossVendorEvidence (galar runs) or None
    #: the same with the calibrated-prior children (``galar -P prior_params=``), or None;
    #: a DataError's message when they cannot be paired with the zero-shot ones
    cross_vendor_calibrated: object = None
    cross_vendor_calibrated_error: str = ""
    #: run id -> artifact path -> PNG bytes of the Grad-CAM runs' example figures
    #: (``gradcam/overlay.png``, ``gradcam/prior.png``), read by the workflow
    images: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)
    #: every class in index order (the predictions' schema: Kvasir's 14 or the staged data's)
    names: tuple[str, ...] = CLASSES
    #: (N,) source of every test row (a staged image dataset's ``source`` column) or None
    sources: np.ndarray | None = None
    #: analysis.loso.HeldOutEvidence: the runs trained with train_sources / test_sources
    #: (they never join ``arms``), or None when there are none
    held_out: object = None

    def arm(self, backbone: str, cell: str) -> ArmEvidence | None:
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
        return [self.names[k] for k in self.classes]


def _frame_key(df: pd.DataFrame) -> np.ndarray:
    return (df["path"].astype(str) + "\x00" + df["label"].astype(str)).to_numpy()


def _read_schema(folder: Path, run_id: str) -> dict:
    try:
        schema = json.loads((Path(folder) / "schema.json").read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"run {run_id}: unreadable predictions/schema.json ({exc})") from None
    if schema.get("format") != PREDICTIONS_FORMAT or schema.get("version") != PREDICTIONS_VERSION:
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
        data_digest and, when tagged, test_classes / evaluable_classes (JSON lists of class
        names; the headline classes, see ``_headline_classes``).
    prediction_dirs : mapping of run id -> Path
        The run's ``predictions/`` folder (format ``pipi.predictions`` version 1).

    Returns
    -------
    Evidence

    Raises
    ------
    DataError
        Runs of different data digests, different class lists (schema,
        ``pipi.test_classes`` or ``pipi.evaluable_classes``), or different test frames.
    """
    if runs.empty:
        raise DataError("no runs to aggregate")
    digest = check_single_dataset(runs)
    ref_key = ref_frame = None
    per_run: dict[str, np.ndarray] = {}
    names: tuple[str, ...] | None = None
    for row in runs.itertuples(index=False):
        folder = Path(prediction_dirs[row.run_id])
        schema = _read_schema(folder, row.run_id)
        mine = tuple(schema.get("classes") or ())
        if names is None:  # one data digest: one class list, the first run's
            names, first = mine, row
        if mine != names or len(names) < 2:
            raise DataError(
                f"refusing to pair run {row.run_id} (cell {row.cell}, seed {row.seed}): its "
                f"class list {list(mine)} differs from run {first.run_id}'s {list(names)}")
        cols = list(prob_columns(len(names)))
        df = pd.read_parquet(folder / "test.parquet")
        missing = [c for c in ("path", "video_id", "label", *cols) if c not in df]
        if missing:
            raise DataError(f"run {row.run_id}: test predictions lack columns {missing}")
        check_finite(df, f"run {row.run_id} (cell {row.cell}, seed {row.seed}) "
                         f"predictions/test.parquet")
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
        per_run[row.run_id] = df[cols].to_numpy(np.float32)[order]
    classes, class_source = _headline_classes(runs, ref_frame, names)
    labels = ref_frame["label"].to_numpy(np.int64)
    arms: dict[tuple[str, str], ArmEvidence] = {}
    for (backbone, cell), grp in runs.groupby(["backbone", "cell"], sort=False):
        grp = grp.sort_values("seed")
        probs = np.stack([per_run[r] for r in grp["run_id"]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # headline classes have test positives
            auc = np.stack([per_class_auc(labels, p, classes=classes) for p in probs])
        arms[(backbone, cell)] = ArmEvidence(backbone, cell, tuple(int(s) for s in grp["seed"]),
                                     tuple(grp["run_id"]), probs, auc)
    return Evidence(
        labels=labels, videos=ref_frame["video_id"].astype(str).to_numpy(),
        paths=ref_frame["path"].astype(str).to_numpy(), classes=classes, arms=arms,
        runs=runs.reset_index(drop=True),
        excluded=excluded if excluded is not None else pd.DataFrame(),
        data_digest=digest, experiment=experiment, experiment_id=experiment_id,
        tracking_uri=tracking_uri, filter_string=filter_string,
        all_runs=all_runs if all_runs is not None else runs, class_source=class_source,
        names=names, sources=(ref_frame["source"].astype(str).to_numpy()
                              if "source" in ref_frame else None))


#: Where the headline classes come from, in order of preference (column of load_runs, tag).
CLASS_SOURCES = (("test_classes", TAG_TEST_CLASSES),
                 ("evaluable_classes", TAG_EVALUABLE_CLASSES))


def _headline_classes(runs: pd.DataFrame, test: pd.DataFrame,
                      all_names: Sequence[str] = CLASSES) -> tuple[tuple[int, ...], str]:
    """(headline classes, where they came from).

    The classes with test positives: the runs' common ``pipi.test_classes`` tag; for runs
    logged before it, their ``pipi.evaluable_classes`` tag (then classes with val *and* test
    positives, said so in the source); without tags, the classes with positives in the test
    predictions. Classes without a positive test frame are left out either way.
    """
    cls, source = None, "the test predictions: classes with test positives (no class tag)"
    for column, tag in CLASS_SOURCES:
        values = runs[column] if column in runs else pd.Series(dtype=object)
        tagged: dict[str, list[str]] = {}
        for rid, v in zip(runs["run_id"], values, strict=False):
            if isinstance(v, str) and v:
                tagged.setdefault(v, []).append(rid)
        if not tagged:
            continue
        if len(tagged) > 1:
            detail = "; ".join(f"{names} ({len(ids)} runs, e.g. {ids[0]})"
                               for names, ids in tagged.items())
            raise DataError(f"refusing to pair runs with different class lists in {tag}: "
                            f"{detail}")
        names = json.loads(next(iter(tagged)))
        unknown = [n for n in names if n not in all_names]
        if unknown:
            raise DataError(f"{tag} names unknown classes {unknown}")
        cls = tuple(sorted(list(all_names).index(n) for n in names))
        source = f"tag {tag}" + ("" if column == "test_classes" else
                                 ", logged before pipi.test_classes: classes with val and "
                                 "test positives")
        break
    present = set(test["label"])
    if cls is None:
        cls = tuple(sorted(present))
    cls = tuple(k for k in cls if k in present and len(present) > 1)
    if not cls:
        raise DataError("no class to evaluate: no class has positives in the test predictions")
    return cls, source
