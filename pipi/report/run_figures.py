"""Figures of one run, for its Artifacts tab in the MLflow UI (PNG bytes, Agg canvas).

Built with the figure code of ``aggregate`` (:mod:`pipi.report.figures`: the PNG writer, the
palette, the confusion-matrix panel) and the curves of :mod:`pipi.stats`, from the run's own
test predictions (the run contract's table) and, for prior cells, example frames with the
prior channels the model was given. Pure: arrays in, PNG bytes out.

* ``roc_per_class`` / ``pr_per_class``: one-vs-rest ROC / precision-recall of every evaluable
  class of the test split, AUC / AP in the legend;
* ``confusion``: the row-normalised confusion matrix of the test split at the argmax;
* ``roc_per_capsule``: micro-averaged ROC per capsule system (Galar predictions);
* ``prior_examples``: per class one test frame, its P_blood and its Phi (what the model saw).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from PIL import Image

from pipi.classes import CLASSES
from pipi.config import TrainConfig
from pipi.predictions import prob_columns_of
from pipi.prior import prior_channels
from pipi.report.figures import COLORS, confusion, curve_axes, fixed_png
from pipi.stats import confusion_matrix, per_class_auc, row_normalise
from pipi.stats.curves import pr_points
from pipi.stats.operating import average_precision, roc_points

__all__ = ["cell_prior_figure", "evaluation_figures", "first_per_class", "prediction_figures",
           "prior_examples", "roc_per_capsule"]

#: Figures of one run are small: a modest resolution (the UI shows them at about this size).
DPI = 80


def _small_png(fig: Figure) -> bytes:
    return fixed_png(fig, DPI)


def _rgb(png: bytes) -> bytes:
    """An RGB PNG of an RGBA one (Agg writes RGBA: a quarter more bytes, no transparency)."""
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, format="PNG")
    return out.getvalue()


def _arrays(test: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return test["label"].to_numpy(np.int64), test[list(prob_columns_of(test))].to_numpy(np.float64)


def _class_curves(labels: np.ndarray, probs: np.ndarray, classes: Sequence[int], *, kind: str,
                  title: str, names: Sequence[str] = CLASSES) -> bytes:
    fig = Figure(figsize=(6.4, 4.6))
    fig.subplots_adjust(left=0.09, right=0.6, bottom=0.1, top=0.91)  # the legend on the right
    ax = fig.add_subplot(1, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aucs = per_class_auc(labels, probs, classes=classes)
    for i, k in enumerate(classes):
        y, s = labels == k, probs[:, k]
        col = COLORS[i % len(COLORS)]
        if kind == "roc":
            fpr, tpr, _ = roc_points(y, s)
            ax.step(fpr, tpr, where="post", color=col, lw=1.2,
                    label=f"{names[k]} (AUC {aucs[i]:.3f}, n={int(y.sum())})")
        else:
            rec, prec = pr_points(y, s)
            ax.plot(rec, prec, color=col, lw=1.2, drawstyle="steps-post",
                    label=f"{names[k]} (AP {average_precision(y, s):.3f}, n={int(y.sum())})")
    curve_axes(ax, kind)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.suptitle(title, fontsize=9, y=0.98)       # over the figure: wider than the axes
    ax.grid(alpha=0.3)
    return _small_png(fig)


def prediction_figures(test: pd.DataFrame, classes: Sequence[int], *, label: str,
                       names: Sequence[str] = CLASSES) -> dict[str, bytes]:
    """ROC and PR per evaluable class and the row-normalised confusion matrix of a run's test
    predictions (the run contract's table); ``classes``: the evaluable class indices, ``label``
    names the run in the titles, ``names`` the class set in index order."""
    labels, probs = _arrays(test)
    classes = [int(k) for k in classes]
    if not len(labels) or not classes:
        return {}
    macro = float(np.nanmean(per_class_auc(labels, probs, classes=classes))) \
        if len(set(labels.tolist())) > 1 else float("nan")
    figs = {
        "roc_per_class": _class_curves(
            labels, probs, classes, kind="roc", names=names,
            title=f"{label}: test ROC per class (macro-AUC {macro:.3f}, {len(classes)} classes)"),
        "pr_per_class": _class_curves(labels, probs, classes, kind="pr", names=names,
                                      title=f"{label}: test precision-recall per class"),
    }
    present = sorted(set(labels.tolist()))
    counts = confusion_matrix(labels, probs.argmax(axis=1), present)
    conf = {"classes": [names[k] for k in present],
            "arms": {label: {"label": label, "normalised": row_normalise(counts),
                             "title": f"{label}: argmax of each test frame"}}}
    figs["confusion"] = _rgb(confusion(conf, title=f"{label}: test confusion matrix, "
                                                   f"row-normalised ({len(labels)} frames)",
                                       dpi=DPI))
    return figs


def roc_per_capsule(test: pd.DataFrame, classes: Sequence[int], *, label: str) -> bytes | None:
    """Micro-averaged one-vs-rest ROC of each capsule system (Galar), AUC in the legend;
    None without a ``capsule_system`` column or with fewer than one scorable system."""
    if "capsule_system" not in test:
        return None
    labels, probs = _arrays(test)
    systems = test["capsule_system"].astype(str).to_numpy()
    fig = Figure(figsize=(5.6, 4.4))                # matplotlib's default margins hold it
    ax = fig.add_subplot(1, 1, 1)
    drawn = 0
    for i, sysname in enumerate(sorted(set(systems))):
        m = systems == sysname
        cls = [k for k in classes if (labels[m] == k).any()]
        if not cls:
            continue
        y = (labels[m][:, None] == np.asarray(cls)[None, :]).ravel()
        s = probs[m][:, cls].ravel()
        if y.all() or not y.any():
            continue
        fpr, tpr, _ = roc_points(y, s)
        auc = float(per_class_auc(y.astype(np.int64), np.c_[1 - s, s], classes=[1])[0])
        ax.step(fpr, tpr, where="post", color=COLORS[i % len(COLORS)], lw=1.4,
                label=f"{sysname} (micro-AUC {auc:.3f}, {int(m.sum())} frames)")
        drawn += 1
    if not drawn:
        return None
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{label}: test ROC per capsule system (micro-averaged)", fontsize=9)
    ax.grid(alpha=0.3)
    return _small_png(fig)


def evaluation_figures(test: pd.DataFrame, classes: Sequence[int], *, label: str,
                       names: Sequence[str] = CLASSES) -> dict[str, bytes]:
    """The figures of an evaluation child (galar, robustness, transplant): those of
    :func:`prediction_figures`, plus the ROC per capsule system where the frames have one."""
    figs = prediction_figures(test, classes, label=label, names=names)
    capsule = roc_per_capsule(test, classes, label=label)
    if capsule is not None:
        figs["roc_per_capsule"] = capsule
    return figs


def prior_examples(rgb: np.ndarray, prior: np.ndarray, class_names: Sequence[str], *,
                   label: str, given: Mapping[str, str], source: str = "test") -> bytes:
    """One row per frame: the RGB frame, its P_blood and its Phi channel.

    ``rgb`` uint8 ``(N, 3, H, W)``; ``prior`` float ``(N, 2, H, W)`` in [0, 1] (P_blood, Phi as
    the model received them: a zeroed channel is all zeros); ``given`` maps "P_blood" and
    "Phi" to the column subtitle that says how the model used that channel; ``source`` names
    where the frames come from (the title says "one <source> frame per class").
    """
    rgb, prior = np.asarray(rgb), np.asarray(prior, dtype=np.float32)
    if rgb.ndim != 4 or rgb.shape[1] != 3 or prior.shape != (len(rgb), 2, *rgb.shape[2:]):
        raise ValueError(f"prior_examples: rgb (N, 3, H, W) and prior (N, 2, H, W) expected, "
                         f"got {rgb.shape} and {prior.shape}")
    n = len(rgb)
    height = 1.0 * n + 0.9                       # inches: a row per frame, a header band
    fig = Figure(figsize=(4.2, height))         # a fixed layout (subplots_adjust below)
    heads = ["RGB", f"P_blood\n{given.get('P_blood', '')}", f"Phi\n{given.get('Phi', '')}"]
    for r in range(n):
        panels = [rgb[r].transpose(1, 2, 0), prior[r, 0], prior[r, 1]]
        for c, img in enumerate(panels):
            ax = fig.add_subplot(n, 3, 3 * r + c + 1)
            # nearest: a thumbnail drawn as blocks (a small PNG), no invented detail
            if c == 0:
                ax.imshow(img, interpolation="nearest")
                ax.set_ylabel(class_names[r], fontsize=6, rotation=0, ha="right", va="center")
            else:
                ax.imshow(img, cmap="magma" if c == 1 else "viridis", vmin=0, vmax=1,
                          interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(heads[c], fontsize=6)
    fig.suptitle(f"{label}: one {source} frame per class\nand the prior channels it was given",
                 fontsize=7, y=1 - 0.08 / height, va="top")
    fig.subplots_adjust(left=0.3, right=0.98, wspace=0.05, hspace=0.08, bottom=0.1 / height,
                        top=1 - 0.75 / height)
    return _small_png(fig)


def first_per_class(frames: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Of ``rows`` (positions in ``frames``), the first of each class, in class order."""
    rows = np.asarray(rows)
    _, first = np.unique(frames["class_index"].to_numpy()[rows], return_index=True)
    return rows[first]


def cell_prior_figure(cfg: TrainConfig, images: np.ndarray, class_names: Sequence[str], *,
                      label: str, source: str = "test", side: int = 96) -> bytes:
    """:func:`prior_examples` of uint8 frames ``(N, 3, S, S)`` at ``cfg.image_size``, with the
    prior that ``cfg``'s cell gives its model: computed at the training size with ``cfg``'s
    prior parameters, a channel the cell zeroes drawn as zeros (``distill``: P_blood is the
    auxiliary target), then shrunk to thumbnails of at most ``side`` pixels."""
    x01 = torch.from_numpy(np.ascontiguousarray(images)).float() / 255
    prior = prior_channels(x01, **asdict(cfg.prior))          # (N, 2, S, S)
    cell = cfg.cell_config
    for ch in cell.zero_channels:
        prior[:, ch - 3] = 0
    if cell.distill:
        given = {"P_blood": "auxiliary target", "Phi": "not used"}
    else:
        given = {name: "zeroed" if ch in cell.zero_channels else "input channel"
                 for name, ch in (("P_blood", 3), ("Phi", 4))}
    size = min(side, x01.shape[-1])                           # thumbnails keep PNGs small
    small = torch.nn.functional.interpolate(torch.cat([x01, prior], 1), size=(size, size),
                                            mode="area")
    rgb = (small[:, :3] * 255).round().clamp(0, 255).to(torch.uint8).numpy()
    return prior_examples(rgb, small[:, 3:].numpy(), class_names, label=label, given=given,
                          source=source)
