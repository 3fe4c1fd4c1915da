"""Generated runs for the tests: frame indexes, predictions in the exact v1 format `train`
writes, run tables as `load_runs` returns them, and fake runs logged to a real store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special
from sklearn.metrics import roc_auc_score

from pipi import analysis
from pipi.analysis.retention import build_cross_vendor, split_galar_runs
from pipi.classes import CLASSES, class_index
from pipi.galkva import SCORING_SETS
from pipi.training.frames import predictions_frame, write_predictions

EVALUABLE = list(range(1, 12))  # 11 classes, as in the paper's split


def make_frames(n_videos: int, per_video: int, seed: int, classes=EVALUABLE, split="test"):
    """A split's frame index: videos with their own class mix; every class in video 0."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(n_videos):
        lab = rng.choice(classes, size=per_video, p=rng.dirichlet(np.ones(len(classes))))
        if v == 0:
            lab[: len(classes)] = classes
        rows += [{"path": f"{split}/{CLASSES[k]}/{split}{v:02d}_{f:04d}.jpg",
                  "video_id": f"{split}{v:02d}", "frame_number": f, "class_index": int(k),
                  "class": CLASSES[k]} for f, k in enumerate(lab)]
    return pd.DataFrame(rows)


def make_probs(frames: pd.DataFrame, quality: float, seed: int) -> np.ndarray:
    """Softmax of noise plus `quality` on the true class (higher quality = better AUC)."""
    rng = np.random.default_rng(seed)
    y = frames["class_index"].to_numpy()
    logits = rng.normal(size=(len(y), 14)) + quality * np.eye(14)[y]
    return special.softmax(logits, axis=1)


def write_run(folder: Path, test: pd.DataFrame, val: pd.DataFrame, quality: float,
              seed: int) -> Path:
    """A predictions/ folder in the exact v1 format `train` writes."""
    preds = {"test": predictions_frame(test, make_probs(test, quality, seed)),
             "val": predictions_frame(val, make_probs(val, quality, seed + 10_000))}
    return write_predictions(preds, folder)


QUALITY = {"a": 1.0, "pi": 1.25, "distill": 1.1, "b": 1.2, "e_plus": 1.5}


def local_runs(tmp: Path, arms: dict[str, list[int]], *, backbone="efficientnet_b0",
               digest="d" * 64, n_videos=7, per_video=60):
    """(runs frame as `load_runs` returns it, run id -> predictions folder)."""
    test, val = make_frames(n_videos, per_video, 0), make_frames(3, 40, 1, split="val")
    rows, dirs = [], {}
    for ci, (cell, seeds) in enumerate(arms.items()):
        for s in seeds:
            rid = f"{cell}-{backbone}-{s}".replace("_", "")[:32].ljust(32, "0")
            dirs[rid] = write_run(tmp / rid / "predictions", test, val, QUALITY.get(cell, 1.1),
                                  1000 * ci + s)
            rows.append({"run_id": rid, "experiment_id": "1", "run_name": rid,
                         "status": "FINISHED", "start_time": 1000 * ci + s,
                         "entry_point": "train", "cell": cell, "backbone": backbone, "seed": s,
                         "data_digest": digest, "dataset": "kvasir-capsule", "study": "",
                         "variant": "", "base_run_id": "", "parent_run_id": "",
                         "evaluable_classes": json.dumps([CLASSES[k] for k in EVALUABLE]),
                         "code_version": "", "test_macro_auc": float("nan")})
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs


def log_fake_run(client, exp_id: str, folder: Path | None, *, cell: str, seed: int,
                 digest: str = "d" * 64, status: str = "FINISHED",
                 backbone: str = "efficientnet_b0", entry_point: str = "train",
                 class_names=None) -> str:
    """A run with the run contract's tags and (optionally) a predictions artifact.

    ``class_names``: the run's class set (every class evaluable), Kvasir's 14 (11 evaluable)
    when None."""
    from pipi import tracking

    names = list(class_names) if class_names is not None else list(CLASSES)
    evaluable = list(range(len(names))) if class_names is not None else EVALUABLE
    tags = {tracking.tags.TAG_ENTRY_POINT: entry_point, tracking.tags.TAG_DATA_DIGEST: digest}
    if cell:
        tags |= {tracking.tags.TAG_CELL: cell, tracking.tags.TAG_BACKBONE: backbone,
                 tracking.tags.TAG_SEED: str(seed),
                 "pipi.evaluable_classes": json.dumps([names[k] for k in evaluable])}
    run = client.create_run(exp_id, tags=tags, run_name=f"{cell}-s{seed}")
    rid = run.info.run_id
    if folder is not None:
        client.log_artifacts(rid, str(folder), "predictions")
        df = pd.read_parquet(folder / "test.parquet")
        probs = df[[f"prob_{i:02d}" for i in range(len(names))]].to_numpy(float)
        auc = np.mean([roc_auc_score(df["label"] == k, probs[:, k]) for k in evaluable])
        client.log_metric(rid, "test/macro_auc", float(auc))
    client.set_terminated(rid, status)
    return rid


def fake_version_tags(client, run_id: str) -> dict:
    """The tags pipi writes on a version it registers (``tracking.registry.VERSION_TAGS``), from the
    run's own tags: a version without them is refused by promote."""
    t = client.get_run(run_id).data.tags
    return {"run_id": run_id, "test_macro_auc": "0.5", "recipe": "mlflow run . -e train",
            "recipe_hash": "", "data_digest": t.get("pipi.data_digest", ""),
            "git_commit": "0" * 40, "cell": t.get("pipi.cell", ""),
            "backbone": t.get("pipi.backbone", ""), "seed": t.get("pipi.seed", "")}


# --------------------------------------------------------------------------- GalKva
SCORING = SCORING_SETS["v1.0"]


def paper_example() -> dict:
    """The paper's EfficientNet-B0 headline numbers in the datasets.md submission format."""
    return {
        "submitter": {"name": "Lab X", "affiliation": "University Y", "email": "x@lab.org"},
        "method": {"name": "EffB0 + PI input fusion", "trained_on": "Kvasir-Capsule",
                   "description": "5-channel input fusion of RGB, P_blood and Phi",
                   "code_url": "https://github.com/lab-x/method"},
        "benchmark_version": "v1.0",
        "n_seeds": 6,
        "results": {
            "kvasir": {"macro_auc": {"mean": 0.783, "sd": 0.024}, "n_test_frames": 6423,
                       "per_class_auc": {"Ulcer": {"mean": 0.91, "sd": 0.02, "n_positive": 120}},
                       "delta_vs_rgb_baseline": 0.023, "sign_positive_seeds": "5/6"},
            "galar": {"macro_auc": {"mean": 0.638, "sd": 0.044}, "n_test_frames": 15298,
                      "per_class_auc": {}, "delta_vs_rgb_baseline": 0.002,
                      "sign_positive_seeds": "4/6"},
        },
    }


def _frames(rng, n_videos: int, per_video: int) -> pd.DataFrame:
    labels = rng.choice([class_index(c) for c in SCORING] + [class_index("Pylorus")],
                        size=n_videos * per_video)
    vids = np.repeat([f"v{i:02d}" for i in range(n_videos)], per_video)
    return pd.DataFrame({
        "path": [f"test/{CLASSES[c]}/{v}_{i}.png" for i, (v, c) in enumerate(zip(vids, labels))],
        "video_id": vids, "frame_number": np.arange(len(vids)), "class_index": labels,
        "class": [CLASSES[c] for c in labels],
    })


def _probs(rng, frames: pd.DataFrame, signal: float) -> np.ndarray:
    logits = rng.normal(size=(len(frames), len(CLASSES)))
    logits[np.arange(len(frames)), frames["class_index"].to_numpy()] += signal
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def make_prediction_dir(root: Path, *, seeds=("1", "2"), signals=None, seed: int = 0) -> Path:
    """DIR/{kvasir,galar}/{baseline,method}/<seed>/predictions + run.json."""
    rng = np.random.default_rng(seed)
    signals = signals or {"kvasir": (1.0, 1.6), "galar": (0.6, 0.9)}
    for ds, (sb, sm) in signals.items():
        frames = _frames(rng, 8, 30)
        for arm, sig in (("baseline", sb), ("method", sm)):
            for s in seeds:
                d = root / ds / arm / s
                write_predictions({"test": predictions_frame(frames, _probs(rng, frames, sig))},
                                  d / "predictions")
                (d / "run.json").write_text(json.dumps({"run_id": f"{ds}-{arm}-{s}"}))
    return root


