"""A Capsule-Vision-2024 stand-in: the challenge's release layout (:func:`write_cv_release`,
for ``pipi stage images``) or a staged folder written directly in pipi's staged format
(:func:`write_cv_staged`), and the challenge's metric definitions re-implemented
(:func:`challenge_report`).

10 classes (the challenge's, in its order), 4 sources (KID, KVASIR, SEE-AI, AIIMS), file
names in the challenge's forms, ``image_path`` as the challenge's sheets write it (Windows
separators), the challenge's ``validation`` folder as pipi's ``test`` split and pipi's ``val``
carved from ``training``. Each class gets its own colour so that a model can learn it.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import (
    auc,
    balanced_accuracy_score,
    classification_report,
    precision_recall_curve,
    roc_auc_score,
)

CLASSES = ("Angioectasia", "Bleeding", "Erosion", "Erythema", "Foreign Body",
           "Lymphangiectasia", "Normal", "Polyp", "Ulcer", "Worms")
SOURCES = ("KID", "KVASIR", "SEE-AI", "AIIMS")
#: frames per class in each pipi split
PER_CLASS = {"train": 4, "val": 2, "test": 4}
FOLDER = {"train": "training", "val": "training", "test": "validation"}


def file_name(source: str, cls: str, i: int) -> str:
    """A file name in the form of each source's frames in the challenge's folders."""
    if source == "KVASIR":
        return f"{hashlib.sha1(cls.encode()).hexdigest()[:16]}_{1000 + i}.jpg"
    if source == "KID":
        return f"{cls.lower().replace(' ', '')}-P{i % 3}-{i}.jpg"
    if source == "SEE-AI":
        return f"image{i:05d}.jpg"
    return f"{cls.lower().replace(' ', '')}{i % 2 + 1}_{i}.jpg"


KVASIR_RE = r"^(?P<group>[0-9a-f]{16})_"
KID_RE = r"-P(?P<group>\d+)-"


def _image(path: Path, k: int, rng: np.random.Generator, size: int) -> None:
    colour = np.array([25 * k, 255 - 20 * k, (97 * k) % 256], np.float64)
    img = np.clip(colour + rng.normal(0, 20, (size, size, 3)), 0, 255)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img.astype(np.uint8)).save(path, quality=95)


def write_cv_release(top: Path, *, size: int = 32, seed: int = 0,
                     per_class: tuple[int, int] = (8, 4)) -> Path:
    """``top/Dataset/{training,validation}/<Class>/<Source>/<file>.jpg`` with the challenge's
    sheets (``<folder>_data.xlsx``: ``image_path`` with Windows separators from ``Dataset/``,
    the ``Dataset`` column naming the source, one one-hot column per class in the
    challenge's order) inside the split folders; ``per_class`` images per class in each
    folder."""
    rng = np.random.default_rng(seed)
    root = Path(top) / "Dataset"
    n = 0
    for folder, per in zip(("training", "validation"), per_class, strict=True):
        rows = []
        for k, cls in enumerate(CLASSES):
            for j in range(per):
                src = SOURCES[(k + j) % len(SOURCES)]
                name = file_name(src, cls, n)
                n += 1
                _image(root / folder / cls / src / name, k, rng, size)
                rows.append({"image_path": f"{folder}\\{cls}\\{src}\\{name}", "Dataset": src,
                             **{c: int(c == cls) for c in CLASSES}})
        pd.DataFrame(rows).to_excel(root / folder / f"{folder}_data.xlsx", index=False)
    return Path(top)


def write_cv_staged(root: Path, *, size: int = 32, seed: int = 0) -> Path:
    """Write the staged folder at ``root`` (frames.parquet, manifest.json, the images)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    rows, n = [], 0
    for split, per in PER_CLASS.items():
        for k, cls in enumerate(CLASSES):
            for j in range(per):
                src = SOURCES[(k + j) % len(SOURCES)]
                name = file_name(src, cls, n)
                n += 1
                path = f"{split}/{cls}/{src}/{name}"
                _image(root / path, k, rng, size)
                rows.append({"path": path, "filename": name, "class": cls, "class_index": k,
                             "video_id": f"{src}-{cls}-{j % 2}", "frame_number": j,
                             "split": split, "multilabel": False, "source": src,
                             "image_path": "\\".join([FOLDER[split], cls, src, name])})
    frames = pd.DataFrame(rows)
    digest = hashlib.sha256(frames.to_csv(index=False).encode()).hexdigest()
    manifest = {
        "schema_version": 1, "dataset": "capsule-vision-2024", "layout": "capsule-vision",
        "classes": list(CLASSES), "sources": list(SOURCES), "data_digest": digest,
        "content_sha256": hashlib.sha256(b"split" + digest.encode()).hexdigest(),
        "split_source": "folders", "seed": seed,
        "n_frames": {s: int((frames["split"] == s).sum()) for s in PER_CLASS},
    }
    frames.to_parquet(root / "frames.parquet", index=False)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return root


def challenge_report(y_true, y_pred, names):
    """generate_metrics_report's figures, from its definitions (one-hot truth, probabilities)."""
    yt, yp = y_true.argmax(1), y_pred.argmax(1)
    rep = classification_report(yt, yp, target_names=list(names), output_dict=True,
                                zero_division=0)
    aucs, prs, spec = {}, {}, {}
    for i, c in enumerate(names):
        try:
            with warnings.catch_warnings():
                # recent scikit-learn warns and returns NaN where the challenge's raised
                warnings.simplefilter("error", UndefinedMetricWarning)
                aucs[c] = roc_auc_score(y_true[:, i], y_pred[:, i])
        except (ValueError, UndefinedMetricWarning):
            aucs[c] = 0.0
        pred_i = yp == i
        tn = np.sum((y_true[:, i] == 0) & ~pred_i)
        fp = np.sum((y_true[:, i] == 0) & pred_i)
        spec[c] = tn / (tn + fp) if tn + fp > 0 else 0
        try:
            p, r, _ = precision_recall_curve(y_true[:, i], y_pred[:, i])
            prs[c] = auc(r, p)
        except ValueError:
            prs[c] = 0.0
    mean_auc = np.mean(list(aucs.values()))
    bacc = balanced_accuracy_score(yt, yp)
    return {"auc": aucs, "specificity": spec, "pr_auc": prs,
            "sensitivity": {c: rep[c]["recall"] for c in names},
            "f1": {c: rep[c]["f1-score"] for c in names},
            "mean_auc": mean_auc, "balanced_accuracy": bacc, "combined": (mean_auc + bacc) / 2}


def organisers_report(truth: pd.DataFrame, sheet: pd.DataFrame, names, *, key="image_path"):
    """How the challenge's organisers scored a submitted sheet (their ``Results/`` scripts),
    from their definitions: the sheet must list exactly the truth's images (by ``image_path``
    for the training and validation sheets, by the ``.jpg`` file name for the test sheet:
    ``key="file"``), once each, with every class column, a ``predicted_class`` naming a
    class and no empty cell; it is aligned to the truth's rows; the truth is its one-hot
    class columns (or, for a test sheet, its ``class_label`` one-hot encoded in sorted
    label order). Returns the metrics: mean AUC (0.0 where a class cannot be scored),
    balanced accuracy of the arg-max, and per class the one-vs-rest counts of the arg-max
    (specificity TN/(TN+FP), recall, F1)."""
    import re as _re

    def file_of(p):
        m = _re.search(r"([^/\\]+\.jpg)$", p)
        return m.group(1) if m else None

    names = list(names)
    tkeys = truth["image_path"].map(file_of) if key == "file" else truth["image_path"]
    pkeys = sheet["image_path"].map(file_of) if key == "file" else sheet["image_path"]
    assert set(tkeys) == set(pkeys), "the sheet does not list exactly the truth's images"
    assert not sheet["image_path"].duplicated().any(), "an image_path twice"
    assert all(c in sheet.columns for c in names) and "predicted_class" in sheet.columns
    assert not sheet.isnull().to_numpy().any(), "an empty cell"
    assert sheet["predicted_class"].isin(names).all()
    aligned = sheet.set_index(pkeys.to_numpy()).loc[tkeys.to_numpy()].reset_index(drop=True)
    if "class_label" in truth:
        y_true = pd.get_dummies(truth["class_label"]).to_numpy().astype(int)
    else:
        y_true = truth[names].to_numpy().astype(int)
    y_pred = aligned[names].to_numpy(np.float64)
    yt, yp = y_true.argmax(1), y_pred.argmax(1)
    aucs = []
    for i in range(len(names)):
        pos = int(y_true[:, i].sum())
        aucs.append(roc_auc_score(y_true[:, i], y_pred[:, i]) if 0 < pos < len(y_true) else 0.0)
    spec, sens, f1 = {}, {}, {}
    for i, c in enumerate(names):
        t, p = yt == i, yp == i
        tp, fp, fn, tn = (t & p).sum(), (~t & p).sum(), (t & ~p).sum(), (~t & ~p).sum()
        spec[c] = tn / (tn + fp) if tn + fp else 0.0
        sens[c] = tp / (tp + fn) if tp + fn else 0.0
        f1[c] = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    present = sorted(set(yt))
    bacc = float(np.mean([(yp[yt == k] == k).mean() for k in present]))
    mean_auc = float(np.mean(aucs))
    return {"mean_auc": mean_auc, "balanced_accuracy": bacc, "combined": (mean_auc + bacc) / 2,
            "auc": dict(zip(names, aucs)), "specificity": spec, "sensitivity": sens, "f1": f1,
            "y_pred": y_pred, "y_true": y_true}
