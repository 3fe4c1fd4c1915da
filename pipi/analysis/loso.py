"""Leave one source out: the paper's cross-vendor question on one multi-source dataset.

Runs trained with ``train``/``ablate -P train_sources=... -P test_sources=...`` (params
``train_sources`` / ``test_sources`` of the run, set only when given) never join the arms of
the runs trained on every source: their recipe differs and they score other test frames.
They are split off (:func:`split_heldout_runs`), selected per condition (one condition = one
(train_sources, test_sources) pair, :func:`select_heldout_runs`) and read into an
:class:`~pipi.analysis.Evidence` of their own per condition (:func:`build_heldout`).

Per condition, held-out source S (a scored source the runs never trained on) and
(baseline, method) pair, on S's test frames (:func:`loso_rows`):

* in source: the runs trained on every source (the aggregate's arms), scored on S's frames;
* held out: the condition's runs, which never saw S, scored on the same frames;
* per seed, each arm's macro-AUC over the classes with positive and negative frames of S
  (the per-source table's classes), the delta method - baseline per seed and its mean;
* one :class:`pipi.stats.PairedAUCBootstrap` over the four arms' columns: the two deltas'
  intervals (test videos, or the aggregate's ``resample``) and the retention
  Delta_held-out / Delta_in-source under the same resamples (the frames are shared, so
  draws are paired, unlike Galar's two independent test sets); the seed-level BCa of each
  delta (:meth:`pipi.analysis.Analysis.seed_bca`); the band as for Galar
  (:func:`pipi.galkva.classify_retention`: undefined when Delta_in-source <= 0, unstable
  when its interval includes 0).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipi.analysis.evidence import Evidence, build_evidence
from pipi.analysis.selection import select_runs
from pipi.errors import DataError
from pipi.galkva import Retention, classify_retention
from pipi.stats import (
    ConfidenceInterval,
    DeltaBootstrapResult,
    PairedAUCBootstrap,
    SeedBCaResult,
    evaluable_classes,
    per_class_auc,
)

__all__ = ["HeldOutCondition", "HeldOutEvidence", "LosoRow", "LosoSide", "build_heldout",
           "condition_label", "loso_rows", "run_sources", "select_heldout_runs",
           "split_heldout_runs"]

SOURCE_PARAMS = ("train_sources", "test_sources")


def _names(value) -> tuple[str, ...]:
    """Sorted source names of a comma-separated option value."""
    return tuple(sorted({s.strip() for s in str(value or "").split(",") if s.strip()}))


def run_sources(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's ``train_sources`` and ``test_sources`` params (sorted, comma-joined; ""
    where the run does not set them: every source)."""
    params = runs["params"] if "params" in runs else pd.Series("", index=runs.index)
    parsed = params.map(lambda p: json.loads(p) if isinstance(p, str) and p else {})
    return pd.DataFrame({k: parsed.map(lambda p, k=k: ",".join(_names(p.get(k, ""))))
                         for k in SOURCE_PARAMS}, index=runs.index)


def split_heldout_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs trained and scored on every source, runs with ``train_sources`` or
    ``test_sources``): the latter never join the aggregate's arms."""
    src = run_sources(runs)
    chosen = (src["train_sources"] != "") | (src["test_sources"] != "")
    return runs[~chosen].reset_index(drop=True), runs[chosen].reset_index(drop=True)


def condition_label(train: tuple[str, ...], test: tuple[str, ...]) -> str:
    """How a table names a condition: ``train KID,KVASIR -> test SEE-AI``."""
    return (f"train {','.join(train) or 'every source'} -> "
            f"test {','.join(test) or 'every source'}")


def _conditions(runs: pd.DataFrame) -> pd.Series:
    src = run_sources(runs)
    return src["train_sources"] + "|" + src["test_sources"]


