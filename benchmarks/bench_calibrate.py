"""calibrate: trials per minute with 1 and 2 workers on one PostgreSQL study, and where a
trial's time goes (prior, forward pass, Optuna + MLflow overhead).

    .venv/bin/python benchmarks/bench_calibrate.py [--trials 6] [--image-size 224]
        [--backbone efficientnet_b0] [--data synthetic-tiny]
    .venv/bin/python benchmarks/bench_calibrate.py --mode train --backbone resnet18
        [--trials 6] [--epochs 1]

``--mode train`` measures ``calibrate -P mode=train`` instead: trials per hour with 1 and 2
local workers, each trial a smoke-profile `pi` training run (no pruning; each arm its own
seed, so no trial reuses a run of the other arm).

Starts a throwaway PostgreSQL (``pipi.tracking.server.Postgres``, as the tests do) holding both
the Optuna study and the MLflow tracking store, trains one
smoke-profile `pi` run at the requested image size (random init; the cost of a forward pass
does not depend on the weights), then runs `calibrate` twice on the same study: once with
1 worker, then with 2 workers, `trials` trials each, without pruning (every trial costs a
full pass). Throughput is measured from Optuna's own trial timestamps (first start to last
completion of the call's trials), so process start-up and model loading are excluded.
Targets (issue 12): 2 workers >= 1.6x 1 worker on two cores; Optuna + MLflow overhead < 10 %
of a trial.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def trials_per_minute(study, numbers) -> float:
    ts = [t for t in study.trials if t.number in set(numbers)]
    start = min(t.datetime_start for t in ts)
    end = max(t.datetime_complete for t in ts)
    return 60.0 * len(ts) / (end - start).total_seconds()


def bench_train(a, *, storage, data, run_calibration, train, optuna, open_storage) -> int:
    """``--mode train``: trials per hour with 1 and 2 workers, each trial a training run."""
    import torch

    print(f"mode=train: {a.trials} trials per arm, smoke-profile pi runs ({a.backbone}, "
          f"32 px, {a.epochs} epoch(s)); {os.cpu_count()} CPU cores; device "
          f"{'cuda' if torch.cuda.is_available() else 'cpu'}")
    rates = {}
    for workers in (1, 2):
        name = f"bench-train-{workers}"
        r = run_calibration(mode="train", target="kvasir-val", trials=a.trials, sampler="tpe",
                            pruner="none", storage=storage, study=name, workers=workers,
                            data=str(data), experiment="bench-calibrate", train_fn=train,
                            backbone=a.backbone, seed=workers, epochs=a.epochs,
                            profile="smoke", weights="none")
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
        rates[workers] = 60.0 * trials_per_minute(study, r.trials_run)
        print(f"{workers} worker{'s' if workers > 1 else ' '}: {rates[workers]:8.1f} trials/hour "
              f"({len(r.trained)} trained, {len(r.reused)} reused)")
    print(f"ratio 2/1: {rates[2] / rates[1]:.2f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6, help="trials per arm")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--backbone", default="efficientnet_b0")
    ap.add_argument("--data", default="synthetic-tiny")
    ap.add_argument("--mode", choices=("frozen", "train"), default="frozen")
    ap.add_argument("--epochs", type=int, default=1, help="--mode train: epochs per trial")
    a = ap.parse_args()

    os.environ.setdefault("PIPI_HOME", str(ROOT / ".pipi"))
    import mlflow
    import numpy as np
    import optuna
    import torch

    from pipi import tracking
    from pipi.calibration.objective import calibration_fold
    from pipi.calibration.study import open_storage
    from pipi.config import make_config
    from pipi.data.cache import build_cache, to_float
    from pipi.paths import pipi_home
    from pipi.prior import prior_channels
    from pipi.runs.data import load_data
    from pipi.tracking.server import Postgres, pg_bin
    from pipi.runs import training as runner
    from pipi.workflows.calibrate import run_calibration

    if pg_bin() is None:
        print("PostgreSQL is not installed (scripts/system-deps.sh installs it)")
        return 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="bench-calibrate-"))
    os.chmod(tmp, 0o755)  # the postgres user must reach its folder
    pg = Postgres(tmp / "pg", databases=("optuna", "mlflow"))
    try:
        storage = pg.uri("optuna")
        tracking.configure(pg.uri("mlflow"))
        os.environ["MLFLOW_TRACKING_URI"] = pg.uri("mlflow")  # the workers log to the same store
        mlflow.create_experiment("bench-calibrate", artifact_location=str(tmp / "artifacts"))
        staged = load_data(a.data)
        data = staged.root
        if a.mode == "train":
            return bench_train(a, storage=storage, data=data, run_calibration=run_calibration,
                               train=runner.train, optuna=optuna, open_storage=open_storage)
        cfg = make_config(cell="pi", backbone=a.backbone, profile="smoke", weights="none",
                          image_size=a.image_size, seed=0)
        t = time.perf_counter()
        run_id = runner.train(cfg, data=str(data), experiment="bench-calibrate",
                              progress=False, register=False)["run_id"]
        print(f"source pi run {run_id} ({a.backbone}, {a.image_size} px) trained in "
              f"{time.perf_counter() - t:.0f} s")
        frames, manifest = staged.frames, staged.manifest
        fold = calibration_fold(frames, manifest, "kvasir-val")
        print(f"fold kvasir-val: {len(fold.rows)} frames, {len(fold.classes)} classes; "
              f"{os.cpu_count()} CPU cores; device {'cuda' if torch.cuda.is_available() else 'cpu'}")
        kw = {"run": run_id, "target": "kvasir-val", "storage": storage, "study": "bench",
              "pruner": "none", "data": str(data), "experiment": "bench-calibrate",
              "progress": False}
        one = run_calibration(trials=a.trials, workers=1, **kw)
        two = run_calibration(trials=a.trials, workers=2, **kw)
        study = optuna.load_study(study_name="bench", storage=open_storage(storage))
        tpm1 = trials_per_minute(study, one.trials_run)
        tpm2 = trials_per_minute(study, two.trials_run)
        print(f"\n1 worker : {tpm1:6.2f} trials/min")
        print(f"2 workers: {tpm2:6.2f} trials/min")
        print(f"ratio 2/1: {tpm2 / tpm1:.2f}x  (target >= 1.6x on two cores)")

        # one trial's cost, from the 1-worker arm (one process: everything is sequential)
        w = one.workers[0]
        n = len(w.trials)
        inputs = sum(c["inputs"] for c in w.costs.values()) / n
        forward = sum(c["forward"] for c in w.costs.values()) / n
        report = sum(c["report"] for c in w.costs.values()) / n
        mlflow_s = sum(w.logging_s.values()) / n
        per_trial = w.wall_s / n
        optuna_s = per_trial - inputs - forward - report - mlflow_s
        # the prior alone, on the same frames and batches
        images = build_cache(data, frames, size=a.image_size, digest=manifest["data_digest"],
                             cache_dir=pipi_home() / "cache", progress=False)
        t = time.perf_counter()
        for i in range(0, len(fold.rows), 64):
            x = to_float(images, fold.rows[i:i + 64], torch.device("cpu"))
            prior_channels(x, alpha=3.0, lambda_eff=0.3 * np.hypot(a.image_size, a.image_size))
        prior_only = time.perf_counter() - t
        print(f"\none trial ({len(fold.rows)} frames at {a.image_size} px), mean of {n}:")
        rows = [("prior + input assembly", inputs), ("  of which the prior", prior_only),
                ("forward pass + softmax", forward), ("running AUCs + pruner", report),
                ("Optuna (ask/tell, storage)", optuna_s), ("MLflow nested run", mlflow_s),
                ("total", per_trial)]
        for name, v in rows:
            print(f"  {name:28s} {v:8.3f} s  {100 * v / per_trial:5.1f} %")
        overhead = optuna_s + mlflow_s
        print(f"Optuna + MLflow overhead: {100 * overhead / per_trial:.1f} % of a trial "
              "(target < 10 %)")
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    mp.freeze_support()
    sys.exit(main())