# --------------------------------------------------------------------------- shared by both tiers
B0 = "efficientnet_b0"
#: The paper recipe's params as a run logs them (fidelity tests).
PAPER = {"select_metric": "macro_auc", "alpha": "4.0", "epochs": "30", "lr": "0.001"}
#: Retention tests: the GalKva scoring set, the fake Kvasir split's headline classes, Galar's.
GALKVA = [class_index(c) for c in SCORING_SETS["v1.0"]]
KVASIR_CLASSES = sorted({*GALKVA, 2, 3, 7})
GALAR_CLASSES = sorted({*GALKVA, 2})
SYSTEMS = ("PillCam SB3", "Olympus")


def recipe(cell, seed, **params):
    opts = {"cell": cell, "seed": seed, "backbone": B0, "profile": "paper", **params}
    return "mlflow run . -e train --env-manager local " + " ".join(
        f"-P {k}={v}" for k, v in opts.items() if k in ("cell", "seed", "backbone", "profile")
        or PAPER.get(k) != v)


def make_runs(tmp: Path, arms: dict, *, test=None, val=None, tags: str = "test", start=0,
              extra: dict | None = None):
    """(runs frame as load_runs returns it, run id -> predictions folder).

    arms: cell -> seeds. ``tags``: "test" (pipi.test_classes and pipi.val_classes),
    "evaluable" (only the older pipi.evaluable_classes = val and test classes), "none".
    ``extra``: (cell, seed) -> column overrides (params, recipe, status, ...).
    """
    test = make_frames(7, 60, 0) if test is None else test
    val = make_frames(3, 40, 1, split="val") if val is None else val
    test_names = [CLASSES[k] for k in sorted(set(test["class_index"]))]
    val_names = [CLASSES[k] for k in sorted(set(val["class_index"]))]
    rows, dirs = [], {}
    for ci, (cell, seeds) in enumerate(arms.items()):
        for s in seeds:
            rid = f"{cell}{s}{start}".replace("_", "").replace("@", "")[:32].ljust(32, "0")
            dirs[rid] = write_run(tmp / rid / "predictions", test, val,
                                  QUALITY.get(cell.split("@")[0], 1.1), 1000 * ci + s)
            row = {"run_id": rid, "experiment_id": "1", "run_name": rid, "status": "FINISHED",
                   "start_time": start + 1000 * ci + s, "entry_point": "train", "cell": cell,
                   "backbone": B0, "seed": s, "data_digest": "d" * 64,
                   "dataset": "kvasir-capsule", "study": "", "variant": "", "base_run_id": "",
                   "parent_run_id": "", "code_version": "", "test_macro_auc": float("nan"),
                   "evaluable_classes": "", "test_classes": "", "val_classes": "",
                   "recipe": recipe(cell, s), "recipe_hash": "", "failure_reason": "",
                   "params": json.dumps({**PAPER, "cell": cell, "seed": str(s)})}
            if tags == "test":
                row |= {"test_classes": json.dumps(test_names),
                        "val_classes": json.dumps(val_names)}
            elif tags == "evaluable":
                row["evaluable_classes"] = json.dumps(sorted(set(test_names) & set(val_names)))
            row |= (extra or {}).get((cell, s), {})
            rows.append(row)
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return runs, dirs


class FakeTracker:
    def __init__(self):
        self.metrics, self.checkpoints = [], []

    def log_metrics(self, metrics, *, step=None, model=None):
        self.metrics.append((step, dict(metrics)))

    def log_checkpoint(self, state):
        self.checkpoints.append(state["epoch"])


def _invoke(name: str, args: list[str], capsys) -> tuple[int, str]:
    """Run an entry point the way `entrypoints/<name>.py` does; (exit code, stderr)."""
    from pipi.cli import ENTRY_POINTS  # the whole cli (mlflow): only for the tests that run it

    with pytest.raises(SystemExit) as exc:
        ENTRY_POINTS[name].main(args, prog_name=f"entrypoints/{name}.py")
    return exc.value.code, capsys.readouterr().err