def select_heldout_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``select_runs`` per condition (one (train_sources, test_sources) pair): two conditions
    are two recipes scored on two sets of frames, never one arm."""
    cond = _conditions(runs)
    parts = [select_runs(runs[cond == c].reset_index(drop=True)) for c in sorted(set(cond))]
    if not parts:
        return select_runs(runs)
    return (pd.concat([k for k, _ in parts], ignore_index=True),
            pd.concat([x for _, x in parts], ignore_index=True))


@dataclass(frozen=True)
class HeldOutCondition:
    """The runs of one (train_sources, test_sources) pair, read as an Evidence of their own."""

    train_sources: tuple[str, ...]   # () = every source
    test_sources: tuple[str, ...]    # () = every source
    evidence: Evidence               # their test predictions (the scored sources' frames)

    @property
    def label(self) -> str:
        return condition_label(self.train_sources, self.test_sources)

    def held_out(self) -> list[str]:
        """The scored sources these runs never trained on."""
        scored = sorted(set(self.evidence.sources.tolist())) \
            if self.evidence.sources is not None else list(self.test_sources)
        return [s for s in scored if self.train_sources and s not in self.train_sources]


@dataclass(frozen=True)
class HeldOutEvidence:
    """Every condition's evidence, the runs left out (with a ``reason``) and why a condition
    could not be read (label -> message)."""

    conditions: tuple[HeldOutCondition, ...]
    excluded: pd.DataFrame = field(default_factory=pd.DataFrame)
    errors: Mapping[str, str] = field(default_factory=dict)
    #: False: the selection has no run trained on every source (the aggregate's arms are
    #: these held-out runs themselves), so no row has an in-source side
    in_source: bool = True


def build_heldout(runs: pd.DataFrame, prediction_dirs: Mapping[str, Path], main: Evidence, *,
                  excluded: pd.DataFrame | None = None, in_source: bool = True
                  ) -> HeldOutEvidence:
    """Read the held-out runs (``select_heldout_runs`` output) condition by condition.

    A condition whose runs are of another data digest than ``main``, or cannot be paired
    (``build_evidence``'s DataError: other class lists or frames), is left out with the
    reason; a condition that holds no source out (``train_sources`` empty) too.
    """
    excl = [excluded] if excluded is not None and not excluded.empty else []
    conditions, errors = [], {}
    cond = _conditions(runs)
    for c in sorted(set(cond)):
        grp = runs[cond == c].reset_index(drop=True)
        train, test = (_names(x) for x in c.split("|"))
        label = condition_label(train, test)
        why = ""
        if not train:
            why = ("trained on every source: nothing held out (its scored frames are "
                   "in-source; the in-source condition is the runs without train_sources)")
        elif main.data_digest and set(grp["data_digest"].fillna("")) != {main.data_digest}:
            why = (f"trained on other data (digest {grp['data_digest'].iloc[0][:16]}) than the "
                   f"runs on every source ({main.data_digest[:16]})")
        else:
            try:
                ev = build_evidence(grp, prediction_dirs)
            except DataError as exc:
                why = str(exc)
            else:
                if ev.sources is None:
                    why = "its test predictions name no source"
                elif ev.names != main.names:
                    why = (f"its class list {list(ev.names)} differs from the runs on every "
                           f"source' {list(main.names)}")
                else:
                    conditions.append(HeldOutCondition(train, test, ev))
        if why:
            errors[label] = why
            excl.append(grp.assign(reason=f"held-out condition {label}: {why}"))
    out = pd.concat(excl, ignore_index=True) if excl else pd.DataFrame()
    return HeldOutEvidence(tuple(conditions), out, errors, in_source)


# --------------------------------------------------------------------------- the statistics
@dataclass(frozen=True)
class LosoSide:
    """One condition's paired arms on S's frames: per-seed macro-AUCs, the mean delta's
    bootstrap and its seed-level BCa (None: fewer than two seeds)."""

    baseline_macro: np.ndarray      # (S,)
    method_macro: np.ndarray        # (S,)
    bootstrap: DeltaBootstrapResult
    seed_bca: SeedBCaResult | None
    run_ids: dict                   # arm -> seed -> run id

    @property
    def deltas(self) -> np.ndarray:
        return self.method_macro - self.baseline_macro

    @property
    def delta(self) -> float:
        return float(self.deltas.mean())

    @property
    def ci(self) -> ConfidenceInterval:
        """BCa, or the percentile interval where BCa is undefined."""
        b = self.bootstrap
        return b.bca_interval if np.isfinite(list(b.bca_interval)).all() \
            else b.percentile_interval


@dataclass(frozen=True)
class LosoRow:
    """One (condition, held-out source, pair) row; a side is None where it has no runs
    (``note`` says why)."""

    backbone: str
    baseline: str
    method: str
    source: str
    condition: str
    seeds: tuple[int, ...]
    classes: tuple[str, ...]
    n_frames: int
    n_videos: int
    in_source: LosoSide | None
    held_out: LosoSide | None
    ratio: DeltaBootstrapResult | None   # Delta_held-out / Delta_in-source, shared draws
    retention: Retention | None
    bootstrap_seed: int                  # the engine's rng (reproduces the intervals)
    note: str = ""


def _seed(seed: int, *key: str) -> int:
    """An rng seed per row identity, so adding a row never changes the others."""
    return int(np.random.default_rng([seed, zlib.crc32("\x00".join(key).encode())])
               .integers(2**63))


def _frame_keys(ev: Evidence, m: np.ndarray) -> np.ndarray:
    return np.char.add(np.char.add(ev.paths[m].astype(str), "\x00"),
                       ev.labels[m].astype(str))


def _arms(ev: Evidence, backbone: str, ref: str, new: str):
    a, b = ev.arm(backbone, ref), ev.arm(backbone, new)
    return (a, b) if a is not None and b is not None else None


def _macro(y, probs, cls) -> np.ndarray:
    return np.array([np.mean(per_class_auc(y, p, classes=cls)) for p in probs])


def _side(an, boot, tag, y, arms, seeds, m, cls) -> LosoSide:
    ra, na = arms
    ref = np.stack([ra.probs[ra.index(s)][m] for s in seeds]).astype(np.float64)
    new = np.stack([na.probs[na.index(s)][m] for s in seeds]).astype(np.float64)
    b, n = _macro(y, ref, cls), _macro(y, new, cls)
    res = boot.delta([(tag, "ref", s) for s in seeds], [(tag, "new", s) for s in seeds])
    return LosoSide(b, n, res, an.seed_bca(n - b),
                    {f"{tag} {ra.cell}": {s: ra.runs()[s] for s in seeds},
                     f"{tag} {na.cell}": {s: na.runs()[s] for s in seeds}})


def _in_source_note(an, src: str, backbone: str, ref: str, new: str, hev: Evidence,
                    hm: np.ndarray) -> str:
    """Why the in-source side of a row cannot be computed ("" when it can)."""
    ev = an.evidence
    im = ev.sources == src if ev.sources is not None else None
    if not ev.held_out.in_source:
        return ("in source: no run trained on every source in this selection (train the "
                "same cells without train_sources/test_sources)")
    if _arms(ev, backbone, ref, new) is None:
        return (f"in source: no runs of both {ref} and {new} ({backbone}) trained on every "
                "source in this selection")
    if im is None or not im.any():
        return f"in source: the runs trained on every source scored no {src} test frame"
    if not np.array_equal(_frame_keys(ev, im), _frame_keys(hev, hm)):
        return (f"in source: the runs trained on every source scored other {src} test "
                "frames than the held-out runs (another staging?)")
    return ""


def _row(an, cond: HeldOutCondition, src: str, backbone: str, ref: str, new: str
         ) -> LosoRow | None:
    """One row; None where the condition has no run of either arm of the pair."""
    ev, hev, o = an.evidence, cond.evidence, an.options
    if hev.arm(backbone, ref) is None and hev.arm(backbone, new) is None:
        return None
    hm = hev.sources == src
    y, videos = hev.labels[hm], hev.videos[hm]
    notes = [_in_source_note(an, src, backbone, ref, new, hev, hm)]
    sides = {"in": None if notes[0] else (_arms(ev, backbone, ref, new), ev.sources == src),
             "out": (_arms(hev, backbone, ref, new), hm)}
    if sides["out"][0] is None:
        missing = [c for c in (ref, new) if hev.arm(backbone, c) is None]
        notes.append(f"held out: no runs of {', '.join(missing)} ({backbone}) in this condition")
        sides["out"] = None
    live = {k: v for k, v in sides.items() if v is not None}
    seeds = tuple(sorted(set.intersection(*(set(a.seeds) for arms, _ in live.values()
                                            for a in arms)))) if live else ()
    cls = evaluable_classes(y, ev.classes)
    if live and not seeds:
        notes.append("no seed with runs of both arms in both conditions")
    elif live and not cls:
        notes.append(f"no class with positive and negative {src} test frames")
    note = "; ".join(n for n in notes if n)
    key = _seed(o.seed, cond.label, src, backbone, ref, new)
    if not live or not seeds or not cls:
        return LosoRow(backbone, ref, new, src, cond.label, seeds, (), int(hm.sum()),
                       len(set(videos.tolist())), None, None, None, None, key, note)
    cols = {(tag, role, s): arm.probs[arm.index(s)][m].astype(np.float64)
            for tag, (arms, m) in live.items()
            for role, arm in zip(("ref", "new"), arms, strict=True) for s in seeds}
    boot = PairedAUCBootstrap(y, videos, cols, cls, resample=o.resample,
                              n_resamples=o.n_resamples, confidence_level=o.confidence_level,
                              rng=key)
    got = {tag: _side(an, boot, tag, y, arms, seeds, m, cls) for tag, (arms, m) in live.items()}
    ins, held = got.get("in"), got.get("out")
    ratio = ret = None
    if ins is not None and held is not None:
        ratio = boot.ratio([("out", "ref", s) for s in seeds],
                           [("out", "new", s) for s in seeds],
                           [("in", "new", s) for s in seeds],
                           denominator_reference=[("in", "ref", s) for s in seeds])
        ci = ratio.percentile_interval
        ret = classify_retention(ins.delta, held.delta, delta_kvasir_ci=ins.ci,
                                 confidence_interval=ci if np.isfinite(list(ci)).all()
                                 else None)
    return LosoRow(backbone, ref, new, src, cond.label, seeds,
                   tuple(hev.names[k] for k in cls), int(hm.sum()), len(set(videos.tolist())),
                   ins, held, ratio, ret, key, note)


def loso_rows(an, pairs) -> list[LosoRow]:
    """Every (condition, held-out source, pair) row of ``an.evidence.held_out`` with runs of
    both arms of the pair in the condition (``pairs``: (baseline, method), in table order);
    see the module docstring."""
    ho = getattr(an.evidence, "held_out", None)
    out = []
    for cond in (ho.conditions if ho is not None else ()):
        for src in cond.held_out():
            for backbone in cond.evidence.backbones():
                for ref, new in pairs:
                    r = _row(an, cond, src, backbone, ref, new)
                    if r is not None:
                        out.append(r)
    return out
