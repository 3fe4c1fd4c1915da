"""Benchmark: the full `aggregate` report at paper scale, from local prediction files.

Generates predictions in the run contract's format (``predictions/{val,test}.parquet`` +
``schema.json``) for 10 cells x 6 seeds on 6,423 test frames from 7 test videos, 14 class
columns of which 11 are evaluable (the paper's split), then times everything ``aggregate``
does after its MLflow read: reading and aligning the predictions, every table (with 1,000
video-bootstrap resamples and exact sign-flip permutations), the figures, Markdown/CSV/JSON
and the dashboard. No MLflow.

Baseline: the paired-tests table's DeLong part (per seed, macro and per-class z of every
pair) recomputed with the naive O(n_pos x n_neg) Mann-Whitney kernel, checked equal to
1e-10; the ratio is printed against the fast (Sun & Xu midrank) computation of the same
table. The full aggregate must take under 60 s.

    python benchmarks/bench_aggregate.py [--frames 6423] [--seeds 6] [--resamples 1000]
                                         [--resample video|frame]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

from pipi import analysis
from pipi.classes import CLASSES
from pipi.report import build_report
from pipi.training.frames import predictions_frame, write_predictions
from pipi.workflows import aggregate as workflow

CELLS = ("a", "b", "c", "c_prime", "c_dprime", "d", "e", "b_plus", "e_plus", "e_dagger")
QUALITY = {"a": 1.0, "b": 1.1, "c": 1.09, "c_prime": 1.1, "c_dprime": 1.02, "d": 1.06,
           "e": 1.12, "b_plus": 1.16, "e_plus": 1.25, "e_dagger": 1.15}
SEEDS = (41, 42, 43, 44, 45, 47)
TRAIN_ONLY = ("Ampulla of Vater", "Blood - hematin", "Polyp")  # no test frames (paper)
EVALUABLE = [k for k, c in enumerate(CLASSES) if c not in TRAIN_ONLY]


def make_split(frames: int, videos: int, split: str, rng: np.random.Generator) -> pd.DataFrame:
    """Frames of a split: a long-tailed class mix (Normal mucosa dominant), uneven videos."""
    freq = 0.62 ** np.arange(len(EVALUABLE))
    freq = freq[rng.permutation(len(freq))]
    sizes = rng.multinomial(frames - 20 * videos, rng.dirichlet(np.ones(videos) * 3)) + 20
    rows = []
    for v, n in enumerate(sizes):
        mix = rng.dirichlet(freq * 20)
        lab = np.asarray(EVALUABLE)[rng.choice(len(EVALUABLE), size=n, p=mix)]
        if v == 0:
            lab[: len(EVALUABLE)] = EVALUABLE  # every evaluable class present
        rows += [{"path": f"{split}/{CLASSES[k]}/{split}{v}_{f:05d}.jpg", "video_id": f"{split}{v}",
                  "frame_number": f, "class_index": int(k), "class": CLASSES[k]}
                 for f, k in enumerate(lab)]
    return pd.DataFrame(rows)


def make_runs(root: Path, frames: int, seeds, cells=CELLS):
    """Write one predictions folder per (cell, seed); return the runs table and folders."""
    rng = np.random.default_rng(0)
    test, val = make_split(frames, 7, "test", rng), make_split(1500, 6, "val", rng)
    rows, dirs = [], {}
    tag = json.dumps([CLASSES[k] for k in EVALUABLE])
    for s in seeds:
        g = np.random.default_rng(s)
        shared = {n: g.normal(size=(len(df), 14)) for n, df in (("test", test), ("val", val))}
        for ci, cell in enumerate(cells):
            h = np.random.default_rng(1000 * s + ci)
            probs = {}
            for name, df in (("test", test), ("val", val)):
                y = df["class_index"].to_numpy()
                logits = (0.8 * shared[name] + 0.6 * h.normal(size=(len(y), 14))
                          + QUALITY[cell] * np.eye(14)[y])
                probs[name] = predictions_frame(df, special.softmax(logits, axis=1))
            rid = f"{cell}{s}".replace("_", "").ljust(32, "0")
            dirs[rid] = write_predictions(probs, root / rid / "predictions")
            rows.append({"run_id": rid, "experiment_id": "0", "run_name": rid,
                         "status": "FINISHED", "start_time": len(rows), "entry_point": "train",
                         "cell": cell, "backbone": "efficientnet_b0", "seed": s,
                         "data_digest": "0" * 64, "dataset": "synthetic", "study": "",
                         "variant": "", "base_run_id": "", "parent_run_id": "",
                         "evaluable_classes": tag, "code_version": "",
                         "test_macro_auc": float("nan")})
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs


# --------------------------------------------------------------------------- naive DeLong
def naive_influence(pos: np.ndarray, s_ref: np.ndarray, s_new: np.ndarray):
    """(auc (2,), phi (N,)) from the full (m, n) kernel: psi = 1[x > y] + 1/2 1[x == y]."""
    aucs, psis = [], []
    m, n = int(pos.sum()), int((~pos).sum())
    for s in (s_ref, s_new):
        x, y = s[pos], s[~pos]
        k = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])  # (m, n)
        auc = k.mean()
        psi = np.empty(pos.size)
        psi[pos] = (k.mean(axis=1) - auc) / np.sqrt(m * (m - 1.0))
        psi[~pos] = (k.mean(axis=0) - auc) / np.sqrt(n * (n - 1.0))
        aucs.append(auc)
        psis.append(psi)
    return np.array(aucs), psis[1] - psis[0]


def naive_macro_z(y: np.ndarray, ref: np.ndarray, new: np.ndarray, classes) -> tuple:
    """Macro z and per-class z of the paired DeLong macro test, by the naive kernel."""
    aucs, phis = [], []
    for k in classes:
        a, phi = naive_influence(y == k, ref[:, k], new[:, k])
        aucs.append(a)
        phis.append(phi)
    aucs, phi = np.array(aucs), np.stack(phis)  # (K, 2), (K, N)
    cov = phi @ phi.T
    delta = aucs[:, 1] - aucs[:, 0]
    z = delta.mean() / np.sqrt(cov.sum() / len(classes) ** 2)
    return float(z), delta / np.sqrt(np.diag(cov))


def delong_part(an: analysis.Analysis, pairs, *, naive: bool):
    """The DeLong columns of the paired-tests table: {(pair, seed): (z, per-class z)}."""
    ev, out = an.evidence, {}
    for r, n in pairs:
        ra, na = ev.arm(an.headline, r), ev.arm(an.headline, n)
        for s in sorted(set(ra.seeds) & set(na.seeds)):
            p_ref = ra.probs[ra.index(s)].astype(np.float64)
            p_new = na.probs[na.index(s)].astype(np.float64)
            if naive:
                out[(r, n, s)] = naive_macro_z(ev.labels, p_ref, p_new, ev.classes)
            else:
                d = an.delong(an.headline, r, n, s)
                out[(r, n, s)] = (d.statistic, d.per_class_statistic)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=6423)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--keep", type=Path, default=None, help="Also keep the outputs here.")
    parser.add_argument("--resample", choices=("video", "frame"), default="video",
                        help="Bootstrap unit (frame: the published code's resampling).")
    args = parser.parse_args()
    seeds = SEEDS[: args.seeds]
    with tempfile.TemporaryDirectory(prefix="bench-aggregate-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        runs, dirs = make_runs(tmp / "runs", args.frames, seeds)
        t_gen = time.perf_counter() - t0

        opts = analysis.AggregateOptions(n_resamples=args.resamples, n_permutations=10_000,
                                         resample=args.resample)
        t0 = time.perf_counter()
        kept, excluded = analysis.select_runs(runs)
        ev = analysis.build_evidence(kept, dirs, excluded=excluded, experiment="bench")
        t_read = time.perf_counter() - t0
        report = build_report(ev, opts)
        t_report = time.perf_counter() - t0 - t_read
        out = args.keep or tmp / "out"
        workflow.write_report(report, out)
        t_total = time.perf_counter() - t0

        pairs = [(r, n) for r, n in analysis.PAIRED_TESTS if ev.arm("efficientnet_b0", r)
                 and ev.arm("efficientnet_b0", n)]
        an = analysis.Analysis(ev, opts)
        t0 = time.perf_counter()
        fast = delong_part(an, pairs, naive=False)
        t_fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        slow = delong_part(an, pairs, naive=True)
        t_naive = time.perf_counter() - t0
        for key, (z, zk) in fast.items():
            np.testing.assert_allclose(z, slow[key][0], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(zk, slow[key][1], rtol=1e-10, atol=1e-10)
        pt = report.table("paired_tests").data
        row = pt[(pt["reference"] == "b") & (pt["new"] == "e_plus")].iloc[0]
        np.testing.assert_allclose(row["delong_z_seed41"], fast[("b", "e_plus", 41)][0],
                                   rtol=1e-12)

    n_tests = sum(len(zk) for _, zk in fast.values())
    print(f"paper-scale aggregate: {len(CELLS)} cells x {len(seeds)} seeds = {len(runs)} runs, "
          f"{args.frames} test frames in {len(set(ev.videos))} videos, {len(ev.classes)} "
          f"headline of 14 classes, {args.resamples} {args.resample}-bootstrap resamples, exact "
          f"sign-flip ({2 ** len(seeds)} patterns)")
    print(f"  generate predictions (not timed): {t_gen:6.2f} s")
    print(f"  read + align predictions:         {t_read:6.2f} s")
    print(f"  all tables and figures:           {t_report:6.2f} s "
          f"({sum(t.ok for t in report.tables)} tables, {len(report.figures)} figures)")
    print(f"  full aggregate incl. writing:     {t_total:6.2f} s  (limit 60 s: "
          f"{'OK' if t_total < 60 else 'TOO SLOW'})")
    print(f"paired-tests DeLong part ({len(fast)} pair x seed macro tests, {n_tests} per-class "
          f"z): Sun-Xu {t_fast:.2f} s, naive O(m n) {t_naive:.2f} s, ratio "
          f"{t_naive / t_fast:.1f}x; equal to 1e-10")
    if t_total >= 60:
        raise SystemExit("the full aggregate took 60 s or more")


if __name__ == "__main__":
    main()