def frames(n_videos: int, per_video: int, classes, seed: int, prefix: str, systems=None):
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(n_videos):
        lab = rng.choice(classes, size=per_video)
        lab[: len(classes)] = classes  # every class in every video
        for f, k in enumerate(lab):
            row = {"path": f"test/{CLASSES[k]}/{prefix}{v:02d}_{f:04d}.png",
                   "video_id": f"{prefix}{v:02d}", "frame_number": f, "class_index": int(k),
                   "class": CLASSES[k], "split": "test"}
            if systems is not None:
                row["capsule_system"] = systems[v % len(systems)]
            rows.append(row)
    return pd.DataFrame(rows)


def probs_for(df: pd.DataFrame, quality, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = df["class_index"].to_numpy()
    q = quality if np.ndim(quality) else np.full(len(y), quality)
    return special.softmax(rng.normal(size=(len(y), 14)) + q[:, None] * np.eye(14)[y], axis=1)


def run_row(rid, cell, seed, *, digest, study="", base="", params=None, entry="train"):
    return {"run_id": rid, "experiment_id": "1", "run_name": rid, "status": "FINISHED",
            "start_time": seed, "entry_point": entry, "cell": cell,
            "backbone": "efficientnet_b0", "seed": seed, "data_digest": digest,
            "dataset": "galar" if study else "kvasir-capsule", "study": study,
            "variant": "zero_shot" if study else "", "base_run_id": base, "parent_run_id": "",
            "evaluable_classes": "", "code_version": "", "profile": "smoke",
            "test_macro_auc": float("nan"), "test_classes": "" if study else json.dumps(
                [CLASSES[k] for k in KVASIR_CLASSES]), "val_classes": "", "recipe": "",
            "recipe_hash": "", "failure_reason": "", "params": json.dumps(params or {}),
            "tta_loss_before": float("nan"), "tta_loss_after": float("nan")}


def evidence(study, runs=None):
    runs = study["runs"] if runs is None else runs
    kruns, gruns = split_galar_runs(runs)
    kept, excluded = analysis.select_runs(kruns)
    ev = analysis.build_evidence(kept, study["dirs"], excluded=excluded)
    gkept, gexcluded = analysis.select_runs(gruns)
    cv, gout = build_cross_vendor(gkept, study["dirs"], ev, excluded=gexcluded)
    return ev, cv, gout


def brute_macro(y, p, classes, auc=roc_auc_score):
    """Mean one-vs-rest AUC (scikit-learn) over classes with positives and negatives."""
    cls = [c for c in classes if 0 < (y == c).sum() < len(y)]
    return float(np.mean([auc(y == c, p[:, c]) for c in cls]))


def sk_macro(y, p, classes):
    cls = [c for c in classes if 0 < (y == c).sum() < len(y)]
    return float(np.mean([roc_auc_score(y == c, p[:, c]) for c in cls]))


def evidence_of(runs, dirs):
    kept, excluded = analysis.select_runs(runs)
    return analysis.build_evidence(kept, {r: dirs[r] for r in kept["run_id"]}, excluded=excluded,
                                   experiment="exp", experiment_id="1")


# --------------------------------------------------------------------------- paper tables
CNX = "convnext_tiny"


def _png_bytes(color: str) -> bytes:
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 2))
    fig.add_subplot(1, 1, 1).imshow(np.full((4, 4, 3), 0.5), cmap=None)
    fig.suptitle(color)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def paper_evidence(tmp, seeds=(41, 42, 43, 44, 45, 47)):
    """Six seeds of the per-frame, channel, transplant arms (B0) and the channel arms of
    ConvNeXt-Tiny; one FINISHED Grad-CAM run with its two example images."""
    import pandas as pd

    arms = {c: seeds for c in ("a", "pi", "distill", "pblood_only", "phi_only", "pi@zero_both",
                               "a@transplant_D", "a@transplant_bn")}
    runs, dirs = make_runs(tmp / "b0", arms)
    cnx, cdirs = make_runs(tmp / "cnx", {c: seeds for c in ("a", "pi", "pblood_only")}, start=7)
    cnx["backbone"] = CNX
    cnx["recipe"] = cnx["recipe"].str.replace(B0, CNX)
    runs = pd.concat([runs, cnx], ignore_index=True)
    dirs |= cdirs
    a_runs = runs[(runs["cell"] == "a") & (runs["backbone"] == B0)].set_index("seed")["run_id"]
    pi_runs = runs[(runs["cell"] == "pi") & (runs["backbone"] == B0)].set_index("seed")["run_id"]
    for cell, study, base in (("a@transplant_D", "transplant", a_runs),
                              ("a@transplant_bn", "transplant", a_runs),
                              ("pi@zero_both", "channel_infer", pi_runs)):
        sel = runs["cell"] == cell
        runs.loc[sel, "study"] = study
        runs.loc[sel, "variant"] = cell.split("@")[1]
        runs.loc[sel, "base_run_id"] = runs.loc[sel, "seed"].map(base)
    runs["seed"] = runs["seed"].astype("Int64")
    gc = runs.iloc[[0]].copy()
    gc["run_id"], gc["study"], gc["variant"] = "g" * 32, "gradcam", "gradcam"
    gc["entry_point"], gc["cell"] = "transplant", "a@gradcam"
    all_runs = pd.concat([runs, gc], ignore_index=True)
    kept, excluded = analysis.select_runs(runs)
    ev = analysis.build_evidence(kept, {r: dirs[r] for r in kept["run_id"]}, excluded=excluded,
                                 all_runs=all_runs, experiment="exp", experiment_id="1")
    images = {"g" * 32: {"gradcam/overlay.png": _png_bytes("overlay"),
                         "gradcam/prior.png": _png_bytes("prior")}}
    from dataclasses import replace
    return replace(ev, images=images)


