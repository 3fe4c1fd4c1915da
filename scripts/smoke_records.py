#!/usr/bin/env python3
"""What the smoke study logs, as one JSON file, and the difference between two of them: the
check that a refactoring of how runs are logged changed nothing a user sees (issue 39).

    # once per checkout (PYTHONPATH picks the checkout; ~2 min on 2 cores)
    PYTHONPATH=/path/to/checkout python scripts/smoke_records.py dump before.json
    python scripts/smoke_records.py dump after.json
    python scripts/smoke_records.py diff before.json after.json   # exit 1 on a difference

``dump`` synthesizes and stages the tiny Kvasir-Capsule release, trains the integration tier's
smoke study (cells a, pi, distill, b_plus x seeds 41, 42 on ResNet-18, smoke profile, no
weights) into a fresh SQLite store, and writes every run's params, tags, metric histories
(rounded to 1e-6), artifact paths, dataset inputs and logged-model count, and every
registered version's tags, aliases and description. Run ids, temporary paths, commit shas and
logged-model ids are replaced by names; the heartbeat tag is left out of ``diff``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

CELLS, SEEDS, BACKBONE = ("a", "pi", "distill", "b_plus"), (41, 42), "resnet18"
#: tags whose values change from one training to the next (the code version changes between
#: checkouts by design; the config hash contains it)
VOLATILE = {"mlflow.source.name", "mlflow.user", "mlflow.source.git.commit", "pipi.code_version",
            "pipi.config_hash", "mlflow.log-model.history", "mlflow.runName"}
IGNORED_IN_DIFF = ("mlflow.pipi.heartbeat",)


def dump(out: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="smoke-records-"))
    os.environ.update(PIPI_HOME=str(home), PIPI_MODEL_PREFIX="pipi",
                      MLFLOW_DISABLE_TELEMETRY="true")
    import mlflow
    from mlflow.tracking import MlflowClient

    from pipi.config import make_config
    from pipi.data.staging import stage_kvasir
    from pipi.data.synth import synthesize_kvasir
    from pipi.runs.training import train

    rel = synthesize_kvasir(home / "rel" / "kvasir-tiny", preset="tiny", seed=0, progress=False)
    staged = home / "staged"
    stage_kvasir(rel / "labelled_images", rel / "metadata.csv", staged, seed=42, progress=False)
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    os.chdir(home)
    c = MlflowClient()
    exp = c.create_experiment("smoke-study", artifact_location=str(home / "artifacts"))
    names = {}
    for cell in CELLS:
        for seed in SEEDS:
            cfg = make_config(cell=cell, seed=seed, backbone=BACKBONE, profile="smoke",
                              weights="none")
            names[train(cfg, data=str(staged), experiment="smoke-study",
                        progress=False).run_id] = f"{cell}-{seed}"
    runs = c.search_runs([exp], max_results=1000)
    for r in runs:   # a run trained for another (none in this study today)
        names.setdefault(r.info.run_id, f"{r.data.tags.get('pipi.entry_point')}-"
                                        f"{r.data.tags.get('pipi.cell')}-{r.data.tags.get('pipi.seed')}")

    def norm(v) -> str:
        v = str(v)
        for rid, name in names.items():
            v = v.replace(rid, f"<{name}>")
        v = re.sub(r"/tmp/[^\s'\",)]*", "<tmp>", v)
        v = re.sub(r"\b[0-9a-f]{40}\b", "<sha>", v)
        return re.sub(r"\bm-[0-9a-f]{32}\b", "<model>", v)

    def files(run_id: str, path: str | None = None) -> list[str]:
        out = []
        for a in c.list_artifacts(run_id, path):
            out += files(run_id, a.path) if a.is_dir else [a.path]
        return out

    doc = {}
    for r in runs:
        rid = r.info.run_id
        doc[names[rid]] = {
            "status": r.info.status,
            "params": {k: norm(v) for k, v in sorted(r.data.params.items())},
            "tags": {k: "<volatile>" if k in VOLATILE else norm(v)
                     for k, v in sorted(r.data.tags.items())},
            "metrics": {k: [(m.step, round(m.value, 6)) for m in c.get_metric_history(rid, k)]
                        for k in sorted(r.data.metrics)},
            "artifacts": sorted(files(rid)),
            "inputs": sorted([i.dataset.name, i.dataset.digest, sorted((t.key, t.value)
                             for t in i.tags)] for i in r.inputs.dataset_inputs),
            "logged_models": len(r.outputs.model_outputs) if r.outputs else 0}
    versions = [{"name": m.name, "version": v.version, "run": norm(v.run_id),
                 "tags": {k: "<volatile>" if k == "git_commit" else norm(x)
                          for k, x in sorted(v.tags.items())},
                 "aliases": sorted(v.aliases), "description": norm(v.description or "")}
                for m in c.search_registered_models()
                for v in c.search_model_versions(f"name='{m.name}'")]
    doc["registered versions"] = sorted(versions, key=lambda d: (d["name"], int(d["version"])))
    out.write_text(json.dumps(doc, indent=1, sort_keys=True))
    print(f"{out}: {len(runs)} runs, {len(versions)} registered versions")


def differences(a, b, path: str = "") -> list[str]:
    if path.rsplit("/", 1)[-1] in IGNORED_IN_DIFF:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in b or k not in a:
                out.append(f"{path}/{k}: only in {'the first' if k in a else 'the second'}")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) \
            and all(isinstance(x, dict) for x in a + b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    # a checkout with uncommitted changes has a "-dirty" code version
    if isinstance(a, str) and isinstance(b, str) and a.removesuffix("-dirty") == \
            b.removesuffix("-dirty"):
        return []
    return [] if a == b else [f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dump").add_argument("out", type=Path)
    d = sub.add_parser("diff")
    d.add_argument("first", type=Path)
    d.add_argument("second", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.out)
        return 0
    a, b = (json.loads(p.read_text()) for p in (args.first, args.second))
    found = differences(a, b)
    print("\n".join(found) or f"the same: {len(a) - 1} runs and their registered versions")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
