"""Grad-CAM / prior overlap of an RGB and a +PI run of the same seed (``transplant -P
study=gradcam``; paper "Quantitative Grad-CAM/prior overlap" and its Grad-CAM figure).

For each focal class, up to ``n_frames`` test frames of that class are drawn with a generator
seeded by (``frame_seed``, class index), the same frames for both runs. Per frame: Grad-CAM of
the last convolutional stage (Captum ``LayerGradCam``, :func:`pipi.probes.gradcam.gradcam_maps`) for
the frame's true class, through the RGB and through the +PI model; ``P_blood`` of the frame
with the +PI run's prior parameters; the Dice of the top-quintile Grad-CAM mask with the
top-quintile ``P_blood`` mask (:func:`pipi.probes.gradcam.gradcam_prior_dice`).

Logged as one child run (study ``gradcam``, no ``pipi.cell`` tag, so no arm of the headline
tables): metrics ``gradcam/dice_rgb/<Class>``, ``gradcam/dice_pi/<Class>``,
``gradcam/delta/<Class>`` (+PI - RGB, means over the frames) and ``gradcam/n/<Class>``; the
per-frame Dice as ``gradcam/dice.parquet``; the overlay figure (image, P_blood, Grad-CAM RGB,
Grad-CAM +PI; one frame per class) and the prior figure (image, H_norm, P_blood, Phi).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from pipi import tracking
from pipi.classes import CLASSES
from pipi.config import TrainConfig
from pipi.data.cache import build_cache, to_float
from pipi.data.staging import load_staged
from pipi.paths import pipi_home
from pipi.prior import prior_channels
from pipi.probes.gradcam import gradcam_maps, gradcam_prior_dice, image_grid, overlay_figure
from pipi.runs.evaluate import device_for
from pipi.training.frames import FrameInputs, tmpdir

__all__ = ["GRADCAM_CLASSES", "GradcamResult", "gradcam_classes", "gradcam_overlap", "log_gradcam",
           "sample_frames"]

#: The paper's six focal classes of the Grad-CAM figure and overlap analysis.
GRADCAM_CLASSES = ("Angiectasia", "Blood - fresh", "Erosion", "Lymphangiectasia", "Pylorus",
                   "Ulcer")
QUANTILE = 0.8  # top quintile (paper)


def gradcam_classes(names: Sequence[str] = CLASSES) -> tuple[str, ...]:
    """The classes the overlap is computed for, given the runs' class set in index order:
    the paper's six focal classes on Kvasir-Capsule's 14, every class of another set."""
    return GRADCAM_CLASSES if tuple(names) == CLASSES else tuple(names)


@dataclass(frozen=True)
class GradcamResult:
    frames: pd.DataFrame          # one row per sampled frame: class, path, dice_rgb, dice_pi
    metrics: dict[str, float]
    overlay_png: bytes
    prior_png: bytes


def sample_frames(frames: pd.DataFrame, *, classes: Sequence[str], n_frames: int,
                  seed: int, names: Sequence[str] = CLASSES) -> dict[str, np.ndarray]:
    """Class -> up to ``n_frames`` test rows of that class, drawn with rng (seed, class index);
    ``names``: the staged data's classes in index order (Kvasir-Capsule's 14 by default)."""
    split, label = frames["split"].to_numpy(), frames["class_index"].to_numpy()
    out = {}
    for name in classes:
        k = list(names).index(name)
        rows = np.flatnonzero((split == "test") & (label == k))
        if len(rows) == 0:
            continue
        rng = np.random.default_rng([int(seed), k])
        out[name] = np.sort(rng.choice(rows, size=min(n_frames, len(rows)), replace=False))
    return out


def _h_norm(p_blood: np.ndarray, phi: np.ndarray, alpha: float) -> np.ndarray:
    """H_norm from P_blood = sigmoid(alpha (H_norm - 0.5)) Phi (Phi > 0 everywhere)."""
    s = np.clip(p_blood / np.maximum(phi, 1e-12), 1e-6, 1 - 1e-6)
    return 0.5 + np.log(s / (1 - s)) / alpha


def gradcam_overlap(rgb: tuple[nn.Module, TrainConfig], pi: tuple[nn.Module, TrainConfig],
                    frames: pd.DataFrame, images: np.ndarray, *, n_frames: int = 50,
                    seed: int = 0, classes: Sequence[str] | None = None,
                    device: torch.device | None = None) -> GradcamResult:
    """Dice of top-quintile Grad-CAM (RGB and +PI) with top-quintile P_blood per focal class
    (``classes``: :func:`gradcam_classes` of the runs' class set by default)."""
    device = device or device_for()
    (m_rgb, c_rgb), (m_pi, c_pi) = rgb, pi
    names = c_pi.class_set.names
    if tuple(c_rgb.class_set.names) != tuple(names):
        raise ValueError(f"the RGB and +PI runs predict other classes: "
                         f"{list(c_rgb.class_set.names)} vs {list(names)}")
    classes = gradcam_classes(names) if classes is None else classes
    m_rgb, m_pi = m_rgb.to(device), m_pi.to(device)
    picked = sample_frames(frames, classes=classes, n_frames=n_frames, seed=seed, names=names)
    rows, metrics, overlay, prior_rows = [], {}, [], []
    for name, idx in picked.items():
        x01 = to_float(images, idx, device)                          # (B, 3, S, S) in [0, 1]
        x_rgb, _ = FrameInputs(c_rgb)(x01, train=False)
        x_pi, _ = FrameInputs(c_pi)(x01, train=False)
        # P_blood and Phi with the +PI run's prior parameters (not its input channels: a
        # pblood_only / phi_only run zeroes one of them)
        p = prior_channels(x01, **asdict(c_pi.prior)).cpu().numpy()  # (B, 2, S, S)
        target = list(names).index(name)
        cam_rgb = gradcam_maps(m_rgb, x_rgb, target)
        cam_pi = gradcam_maps(m_pi, x_pi, target)
        d_rgb = gradcam_prior_dice(cam_rgb, p[:, 0], q=QUANTILE)
        d_pi = gradcam_prior_dice(cam_pi, p[:, 0], q=QUANTILE)
        sub = frames.iloc[idx]
        rows.append(pd.DataFrame({"class": name, "path": sub["path"].astype(str).to_numpy(),
                                  "video_id": sub["video_id"].astype(str).to_numpy(),
                                  "dice_rgb": d_rgb, "dice_pi": d_pi}))
        mean_rgb, mean_pi = float(np.nanmean(d_rgb)), float(np.nanmean(d_pi))
        metrics |= {f"gradcam/dice_rgb/{name}": mean_rgb, f"gradcam/dice_pi/{name}": mean_pi,
                    f"gradcam/delta/{name}": mean_pi - mean_rgb,
                    f"gradcam/n/{name}": float(len(idx))}
        img = np.asarray(images[idx[0]]).transpose(1, 2, 0)          # (S, S, 3) uint8
        overlay.append((img, p[0, 0], cam_rgb[0], cam_pi[0], name, d_rgb[0], d_pi[0]))
        prior_rows.append((img, _h_norm(p[0, 0], p[0, 1], c_pi.prior.alpha), p[0, 0], p[0, 1],
                           name))
    if not rows:
        raise ValueError("no test frame of any focal class")
    per_frame = pd.concat(rows, ignore_index=True)
    ov = overlay_figure(np.stack([o[0] for o in overlay]), np.stack([o[1] for o in overlay]),
                        np.stack([o[2] for o in overlay]), np.stack([o[3] for o in overlay]),
                        row_labels=[o[4] for o in overlay], dice_rgb=[o[5] for o in overlay],
                        dice_pi=[o[6] for o in overlay])
    pr = image_grid([list(r[:4]) for r in prior_rows],
                    col_titles=["image", "H_norm", "P_blood", "Phi"],
                    row_labels=[r[4] for r in prior_rows],
                    cmaps=[None, "viridis", "magma", "cividis"])
    return GradcamResult(per_frame, metrics, ov, pr)


def log_gradcam(rgb_run: str, pi_run: str, *, models, data, digest: str, tags: dict,
                n_frames: int, seed: int, entry_point: str, run_name: str) -> str:
    """Compute :func:`gradcam_overlap` for a seed pair and log it as a nested child run."""
    frames, _ = load_staged(data)
    (m_rgb, c_rgb), (m_pi, c_pi) = models(rgb_run), models(pi_run)
    if c_rgb.image_size != c_pi.image_size:
        raise ValueError(f"runs {rgb_run} and {pi_run} differ in image size "
                         f"({c_rgb.image_size} vs {c_pi.image_size})")
    images = build_cache(data, frames, size=c_rgb.image_size, digest=digest,
                         cache_dir=pipi_home() / "cache", progress=False)
    res = gradcam_overlap((m_rgb, c_rgb), (m_pi, c_pi), frames, images, n_frames=n_frames,
                          seed=seed)
    work = tmpdir()
    try:
        res.frames.to_parquet(work / "dice.parquet", index=False)
        (work / "overlay.png").write_bytes(res.overlay_png)
        (work / "prior.png").write_bytes(res.prior_png)
        with tracking.pipi_run(entry_point=entry_point, nested=True, tags=tags,
                               run_name=run_name) as run:
            run.log_params({"rgb_run_id": rgb_run, "pi_run_id": pi_run,
                                 "n_frames": n_frames, "frame_seed": seed,
                                 "quantile": QUANTILE,
                                 "classes": ",".join(gradcam_classes(c_pi.class_set.names)),
                                 "image_size": c_rgb.image_size})
            run.log_metrics(res.metrics)
            run.log_artifacts(work, "gradcam")
            return run.run_id
    finally:
        shutil.rmtree(work, ignore_errors=True)
