"""Grad-CAM of pipi models and its overlap with the analytic prior (the paper's section
"Quantitative Grad-CAM/prior overlap" and its Grad-CAM figure).

* :func:`gradcam_maps`: Grad-CAM (Selvaraju et al. 2017) of the last convolutional stage,
  through Captum's ``LayerGradCam``, upsampled bilinearly to the input size;
* :func:`top_quantile_mask` and :func:`dice`: the top-quintile masks and their Dice coefficient;
* :func:`gradcam_prior_dice`: per frame, Dice between the top-quintile Grad-CAM map and the
  top-quintile ``P_blood`` map;
* :func:`overlay_figure` / :func:`image_grid`: PNG figures of examples (matplotlib, no pyplot
  state, so safe in worker processes and without a display).

Pure torch/numpy/matplotlib; no tracking. The caller builds the model inputs (for a 5-channel
model, RGB + the prior channels computed by :class:`pipi.training.frames.FrameInputs`).

References
----------
Selvaraju, R. R. et al. (2017). Grad-CAM: Visual explanations from deep networks via
gradient-based localization. ICCV.
Kokhlikyan, N. et al. (2020). Captum: A unified and generic model interpretability library
for PyTorch. arXiv:2009.07896.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import nn

from pipi.errors import ConfigError
from pipi.models.backbones import ARCHS, find_backbone

__all__ = [
    "CAM_LAYERS",
    "dice",
    "gradcam_layer",
    "gradcam_maps",
    "gradcam_prior_dice",
    "image_grid",
    "overlay_figure",
    "top_quantile_mask",
]

#: The Grad-CAM layer per backbone, as a path inside the torchvision model (``Backbone.body``):
#: the output of the last convolutional stage, at stride 32. EfficientNet-B0: the final 1x1
#: conv + BN + SiLU (1280 ch); ResNet-18: ``layer4`` (512 ch); ConvNeXt-Tiny: stage 4 (768 ch).
CAM_LAYERS: dict[str, str] = {
    "efficientnet_b0": "features.8",
    "resnet18": "layer4",
    "convnext_tiny": "features.7",
    "resnet50": "layer4",
}
assert set(CAM_LAYERS) == set(ARCHS), "every backbone needs its Grad-CAM layer"



def gradcam_layer(model: nn.Module, layer: str | nn.Module | None = None) -> nn.Module:
    """The module Grad-CAM attributes to.

    Parameters
    ----------
    model : nn.Module
        A pipi model.
    layer : str, nn.Module or None
        ``None``: :data:`CAM_LAYERS` of the model's backbone; a string: a module path inside
        ``model`` (``"backbone.body.features.7"``); a module: used as is.
    """
    if isinstance(layer, nn.Module):
        return layer
    modules = dict(model.named_modules())
    if layer is None:
        path, backbone = find_backbone(
            model, hint="or name the Grad-CAM layer explicitly with layer=<module>.")
        layer = ".".join(p for p in (path, "body", CAM_LAYERS[backbone.arch]) if p)
    if layer not in modules:
        raise ConfigError(
            f"model has no module {layer!r}; pass a path from model.named_modules(), e.g. "
            f"{[n for n in modules if n.count('.') <= 3][-3:]}"
        )
    return modules[layer]


def _logits(model: nn.Module):
    """Forward function returning class logits (a DistillClassifier also returns aux maps)."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        return out[0] if isinstance(out, tuple) else out  # (B, K)

    return forward


def gradcam_maps(model: nn.Module, inputs: torch.Tensor, target_classes, *,
                 layer: str | nn.Module | None = None, batch_size: int = 32) -> np.ndarray:
    """Grad-CAM maps of the last convolutional stage, at the input resolution.

    Parameters
    ----------
    model : nn.Module
        A pipi per-frame model; evaluated in eval mode (its mode is restored afterwards) on
        the device of ``inputs``.
    inputs : Tensor
        ``(N, C, H, W)`` model inputs, normalised as the model expects (C = 3 or 5).
    target_classes : int or sequence of int
        Class explained per frame (``(N,)``), or one class for all frames.
    layer : str, nn.Module or None
        Attribution layer; see :func:`gradcam_layer`.
    batch_size : int
        Frames per backward pass.

    Returns
    -------
    np.ndarray
        ``(N, H, W)`` float32, non-negative (ReLU of the class-weighted activation sum, as in
        Grad-CAM), upsampled bilinearly from the layer's ``(H/32, W/32)`` grid. Not rescaled:
        divide by the per-frame maximum for display.
    """
    # captum is imported on first use: it loads its whole attribution suite, which the
    # Dice/figure helpers of this module (and every importer of pipi) do not need.
    from captum.attr import LayerAttribution, LayerGradCam

    if inputs.ndim != 4:
        raise ValueError(f"inputs must be (N, C, H, W), got {tuple(inputs.shape)}")
    n, _, h, w = inputs.shape
    targets = torch.as_tensor(target_classes, dtype=torch.long).reshape(-1)
    if targets.numel() == 1:
        targets = targets.expand(n)
    if targets.numel() != n:
        raise ValueError(f"target_classes must hold 1 or {n} classes, got {targets.numel()}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    cam = LayerGradCam(_logits(model), gradcam_layer(model, layer))
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.enable_grad():
            for i in range(0, n, batch_size):
                # input gradients make the layer output part of the graph even when every
                # parameter upstream of it is frozen
                x = inputs[i:i + batch_size].detach().clone().requires_grad_(True)
                t = targets[i:i + batch_size].to(inputs.device)
                attr = cam.attribute(x, target=t, relu_attributions=True)  # (B, 1, h', w')
                up = LayerAttribution.interpolate(attr.detach().float(), (h, w), "bilinear")
                out.append(up[:, 0].clamp_min(0).cpu().numpy())  # (B, H, W)
    finally:
        model.train(was_training)
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, h, w), np.float32)