# --------------------------------------------------------------------------- retention
KVASIR_Q = {"a": 1.0, "pi": 1.6}
GALAR_Q = {"PillCam SB3": {"a": 0.8, "pi": 1.2}, "Olympus": {"a": 0.8, "pi": 0.9}}
RETENTION_SEEDS = (41, 42, 43)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Kvasir runs of a and pi (3 seeds) and their Galar children, as `load_runs` returns them."""
    tmp = tmp_path_factory.mktemp("retention")
    kv = frames(6, 50, KVASIR_CLASSES, 0, "k")
    ga = frames(6, 50, GALAR_CLASSES, 1, "g", systems=SYSTEMS)
    rows, dirs, probs = [], {}, {}
    for ci, cell in enumerate(("a", "pi")):
        for s in RETENTION_SEEDS:
            kid, gid = f"k{cell}{s}".ljust(32, "0"), f"g{cell}{s}".ljust(32, "0")
            p = probs_for(kv, KVASIR_Q[cell], 100 * ci + s)
            dirs[kid] = write_predictions({"test": predictions_frame(kv, p)}, tmp / kid)
            q = ga["capsule_system"].map(lambda x, c=cell: GALAR_Q[x][c]).to_numpy()
            g = probs_for(ga, q, 1000 + 100 * ci + s)
            dirs[gid] = write_predictions({"test": predictions_frame(ga, g)}, tmp / gid)
            probs[("kvasir", cell, s)], probs[("galar", cell, s)] = p, g
            rows.append(run_row(kid, cell, s, digest="k" * 64))
            rows.append(run_row(gid, f"{cell}@zero_shot", s, digest="g" * 64, study="galar",
                                base=kid, params={"galar.fold": "evaluation"}, entry="galar"))
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    return {"runs": runs, "dirs": dirs, "kv": kv, "ga": ga, "probs": probs, "tmp": tmp}


def experiment(name: str) -> str:
    """The id of experiment ``name`` in the current store, created when missing: a test names
    its experiment on each call (``mlflow.start_run(experiment_id=...)``, a workflow's
    ``experiment=``), never MLflow's process-wide active experiment (``set_experiment``), which
    would follow the process into the next test (issue 39)."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient()
    exp = c.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else c.create_experiment(name)
