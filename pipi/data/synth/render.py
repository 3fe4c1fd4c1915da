"""Procedural capsule-endoscopy frame renderer (numpy + PIL), used by :mod:`pipi.data.synth`.

A frame is rendered in three layers, all vectorised numpy on ``(S, S)`` grids:

1. **Scene** (what is in front of the capsule): a mucosal albedo ``A`` (``(S, S, 3)``, display
   space, no gamma) with per-patient colour, villous texture, bile staining and debris; a
   shading field ``Sh`` (``(S, S)``) with the lumen, folds and bumps; specular spots; and the
   class signatures painted into ``A`` and ``Sh``. Scene fields live on a canvas larger than
   the frame and are cropped at an offset that drifts with time, so consecutive frames of a
   segment show the same mucosa moving slowly (temporal windows carry information).
2. **Light transport**: the LEDs sit beside the lens, so irradiance falls off with the
   distance ``r`` from the optical axis. Red light has the longest diffusion length in tissue
   (haemoglobin and scattering absorb blue and green first), so each channel decays as
   ``exp(-r / lambda_c)`` with ``lambda_R > lambda_G > lambda_B``: the periphery of every frame
   is darker and redder than its centre (as in real capsule frames), and the centre of a
   well-lit frame is pale, with specular highlights and some clipping.
3. **Camera** (an :class:`Optics` per capsule system): white balance, colour saturation,
   gamma, a circular field of view (black outside), sensor noise, optional blur, resolution
   and compression artefacts.

Physics the class signatures respect (they are what the analytic prior ``P_blood`` measures,
through ``R / (R + G + B)``): haemoglobin (fresh blood, angiectasia, an ulcer's inflamed rim,
erythema) absorbs green and blue, so those regions have a high red share; hematin is dark
brown-black; lymphangiectasia, fibrin, bubbles and highlights are white or cream (low red
share); bile is yellow-green.

The scene primitives live in :mod:`pipi.data.synth.scene`, the debris, bubble and finding
painters in :mod:`pipi.data.synth.paint`; this module lays down the base mucosa and renders.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from pipi.data.synth.paint import PAINT_ORDER, PAINTERS, paint_bubbles, paint_debris
from pipi.data.synth.scene import (
    BILE,
    FINDING_CODE,
    FINDINGS,
    OPTICS,
    SECTIONS,
    SHADOW_EXP,
    Look,
    Optics,
    PaintContext,
    Scene,
    new_scene,
    random_look,
)

__all__ = [
    "FINDINGS",
    "OPTICS",
    "SECTIONS",
    "Look",
    "Optics",
    "Rendered",
    "Scene",
    "new_scene",
    "random_look",
    "render_frame",
]


# --------------------------------------------------------------------------------------------
# Base mucosa by section
# --------------------------------------------------------------------------------------------

_SECTION_TINT = {
    "mouth": np.array([0.95, 0.80, 0.78], np.float32),
    "esophagus": np.array([0.97, 0.86, 0.84], np.float32),
    "stomach": np.array([1.0, 0.92, 0.95], np.float32),
    "small intestine": np.array([1.0, 1.0, 1.0], np.float32),
    "colon": np.array([0.98, 1.06, 1.12], np.float32),
}


def _base(c: PaintContext, scene: Scene, look: Look) -> None:
    """Mucosal albedo, villous relief, folds and lumen."""
    f = c.f
    sec = scene.section
    muc = np.asarray(look.mucosa, np.float32) * _SECTION_TINT[sec]
    pale = np.asarray(look.pale, np.float32)
    # Colour variation: slow hue/brightness wander plus pale (less perfused) patches.
    c.A[:] = muc * (1.0 + 0.05 * f["col"][..., None] * np.array([1.0, 1.4, 1.8], np.float32))
    w_pale = np.clip(0.5 + 0.6 * f["mid2"], 0.0, 1.0) * look.pale_amount
    if sec in ("colon", "esophagus"):
        w_pale = np.clip(w_pale + 0.35, 0.0, 1.0)
    c.A[:] = c.A * (1.0 - w_pale[..., None]) + pale * w_pale[..., None]

    # Villous relief (small intestine) or smoother mucosa elsewhere.
    villi = look.texture_amp * (1.0 if sec == "small intestine" else 0.35)
    c.Sh *= 1.0 + villi * f["hi"] + 0.10 * f["lo"]

    # Folds around the lumen (Kerckring folds, gastric rugae, haustra, oesophageal folds).
    warp = f["warp"]
    if scene.lumen is not None:
        lx, ly = scene.lumen
        dl = np.hypot(c.x - lx, c.y - ly)
        th = np.arctan2(c.y - ly, c.x - lx)
    else:
        lx, ly = 2.0 * np.cos(scene.fold_angle), 2.0 * np.sin(scene.fold_angle)
        dl = np.hypot(c.x - lx, c.y - ly)
        th = np.arctan2(c.y - ly, c.x - lx)
    if sec == "esophagus" or sec == "mouth":
        fold = (0.5 + 0.5 * np.cos(7.0 * th + 1.5 * warp)) ** 2
        amp = look.fold_contrast * 0.6
    elif sec == "stomach":
        ca, sa = np.cos(scene.fold_angle), np.sin(scene.fold_angle)
        fold = (0.5 + 0.5 * np.cos(2 * np.pi * 1.6 * (c.x * ca + c.y * sa) + 2.2 * warp)) ** 3
        amp = look.fold_contrast * 1.1
    elif sec == "colon":
        fold = (0.5 + 0.5 * np.cos(2 * np.pi * 1.3 * dl * (1 + 0.15 * np.cos(3 * th)) + warp)) ** 4
        amp = look.fold_contrast * 1.2
    else:
        fold = (0.5 + 0.5 * np.cos(2 * np.pi * scene.fold_freq * dl + 1.3 * warp)) ** 3
        amp = look.fold_contrast
    c.Sh *= 1.0 - amp * fold
    if scene.lumen is not None:
        rho = scene.lumen_radius
        c.Sh *= 1.0 - 0.93 * np.exp(-((dl / rho) ** 2))

    # Bile staining: yellow-green film where the bile field is high.
    b = np.clip((f["bile"] - (1.3 - 1.2 * look.bile)) / 0.8, 0.0, 1.0) * 0.75
    if sec in ("small intestine", "colon"):
        c.A[:] = c.A * (1.0 - b[..., None]) + BILE * b[..., None]

    # Specular spots on wet crests (no albedo: added after lighting).
    c.spec = np.maximum(c.spec, np.clip((f["spec"] - 2.4) / 0.5, 0.0, 1.0) * (c.Sh > 0.85))


# --------------------------------------------------------------------------------------------
# Frame
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """One rendered frame and what was drawn in it."""

    image: np.ndarray  # (S, S, 3) uint8 RGB
    bbox: tuple[int, int, int, int] | None  # (x0, y0, x1, y1) of the luminal finding, pixels
    bubbles: float  # fraction of the frame covered by bubbles
    debris: float  # fraction of the frame covered by debris/turbid residue


def render_frame(
    findings: tuple[str, ...] | list[str],
    *,
    look: Look,
    optics: Optics,
    scene: Scene,
    t: int,
    rng: np.random.Generator,
) -> Rendered:
    """Render one frame of ``scene`` at time ``t`` showing ``findings``.

    Parameters
    ----------
    findings : sequence of str
        Names from :data:`FINDINGS`; "Normal clean mucosa" draws nothing extra. Several may
        be combined (a multilabel frame).
    look : Look
        The patient's appearance.
    optics : Optics
        The capsule system; ``scene.side`` should already include ``optics.scale``.
    scene : Scene
        The segment's scene; its layout is fixed, ``t`` moves the view across it.
    t : int
        Frame index within the segment (0-based).
    rng : numpy.random.Generator
        Source of per-frame randomness (sensor noise, flicker).

    Returns
    -------
    Rendered
    """
    unknown = [f for f in findings if f not in FINDING_CODE]
    if unknown:
        raise ValueError(f"unknown finding(s) {unknown}; known: {list(FINDINGS)}")
    c = PaintContext(scene, t)
    _base(c, scene, look)
    base_rng = np.random.default_rng([scene.layout_seed, 0])
    n_debris = int(base_rng.poisson(look.debris * (1.6 if scene.section == "colon" else 0.6)))
    paint_debris(c, base_rng, n_debris)
    for fnd in sorted(findings, key=lambda f: PAINT_ORDER.get(f, 1)):
        painter = PAINTERS.get(fnd)
        if painter is not None:
            lr = np.random.default_rng([scene.layout_seed, FINDING_CODE[fnd]])
            painter(c, lr)
    clean = "Normal clean mucosa" in findings
    n_bub = int(base_rng.poisson(look.bubbles * (0.5 if clean else 1.0)))
    if n_bub:
        paint_bubbles(c, base_rng, n_bub)

    # Light transport: per-channel radial decay (red travels furthest), exposure, flicker.
    s = c.side
    rr = c.r / optics.fov
    atten = np.asarray(optics.atten, np.float32)
    illum = np.exp(-((rr[..., None] / atten) ** np.float32(optics.atten_power)))  # (S, S, 3)
    # Rim of the dome: mucosa pressed against it is lit through the tissue (transillumination),
    # which leaves mostly red light.
    rim = np.clip((rr - optics.rim_start) / (1.0 - optics.rim_start), 0.0, 1.0)[..., None] ** 2
    illum *= np.exp(-rim * np.asarray(optics.rim_absorb, np.float32))
    gain = look.brightness * c.exposure * (1.0 + 0.03 * rng.standard_normal())
    # Inter-reflections inside folds and the lumen are redder (each bounce off the mucosa
    # filters the light again): shade each channel with its own exponent, red the softest.
    sh = np.clip(c.Sh, 1e-4, None)[..., None] ** SHADOW_EXP
    img = c.A * (sh * illum) * np.float32(gain)
    spec = np.clip(c.spec, 0.0, 1.0)[..., None] * np.exp(-rr[..., None] / 1.5)
    img = img * (1.0 - spec) + spec
    for post in c.post:
        post(c, img)

    # Camera: white balance, colour response, tone curve, noise, field of view.
    img *= np.asarray(optics.wb, np.float32)
    if optics.saturation != 1.0:
        grey = img.mean(axis=2, keepdims=True)
        img = grey + optics.saturation * (img - grey)
    k = np.float32(optics.shoulder)
    over = img > k
    img[over] = k + (1.0 - k) * (1.0 - np.exp(-(img[over] - k) / (1.0 - k)))
    np.clip(img, 0.0, 1.0, out=img)
    if optics.gamma != 1.0:
        img **= np.float32(optics.gamma)
    img += rng.normal(0.0, optics.noise, img.shape).astype(np.float32) * np.sqrt(img + 0.02)
    fov = np.clip((optics.fov - c.r) * s / 2.0 + 0.5, 0.0, 1.0)
    if optics.fov_square is not None:
        sq = np.minimum(optics.fov_square - np.abs(c.u), optics.fov_square - np.abs(c.v))
        fov = np.minimum(fov, np.clip(sq * s / 2.0 + 0.5, 0.0, 1.0))
    img *= fov[..., None]
    out = (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)

    if optics.blur > 0 or optics.recompress_quality is not None:
        pil = Image.fromarray(out)
        if optics.blur > 0:
            pil = pil.filter(ImageFilter.GaussianBlur(optics.blur))
        if optics.recompress_quality is not None:
            buf = io.BytesIO()
            pil.save(buf, format="JPEG", quality=optics.recompress_quality)
            buf.seek(0)
            pil = Image.open(buf).convert("RGB")
        out = np.asarray(pil, dtype=np.uint8).copy()
        out[fov < 0.5] = 0  # the mask is applied in the device, after processing

    bbox = None
    ys, xs = np.nonzero((c.lesion > 0.5) & (fov > 0.5))
    if xs.size:
        bbox = (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))
    return Rendered(
        image=out,
        bbox=bbox,
        bubbles=float(min(1.0, c.bubble_cover)),
        debris=float(min(1.0, c.debris_cover)),
    )