# --------------------------------------------------------------------------- overlap
def _as_maps(x, name: str) -> np.ndarray:
    """Tensor or array (N, H, W) / (N, 1, H, W) / (H, W) -> float64 array (N, H, W)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 4 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3:
        raise ValueError(f"{name} must be (N, H, W), (N, 1, H, W) or (H, W), got {x.shape}")
    return x


def _check_q(q: float) -> None:
    if not 0.0 < q < 1.0:
        raise ConfigError(f"q must be in (0, 1), got {q!r} (q=0.8 keeps the top quintile)")


def top_quantile_mask(maps, q: float = 0.8) -> np.ndarray:
    """Pixels strictly above their frame's ``q``-quantile.

    Parameters
    ----------
    maps : array or Tensor
        ``(N, H, W)``, ``(N, 1, H, W)`` or a single ``(H, W)`` map.
    q : float
        Quantile (numpy's linear interpolation) per frame; 0.8 keeps the top quintile.

    Returns
    -------
    np.ndarray
        Boolean mask of the input's shape without the channel axis (``(N, H, W)``, or
        ``(H, W)`` for a single map). About ``1 - q`` of the pixels of a map with distinct
        values; fewer when ties sit at the threshold (a ReLU'd Grad-CAM map that is zero on
        more than ``q`` of the frame keeps only its positive pixels; a constant map keeps none).
    """
    _check_q(q)
    single = np.ndim(maps) == 2
    x = _as_maps(maps, "maps")  # (N, H, W)
    thr = np.quantile(x.reshape(len(x), -1), q, axis=1)  # (N,)
    mask = x > thr[:, None, None]
    return mask[0] if single else mask


def dice(a_mask, b_mask) -> float:
    """Dice coefficient ``2 |A & B| / (|A| + |B|)`` of two boolean masks of the same shape.

    Returns NaN when both masks are empty (the coefficient is undefined there).
    """
    a, b = np.asarray(a_mask, dtype=bool), np.asarray(b_mask, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"masks differ in shape: {a.shape} vs {b.shape}")
    total = int(a.sum()) + int(b.sum())
    if total == 0:
        return float("nan")
    return 2.0 * int(np.logical_and(a, b).sum()) / total


def gradcam_prior_dice(cam, p_blood, *, q: float = 0.8) -> np.ndarray:
    """Per frame, Dice between the top-quantile Grad-CAM and the top-quantile P_blood masks.

    Parameters
    ----------
    cam : array or Tensor
        ``(N, H, W)`` Grad-CAM maps (e.g. from :func:`gradcam_maps`).
    p_blood : array or Tensor
        ``(N, H, W)`` or ``(N, 1, H, W)`` prior maps of the same frames, at the same size
        (the prior of the perturbed-or-not RGB frame the model saw).
    q : float
        Quantile of both masks (0.8: top quintile, the paper's).

    Returns
    -------
    np.ndarray
        ``(N,)`` float64 Dice per frame; 0 when the Grad-CAM mask is empty and the prior's is
        not, NaN when both are empty.
    """
    a = top_quantile_mask(_as_maps(cam, "cam"), q)  # (N, H, W)
    b = top_quantile_mask(_as_maps(p_blood, "p_blood"), q)
    if a.shape != b.shape:
        raise ValueError(
            f"cam {a.shape} and p_blood {b.shape} differ; compute both at the input size "
            "(gradcam_maps upsamples to it)"
        )
    inter = np.logical_and(a, b).sum(axis=(1, 2)).astype(np.float64)  # (N,)
    total = (a.sum(axis=(1, 2)) + b.sum(axis=(1, 2))).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 2.0 * inter / total, np.nan)


# --------------------------------------------------------------------------- figures
def _unit(x: np.ndarray) -> np.ndarray:
    """Rescale a map to [0, 1] by its own min and max (a flat map becomes zeros)."""
    x = np.asarray(x, dtype=np.float64)
    lo, hi = float(np.min(x)), float(np.max(x))
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def image_grid(rows: Sequence[Sequence[np.ndarray]], *, col_titles: Sequence[str],
               row_labels: Sequence[str] | None = None, cmaps: Sequence[str | None] | None = None,
               overlay_on: Sequence[int | None] | None = None, alpha: float = 0.5,
               panel_inches: float = 2.0, dpi: int = 100) -> bytes:
    """A grid of image panels as PNG bytes (e.g. the prior figure: image, H_norm, P_blood, Phi).

    Parameters
    ----------
    rows : sequence of sequences of arrays
        ``rows[i][j]``: panel j of example i, an ``(H, W, 3)`` uint8 image or an ``(H, W)``
        map (shown with ``cmaps[j]``, rescaled to [0, 1] per panel).
    col_titles : sequence of str
        One title per column.
    row_labels : sequence of str, optional
        One label per row (e.g. the class and frame).
    cmaps : sequence of str or None, optional
        Colormap per column for 2-D maps (default ``"viridis"``).
    overlay_on : sequence of int or None, optional
        Per column, the column whose image the map is drawn over with ``alpha`` (or None).
    alpha, panel_inches, dpi
        Overlay opacity, panel size and resolution.
    """
    ncols = len(col_titles)
    if not rows or any(len(r) != ncols for r in rows):
        raise ValueError(f"every row must have {ncols} panels (one per column title)")
    cmaps = list(cmaps) if cmaps is not None else ["viridis"] * ncols
    overlay_on = list(overlay_on) if overlay_on is not None else [None] * ncols
    fig = Figure(figsize=(panel_inches * ncols, panel_inches * len(rows)), dpi=dpi)
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    for i, row in enumerate(rows):
        for j, panel in enumerate(row):
            ax = axes[i][j]
            base = overlay_on[j]
            if base is not None:
                ax.imshow(np.asarray(row[base]))
            if np.ndim(panel) == 3:
                ax.imshow(np.asarray(panel))
            else:
                ax.imshow(_unit(panel), cmap=cmaps[j], vmin=0.0, vmax=1.0,
                          alpha=alpha if base is not None else None)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(col_titles[j], fontsize=9)
            if j == 0 and row_labels is not None:
                ax.set_ylabel(row_labels[i], fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def overlay_figure(images: np.ndarray, p_blood, cam_rgb, cam_pi, *,
                   row_labels: Sequence[str] | None = None, dice_rgb=None, dice_pi=None,
                   alpha: float = 0.5, dpi: int = 100) -> bytes:
    """The paper's Grad-CAM figure: image, P_blood, Grad-CAM RGB, Grad-CAM +PI per example.

    Parameters
    ----------
    images : np.ndarray
        ``(N, H, W, 3)`` uint8 frames (un-normalised, as displayed).
    p_blood, cam_rgb, cam_pi : array or Tensor
        ``(N, H, W)`` maps of the same frames; each is rescaled to [0, 1] per panel, and the
        Grad-CAM maps are drawn over the frame (``jet``, opacity ``alpha``).
    row_labels : sequence of str, optional
        One label per example (e.g. ``"Angiectasia"``).
    dice_rgb, dice_pi : sequence of float, optional
        Per-example Dice with the prior (RGB / +PI), appended to each row's label.
    alpha, dpi
        Overlay opacity and resolution.

    Returns
    -------
    bytes
        The PNG file.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be (N, H, W, 3), got {images.shape}")
    maps = [_as_maps(m, name) for m, name in
            ((p_blood, "p_blood"), (cam_rgb, "cam_rgb"), (cam_pi, "cam_pi"))]
    for m in maps:
        if m.shape != images.shape[:3]:
            raise ValueError(f"maps must be {images.shape[:3]} like the images, got {m.shape}")
    labels = list(row_labels) if row_labels is not None else [f"#{i}" for i in range(len(images))]
    if dice_rgb is not None and dice_pi is not None:
        labels = [f"{lab}\nDice {a:.2f} / {b:.2f}" for lab, a, b in zip(labels, dice_rgb, dice_pi)]
    rows = [[images[i], maps[0][i], maps[1][i], maps[2][i]] for i in range(len(images))]
    return image_grid(rows, col_titles=["image", "P_blood", "Grad-CAM RGB", "Grad-CAM +PI"],
                      row_labels=labels, cmaps=[None, "magma", "jet", "jet"],
                      overlay_on=[None, None, 0, 0], alpha=alpha, dpi=dpi)
