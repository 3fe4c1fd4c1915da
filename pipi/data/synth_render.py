"""Procedural capsule-endoscopy frame renderer (numpy + PIL), used by :mod:`pipi.data.synthetic`.

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
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from pipi.classes import CLASSES

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

#: Anatomical sections (Galar's section columns), in the capsule's order of passage.
SECTIONS: tuple[str, ...] = ("mouth", "esophagus", "stomach", "small intestine", "colon")

#: Everything ``render_frame`` can draw: the 14 Kvasir classes plus Galar-only findings.
FINDINGS: tuple[str, ...] = (*CLASSES, "z-line", "no view")
_FINDING_CODE = {f: i + 1 for i, f in enumerate(FINDINGS)}

# Reference colours (display-space reflectance, R G B). Haemoglobin absorbs G and B strongly.
_BLOOD = np.array([0.62, 0.05, 0.04], np.float32)
_CLOT = np.array([0.36, 0.03, 0.03], np.float32)
_HEMATIN = np.array([0.20, 0.10, 0.06], np.float32)
_ANGIO = np.array([0.86, 0.17, 0.14], np.float32)
_INFLAMED = np.array([0.84, 0.24, 0.19], np.float32)
_ERYTHEMA = np.array([0.90, 0.32, 0.25], np.float32)
_FIBRIN = np.array([0.95, 0.90, 0.70], np.float32)
_CHYLE = np.array([0.97, 0.95, 0.84], np.float32)  # lymph: white, creamy
_BILE = np.array([0.74, 0.70, 0.20], np.float32)
_DEBRIS = np.array([0.44, 0.38, 0.15], np.float32)
_TURBID = np.array([0.52, 0.46, 0.22], np.float32)
_PLASTIC = np.array([0.80, 0.81, 0.82], np.float32)
_METAL = np.array([0.66, 0.68, 0.71], np.float32)
_SHADOW_EXP = np.array([0.6, 1.0, 1.3], np.float32)


# --------------------------------------------------------------------------------------------
# Patient appearance and capsule optics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """Appearance of one patient's bowel (constant over a video)."""

    mucosa: tuple[float, float, float]  # base albedo, orange-pink
    pale: tuple[float, float, float]  # secondary, paler albedo mixed in patches
    pale_amount: float  # 0..1, share of the pale albedo
    brightness: float  # exposure multiplier
    texture_scale: float  # villus size, 1 = default
    texture_amp: float  # villous relief contrast
    fold_contrast: float  # depth of fold grooves
    bile: float  # 0..1, tendency to bile staining
    debris: float  # expected debris particles per frame
    bubbles: float  # expected bubbles per frame


def random_look(rng: np.random.Generator) -> Look:
    """Draw one patient's appearance."""
    r = rng.uniform(0.86, 0.95)
    g = rng.uniform(0.56, 0.66)
    b = rng.uniform(0.36, 0.46)
    return Look(
        mucosa=(r, g, b),
        pale=(rng.uniform(0.88, 0.96), rng.uniform(0.70, 0.78), rng.uniform(0.46, 0.56)),
        pale_amount=rng.uniform(0.25, 0.6),
        brightness=rng.uniform(0.95, 1.2),
        texture_scale=rng.uniform(0.7, 1.5),
        texture_amp=rng.uniform(0.06, 0.14),
        fold_contrast=rng.uniform(0.25, 0.5),
        bile=rng.uniform(0.1, 0.7),
        debris=rng.uniform(0.3, 2.0),
        bubbles=rng.uniform(0.0, 2.5),
    )


@dataclass(frozen=True)
class Optics:
    """Camera and illumination of one capsule system (the vendor shift lives here)."""

    name: str
    scale: float = 1.0  # frame side relative to the requested size
    atten: tuple[float, float, float] = (1.2, 0.85, 0.75)  # per-channel decay length, FOV radii
    atten_power: float = 1.6  # irradiance ~ exp(-(r / atten_c) ** atten_power)
    shoulder: float = 0.6  # tone-curve knee: values above it roll off smoothly towards 1
    rim_start: float = 0.72  # transillumination rim: starts at this fraction of the FOV radius
    rim_absorb: tuple[float, float, float] = (0.4, 2.2, 2.8)  # its optical depth per channel
    wb: tuple[float, float, float] = (1.0, 1.0, 1.0)  # white-balance gains
    saturation: float = 1.0  # colour response around the grey axis
    gamma: float = 1.0  # tone curve exponent (out = in ** gamma)
    fov: float = 0.97  # field-of-view radius, fraction of the half side
    fov_square: float | None = None  # clip the circle to this half side (Olympus-like FOV)
    blur: float = 0.0  # Gaussian blur radius in pixels (optics / demosaicing)
    recompress_quality: int | None = None  # JPEG round trip inside the device (artefacts)
    noise: float = 0.008  # sensor noise, std in [0, 1] units


#: Capsule systems: the embedded Kvasir-format data, then Galar's four ``Capsule System`` values.
OPTICS: dict[str, Optics] = {
    "kvasir": Optics("kvasir", wb=(1.02, 1.0, 0.96)),
    "PillCam SB3": Optics("PillCam SB3", wb=(0.97, 1.0, 1.05), saturation=0.95),
    "Olympus": Optics(
        "Olympus", scale=1.25, atten=(1.05, 0.66, 0.56), wb=(1.08, 0.97, 0.86),
        saturation=1.12, gamma=0.92, fov=1.12, fov_square=0.97, blur=0.0,
    ),
    "PillCam Colon2": Optics(
        "PillCam Colon2", atten=(1.4, 0.95, 0.85), wb=(0.92, 1.03, 1.10), saturation=0.9,
        gamma=1.08, noise=0.012,
    ),
    "PillCam SB2": Optics(
        "PillCam SB2", scale=0.75, wb=(0.98, 1.02, 0.95), blur=0.7, recompress_quality=35,
        noise=0.014,
    ),
}


# --------------------------------------------------------------------------------------------
# Scenes (one per segment) and noise fields
# --------------------------------------------------------------------------------------------


def _smooth_field(rng: np.random.Generator, side: int, cells: int) -> np.ndarray:
    """Band-limited Gaussian noise on a ``(side, side)`` grid, zero mean, unit std."""
    cells = int(max(2, min(cells, side)))
    low = rng.standard_normal((cells, cells)).astype(np.float32)
    img = Image.fromarray(low, mode="F").resize((side, side), Image.Resampling.BICUBIC)
    f = np.asarray(img, dtype=np.float32)
    return (f - f.mean()) / (f.std() + 1e-6)


@dataclass
class Scene:
    """The part of the bowel one segment looks at: canvas noise fields plus layout.

    Not frozen: it holds arrays. ``render_frame`` only reads it.
    """

    side: int  # frame side in pixels
    margin: int  # canvas margin in pixels on each side
    section: str
    fields: dict[str, np.ndarray]  # name -> (side + 2 margin,)*2
    velocity: tuple[float, float]  # drift in pixels per frame (x, y)
    lumen: tuple[float, float] | None  # lumen centre in scene coordinates, None = close-up
    lumen_radius: float
    fold_freq: float
    fold_angle: float
    layout_seed: int
    closeup: bool = False
    exposure: float = 1.0


def new_scene(
    rng: np.random.Generator, *, side: int, section: str = "small intestine", look: Look,
    length: int = 1,
) -> Scene:
    """Draw a scene for a segment of ``length`` frames at ``side`` pixels."""
    margin = max(4, side // 4)
    cw = side + 2 * margin
    ts = look.texture_scale
    fields = {
        "lo": _smooth_field(rng, cw, 3),
        "mid": _smooth_field(rng, cw, 7),
        "mid2": _smooth_field(rng, cw, 9),
        "hi": _smooth_field(rng, cw, int(cw / (2.6 * ts))),
        "col": _smooth_field(rng, cw, 5),
        "bile": _smooth_field(rng, cw, 5),
        "warp": _smooth_field(rng, cw, 4),
        "spec": _smooth_field(rng, cw, int(cw / 4)),
    }
    # Drift slowly enough to stay on the canvas for the whole segment.
    speed = min(side * 0.04, margin / max(1, length))
    ang = rng.uniform(0, 2 * np.pi)
    closeup = bool(rng.random() < 0.3)
    lumen = None if closeup else (float(rng.uniform(-0.45, 0.45)), float(rng.uniform(-0.45, 0.45)))
    return Scene(
        side=side,
        margin=margin,
        section=section,
        fields=fields,
        velocity=(speed * np.cos(ang), speed * np.sin(ang)),
        lumen=lumen,
        lumen_radius=float(rng.uniform(0.12, 0.28)),
        fold_freq=float(rng.uniform(2.2, 3.6)),
        fold_angle=float(rng.uniform(0, np.pi)),
        layout_seed=int(rng.integers(0, 2**31 - 1)),
        closeup=closeup,
        exposure=float(rng.uniform(0.92, 1.08)),
    )


@functools.lru_cache(maxsize=16)
def _grid(side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in ``[-1, 1]`` (x right, y down) and the radius; cached."""
    c = ((np.arange(side, dtype=np.float32) + 0.5) / side) * 2.0 - 1.0
    x, y = np.meshgrid(c, c)
    return x, y, np.hypot(x, y)


class _Ctx:
    """Per-frame working state shared by the painters."""

    def __init__(self, scene: Scene, t: int) -> None:
        s, m = scene.side, scene.margin
        ox = round(np.clip(m + scene.velocity[0] * t, 0, 2 * m))
        oy = round(np.clip(m + scene.velocity[1] * t, 0, 2 * m))
        self.side = s
        self.f = {k: v[oy:oy + s, ox:ox + s] for k, v in scene.fields.items()}
        u, v, r = _grid(s)
        self.u, self.v, self.r = u, v, r  # frame coordinates (camera)
        # Scene coordinates: where each pixel lies on the drifting canvas.
        self.du = (ox - m) * 2.0 / s
        self.dv = (oy - m) * 2.0 / s
        self.x = u + np.float32(self.du)
        self.y = v + np.float32(self.dv)
        self.A = np.empty((s, s, 3), np.float32)
        self.Sh = np.ones((s, s), np.float32)
        self.spec = np.zeros((s, s), np.float32)
        self.lesion = np.zeros((s, s), np.float32)  # luminal finding extent, for the bbox
        self.exposure = scene.exposure
        self.bubble_cover = 0.0
        self.debris_cover = 0.0
        self.post: list = []  # callables applied to the lit image (bubbles)

    def window(self, cx: float, cy: float, rad: float) -> tuple[slice, slice] | None:
        """Pixel slices covering the scene-coordinate disc (cx, cy, rad); None if off frame."""
        s = self.side
        px = (cx - self.du + 1.0) * s / 2.0
        py = (cy - self.dv + 1.0) * s / 2.0
        pr = rad * s / 2.0 + 2.0
        x0, x1 = int(max(0, np.floor(px - pr))), int(min(s, np.ceil(px + pr)))
        y0, y1 = int(max(0, np.floor(py - pr))), int(min(s, np.ceil(py + pr)))
        if x0 >= x1 or y0 >= y1:
            return None
        return slice(y0, y1), slice(x0, x1)


def _blob(
    c: _Ctx, cx: float, cy: float, rx: float, ry: float, theta: float = 0.0,
    rough: float = 0.0, soft: float = 0.15, field_name: str = "mid",
) -> tuple[tuple[slice, slice], np.ndarray, np.ndarray] | None:
    """Soft irregular ellipse in scene coordinates.

    Returns the pixel window, the mask in ``[0, 1]`` on it and the normalised distance ``d``
    (``d < 1`` inside), or None when the blob is off frame.
    """
    win = c.window(cx, cy, max(rx, ry) * (1.0 + rough + soft))
    if win is None:
        return None
    x, y = c.x[win] - cx, c.y[win] - cy
    ct, st = np.cos(theta), np.sin(theta)
    a = (x * ct + y * st) / rx
    b = (-x * st + y * ct) / ry
    d = np.sqrt(a * a + b * b)
    if rough:
        d = d + rough * c.f[field_name][win]
    m = np.clip((1.0 - d) / soft + 0.5, 0.0, 1.0)
    return win, m, d


def _mix(c: _Ctx, win, m: np.ndarray, colour, strength: float = 1.0) -> None:
    """Blend the albedo towards ``colour`` (array (3,) or (h, w, 3)) under mask ``m``."""
    w = (m * strength)[..., None]
    c.A[win] = c.A[win] * (1.0 - w) + np.asarray(colour, np.float32) * w


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


def _base(c: _Ctx, scene: Scene, look: Look) -> None:
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
        c.A[:] = c.A * (1.0 - b[..., None]) + _BILE * b[..., None]

    # Specular spots on wet crests (no albedo: added after lighting).
    c.spec = np.maximum(c.spec, np.clip((f["spec"] - 2.4) / 0.5, 0.0, 1.0) * (c.Sh > 0.85))


# --------------------------------------------------------------------------------------------
# Debris and bubbles
# --------------------------------------------------------------------------------------------


def _debris(c: _Ctx, lr: np.random.Generator, n: int, *, big: bool = False) -> None:
    """Brown-green particles (food residue, faeces) floating on the mucosa."""
    cover = 0.0
    for _ in range(n):
        cx, cy = lr.uniform(-0.9, 0.9, 2)
        rad = lr.uniform(0.04, 0.16 if big else 0.09)
        bl = _blob(c, cx, cy, rad, rad * lr.uniform(0.4, 1.0), lr.uniform(0, np.pi),
                   rough=0.35, soft=0.25, field_name="mid2")
        if bl is None:
            continue
        win, m, _ = bl
        tone = _DEBRIS * lr.uniform(0.7, 1.25)
        _mix(c, win, m, tone)
        c.Sh[win] *= 1.0 - 0.25 * m * (0.5 + 0.5 * c.f["hi"][win])
        cover += float(m.sum())
    c.debris_cover += cover / c.side**2


def _bubbles(c: _Ctx, lr: np.random.Generator, n: int, *, rmax: float = 0.14) -> None:
    """Gas bubbles: a thin bright rim, a darker edge line, a specular dot; slightly milky."""
    specs = []
    for _ in range(n):
        cx, cy = lr.uniform(-0.85, 0.85, 2)
        rad = lr.uniform(0.03, rmax)
        specs.append((cx, cy, rad, lr.uniform(-0.6, -0.2), lr.uniform(-0.6, -0.2)))
        c.bubble_cover += np.pi * rad * rad / 4.0

    def apply(c: _Ctx, img: np.ndarray) -> None:
        for cx, cy, rad, hx, hy in specs:
            win = c.window(cx, cy, rad * 1.15)
            if win is None:
                continue
            d = np.hypot(c.x[win] - cx, c.y[win] - cy) / rad
            inside = np.clip((1.0 - d) * 8.0, 0.0, 1.0)
            rim = np.exp(-(((d - 0.93) / 0.07) ** 2))
            hl = np.exp(-(np.hypot(c.x[win] - (cx + hx * rad), c.y[win] - (cy + hy * rad))
                          / (0.18 * rad)) ** 2)
            sub = img[win]
            sub *= (1.0 - 0.35 * rim)[..., None]
            sub += (0.12 * inside)[..., None] * (1.0 - sub)  # milky film
            sub += (0.9 * hl * inside)[..., None] * (1.0 - sub)
            sub += (0.35 * rim * inside)[..., None] * (0.9 - sub).clip(0, None)
            img[win] = sub

    c.post.append(apply)


# --------------------------------------------------------------------------------------------
# Class signatures
# --------------------------------------------------------------------------------------------


def _central(lr: np.random.Generator, spread: float) -> tuple[float, float]:
    return float(lr.normal(0, spread)), float(lr.normal(0, spread))


def _paint_blood_fresh(c: _Ctx, lr: np.random.Generator) -> None:
    # A pool or stream of fresh blood covering a large central part of the view, in
    # blood-tinged luminal fluid that reddens the whole field.
    c.A[:] = c.A * np.float32(1.0 - (w := lr.uniform(0.2, 0.4))) + _BLOOD * np.float32(w)
    cx, cy = _central(lr, 0.12)
    rx = lr.uniform(0.5, 0.8)
    parts = [(cx, cy, rx, rx * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi))]
    for _ in range(int(lr.integers(0, 3))):
        ang = lr.uniform(0, 2 * np.pi)
        parts.append((cx + 0.5 * rx * np.cos(ang), cy + 0.5 * rx * np.sin(ang),
                      lr.uniform(0.15, 0.35), lr.uniform(0.1, 0.25), ang))
    for px, py, ax, ay, th in parts:
        bl = _blob(c, px, py, ax, ay, th, rough=0.3, soft=0.25)
        if bl is None:
            continue
        win, m, _ = bl
        clot = np.clip(0.5 + 0.8 * c.f["mid2"][win], 0.0, 1.0)[..., None]
        colour = _BLOOD * (1.0 - 0.6 * clot) + _CLOT * 0.6 * clot
        _mix(c, win, m, colour)
        # A blood film hides the villi and reflects as a smooth wet surface.
        c.Sh[win] = c.Sh[win] * (1.0 - 0.6 * m) + 0.6 * m * (1.0 + 0.04 * c.f["lo"][win])
        c.spec[win] = np.maximum(
            c.spec[win], m * np.clip((c.f["spec"][win] - 1.7) / 0.5, 0.0, 1.0))
        c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_hematin(c: _Ctx, lr: np.random.Generator) -> None:
    # Altered blood: dark brown-black clumps and coffee-ground speckles.
    cx, cy = _central(lr, 0.25)
    for _ in range(int(lr.integers(3, 8))):
        px, py = cx + lr.normal(0, 0.25), cy + lr.normal(0, 0.25)
        rad = lr.uniform(0.06, 0.22)
        bl = _blob(c, px, py, rad, rad * lr.uniform(0.5, 1.0), lr.uniform(0, np.pi),
                   rough=0.4, soft=0.3, field_name="mid2")
        if bl is None:
            continue
        win, m, _ = bl
        grain = np.clip(0.6 + 0.5 * c.f["hi"][win], 0.0, 1.0)[..., None]
        _mix(c, win, m, _HEMATIN * (0.7 + 0.6 * grain))
        c.lesion[win] = np.maximum(c.lesion[win], m)
    # Speckles around the clumps.
    bl = _blob(c, cx, cy, 0.6, 0.6, rough=0.2, soft=0.4)
    if bl is not None:
        win, m, _ = bl
        sp = np.clip((c.f["spec"][win] - 1.0) / 0.3, 0.0, 1.0) * m
        _mix(c, win, sp, _HEMATIN)


def _paint_angiectasia(c: _Ctx, lr: np.random.Generator) -> None:
    # Flat, bright red vascular lesions (dilated capillaries) with fern-like margins and a
    # hyperaemic halo, in view at the centre (the capsule looks at what it finds).
    cx, cy = _central(lr, 0.12)
    n = int(lr.integers(2, 5))
    for i in range(n):
        if i == 0:
            px, py, rad = cx, cy, lr.uniform(0.20, 0.32)
        else:
            px, py = cx + lr.normal(0, 0.25), cy + lr.normal(0, 0.25)
            rad = lr.uniform(0.06, 0.16)
        halo = _blob(c, px, py, rad * 1.7, rad * 1.7, rough=0.2, soft=0.8)
        if halo is not None:
            win, m, _ = halo
            _mix(c, win, m, _ERYTHEMA, strength=0.45)
        bl = _blob(c, px, py, rad, rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi),
                   rough=0.3, soft=0.25)
        if bl is None:
            continue
        win, m, d = bl
        # Radiating fine vessels just outside the core.
        th = np.arctan2(c.y[win] - py, c.x[win] - px)
        fern = np.clip(np.cos(9.0 * th + 3.0 * c.f["warp"][win]) * 3.0 - 2.0, 0.0, 1.0)
        fern *= np.clip(1.6 - d, 0.0, 1.0)
        mm = np.maximum(m, 0.8 * fern)
        core = np.clip(1.0 - d, 0.0, 1.0)[..., None]
        colour = _ANGIO * (1.0 - 0.3 * core) + np.array([0.74, 0.10, 0.09], np.float32) * 0.3 * core
        _mix(c, win, mm, colour)
        c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_lymphangiectasia(c: _Ctx, lr: np.random.Generator) -> None:
    # Dilated lacteals: scattered white/creamy villous spots; no haemoglobin.
    cx, cy = _central(lr, 0.2)
    spread = lr.uniform(0.35, 0.65)
    region = _blob(c, cx, cy, spread * 1.2, spread * 1.2, rough=0.2, soft=0.6)
    if region is not None:
        win, m, _ = region
        _mix(c, win, m, _CHYLE, strength=0.35)  # swollen, whitish villi
        c.lesion[win] = np.maximum(c.lesion[win], (m > 0.5).astype(np.float32))
    for _ in range(int(lr.integers(25, 70))):
        px, py = cx + lr.normal(0, spread * 0.6), cy + lr.normal(0, spread * 0.6)
        rad = lr.uniform(0.02, 0.06)
        bl = _blob(c, px, py, rad, rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi),
                   rough=0.1, soft=0.4, field_name="hi")
        if bl is None:
            continue
        win, m, _ = bl
        _mix(c, win, m, _CHYLE * lr.uniform(0.95, 1.03))
        c.Sh[win] *= 1.0 + 0.12 * m  # raised spots catch light


def _paint_erosion(c: _Ctx, lr: np.random.Generator, *, ulcer: bool = False) -> None:
    # Mucosal break: white-yellow fibrin with a red inflamed rim (an ulcer is larger, deeper,
    # with a thicker rim and a wider erythematous halo).
    n = 1 if ulcer else int(lr.integers(1, 4))
    cx, cy = _central(lr, 0.2)
    for i in range(n):
        px, py = (cx, cy) if i == 0 else (cx + lr.normal(0, 0.3), cy + lr.normal(0, 0.3))
        rad = lr.uniform(0.18, 0.36) if ulcer else lr.uniform(0.06, 0.13)
        ry = rad * lr.uniform(0.6, 1.0)
        th = lr.uniform(0, np.pi)
        rim_w = 0.45 if ulcer else 0.35
        halo = 1 + rim_w + (0.6 if ulcer else 0.2)
        outer = _blob(c, px, py, rad * halo, ry * halo, th, rough=0.15, soft=0.7)
        if outer is not None:
            win, m, _ = outer
            _mix(c, win, m, _ERYTHEMA, strength=0.4 if ulcer else 0.25)
        rim = _blob(c, px, py, rad * (1 + rim_w), ry * (1 + rim_w), th, rough=0.2, soft=0.3)
        if rim is not None:
            win, m, _ = rim
            _mix(c, win, m, _INFLAMED)
            c.lesion[win] = np.maximum(c.lesion[win], m)
        base = _blob(c, px, py, rad, ry, th, rough=0.25, soft=0.25)
        if base is not None:
            win, m, d = base
            slough = np.clip(0.5 + 0.4 * c.f["hi"][win], 0.0, 1.0)[..., None]
            colour = _FIBRIN * (0.92 + 0.1 * slough)
            _mix(c, win, m, colour)
            if ulcer:  # crater: shadowed wall just inside the rim
                c.Sh[win] *= 1.0 - 0.3 * np.exp(-(((d - 0.85) / 0.15) ** 2))
            c.Sh[win] = c.Sh[win] * (1.0 - 0.5 * m) + 0.5 * m  # flat, no villi


def _paint_erythema(c: _Ctx, lr: np.random.Generator) -> None:
    # Diffuse, patchy redness of the mucosa (hyperaemia), villi intact.
    cx, cy = _central(lr, 0.25)
    for _ in range(int(lr.integers(1, 3))):
        rad = lr.uniform(0.35, 0.7)
        bl = _blob(c, cx + lr.normal(0, 0.15), cy + lr.normal(0, 0.15), rad,
                   rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi), rough=0.4, soft=0.6)
        if bl is None:
            continue
        win, m, _ = bl
        mott = np.clip(0.6 + 0.5 * c.f["mid2"][win], 0.2, 1.0)
        _mix(c, win, m * mott, _ERYTHEMA, strength=0.8)
        c.lesion[win] = np.maximum(c.lesion[win], (m > 0.5).astype(np.float32))


def _dome(d: np.ndarray) -> np.ndarray:
    """Shading of a hemispherical bump lit from the camera, ``d`` the normalised radius."""
    h = np.sqrt(np.clip(1.0 - d * d, 0.0, 1.0))
    return 0.55 + 0.45 * h


def _paint_polyp(c: _Ctx, lr: np.random.Generator) -> None:
    # A raised, lobulated mass: dome shading, a contact shadow, a specular cap.
    cx, cy = _central(lr, 0.2)
    rad = lr.uniform(0.24, 0.4)
    ry = rad * lr.uniform(0.75, 1.0)
    th = lr.uniform(0, np.pi)
    shadow = _blob(c, cx + 0.04, cy + 0.05, rad * 1.25, ry * 1.25, th, soft=0.5)
    if shadow is not None:
        win, m, _ = shadow
        c.Sh[win] *= 1.0 - 0.4 * m
    bl = _blob(c, cx, cy, rad, ry, th, rough=0.08, soft=0.15, field_name="mid2")
    if bl is None:
        return
    win, m, d = bl
    lobes = 1.0 + 0.12 * c.f["mid2"][win]
    tone = c.A[win].mean(axis=(0, 1)) * np.array([1.03, 0.9, 0.88], np.float32)
    _mix(c, win, m, tone)
    shade = _dome(d) * lobes * (1.0 + 0.05 * c.f["hi"][win])
    c.Sh[win] = c.Sh[win] * (1.0 - m) + shade * m * 1.15
    hx, hy = cx - 0.35 * rad, cy - 0.35 * ry
    hl = np.exp(-((np.hypot(c.x[win] - hx, c.y[win] - hy) / (0.12 * rad)) ** 2))
    c.spec[win] = np.maximum(c.spec[win], hl * m)
    c.lesion[win] = np.maximum(c.lesion[win], m)


def _stadium(c: _Ctx, cx, cy, length, width, theta, extra=0.0):
    """Window, signed-distance-like ``q`` (<0 inside) and across-axis coordinate of a capsule."""
    win = c.window(cx, cy, length / 2 + width + extra)
    if win is None:
        return None
    x, y = c.x[win] - cx, c.y[win] - cy
    ct, st = np.cos(theta), np.sin(theta)
    a = x * ct + y * st
    b = -x * st + y * ct
    a_cl = np.clip(a, -length / 2, length / 2)
    q = np.hypot(a - a_cl, b) - width / 2
    return win, q, b / (width / 2), a


def _paint_foreign_body(c: _Ctx, lr: np.random.Generator) -> None:
    # A retained capsule (grey plastic, dark optical dome) or metallic clips.
    cx, cy = _central(lr, 0.2)
    th = lr.uniform(0, np.pi)
    kind = "capsule" if lr.random() < 0.6 else "clip"
    px = 2.0 / c.side
    if kind == "capsule":
        length, width = lr.uniform(0.45, 0.8), lr.uniform(0.26, 0.36)
        st = _stadium(c, cx, cy, length, width, th, extra=0.1)
        if st is None:
            return
        win, q, b, a = st
        m = np.clip(0.5 - q / px, 0.0, 1.0)
        cyl = np.sqrt(np.clip(1.0 - b * b, 0.0, 1.0))
        colour = np.broadcast_to(_PLASTIC, m.shape + (3,)).copy()
        dome = (a > length / 2 - width * 0.1)[..., None]
        colour = np.where(dome, np.array([0.25, 0.27, 0.3], np.float32), colour)
        _mix(c, win, m, colour)
        c.Sh[win] = c.Sh[win] * (1.0 - m) + m * (0.45 + 0.75 * cyl)
        stripe = np.exp(-(((b + 0.35) / 0.12) ** 2)) * m
        c.spec[win] = np.maximum(c.spec[win], stripe)
        shadow = np.clip(1.0 - q / (0.08), 0.0, 1.0) * (1 - m)
        c.Sh[win] *= 1.0 - 0.35 * shadow
        c.lesion[win] = np.maximum(c.lesion[win], m)
    else:
        for i in range(int(lr.integers(2, 4))):
            ox, oy = lr.normal(0, 0.12, 2)
            length, width = lr.uniform(0.35, 0.6), lr.uniform(0.035, 0.06)
            st = _stadium(c, cx + ox, cy + oy, length, width, th + lr.normal(0, 0.35))
            if st is None:
                continue
            win, q, b, _ = st
            m = np.clip(0.5 - q / px, 0.0, 1.0)
            cyl = np.sqrt(np.clip(1.0 - b * b, 0.0, 1.0))
            _mix(c, win, m, _METAL)
            c.Sh[win] = c.Sh[win] * (1.0 - m) + m * (0.35 + 0.9 * cyl)
            c.spec[win] = np.maximum(c.spec[win], m * np.exp(-(((b + 0.2) / 0.3) ** 2)))
            c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_reduced_view(c: _Ctx, lr: np.random.Generator, *, severity: float = 1.0) -> None:
    # Turbid fluid, residue and bubbles hiding the mucosa; the scene is darker.
    f = c.f
    turbid = np.clip(0.55 + 0.35 * f["lo"] + 0.2 * f["mid"], 0.0, 1.0) * lr.uniform(0.5, 0.85)
    turbid = np.clip(turbid * severity, 0.0, 0.95)
    c.A[:] = c.A * (1.0 - turbid[..., None]) + _TURBID * lr.uniform(0.8, 1.1) * turbid[..., None]
    c.Sh *= 1.0 - 0.3 * turbid
    c.exposure *= lr.uniform(0.4, 0.6) / max(severity, 1.0)
    _debris(c, lr, int(lr.integers(8, 20) * severity), big=True)
    _bubbles(c, lr, int(lr.integers(10, 30) * severity), rmax=0.16)


def _paint_pylorus(c: _Ctx, lr: np.random.Generator) -> None:
    # Antral view of the pyloric opening: a small dark central lumen, a muscular ring and
    # radial folds converging on it.
    cx, cy = _central(lr, 0.12)
    r0 = lr.uniform(0.06, 0.12)
    dl = np.hypot(c.x - cx, c.y - cy)
    th = np.arctan2(c.y - cy, c.x - cx)
    k = int(lr.integers(6, 11))
    radial = (0.5 + 0.5 * np.cos(k * th + 1.2 * c.f["warp"])) ** 2
    c.Sh *= 1.0 - 0.45 * radial * np.exp(-dl / 0.45) * np.clip(dl / r0 - 1.0, 0.0, 1.0)
    ring = np.exp(-(((dl - 2.2 * r0) / (0.9 * r0)) ** 2))
    c.Sh *= 1.0 + 0.2 * ring
    hole = np.clip((1.0 - dl / r0) * 4.0 + 0.5, 0.0, 1.0)
    c.Sh *= 1.0 - 0.96 * hole
    c.spec = np.maximum(c.spec, np.clip((c.f["spec"] - 1.6) / 0.4, 0.0, 1.0) * ring)


def _paint_ileocecal_valve(c: _Ctx, lr: np.random.Generator) -> None:
    # Two bulging, pale-yellow lips around a slit-like orifice.
    cx, cy = _central(lr, 0.15)
    th = lr.uniform(-0.5, 0.5)
    w = lr.uniform(0.35, 0.55)
    ct, st = np.cos(th), np.sin(th)
    lip_tone = np.array([0.93, 0.76, 0.56], np.float32)
    for sgn in (-1.0, 1.0):
        off = sgn * w * lr.uniform(0.3, 0.4)
        bl = _blob(c, cx - off * st, cy + off * ct, w, w * lr.uniform(0.3, 0.42), th,
                   rough=0.06, soft=0.2, field_name="mid2")
        if bl is None:
            continue
        win, m, d = bl
        _mix(c, win, m, lip_tone, strength=0.6)
        c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.15
    slit = _blob(c, cx, cy, w * 0.8, w * lr.uniform(0.06, 0.12), th, rough=0.05, soft=0.3)
    if slit is not None:
        win, m, _ = slit
        c.Sh[win] *= 1.0 - 0.9 * m


def _paint_ampulla(c: _Ctx, lr: np.random.Generator) -> None:
    # Major duodenal papilla: a small nipple-like bump with a pinpoint orifice, under a
    # hooding longitudinal fold.
    cx, cy = _central(lr, 0.15)
    rad = lr.uniform(0.08, 0.14)
    th = lr.uniform(0, np.pi)
    nx, ny = -np.sin(th), np.cos(th)  # normal to the fold's long axis
    fold = _blob(c, cx + 0.9 * rad * nx, cy + 0.9 * rad * ny, rad * 3.0, rad * 0.6, th,
                 rough=0.05, soft=0.4)
    if fold is not None:
        win, m, d = fold
        c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.1
    bl = _blob(c, cx, cy, rad, rad * 0.85, th, soft=0.2)
    if bl is None:
        return
    win, m, d = bl
    _mix(c, win, m, np.array([0.92, 0.62, 0.50], np.float32), strength=0.6)
    c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.2
    hole = np.clip((0.22 - d) / 0.08, 0.0, 1.0)
    c.Sh[win] *= 1.0 - 0.85 * hole


def _paint_zline(c: _Ctx, lr: np.random.Generator) -> None:
    # Squamocolumnar junction: pale oesophageal mucosa outside, red-orange gastric mucosa
    # inside an irregular ring around the lumen.
    cx, cy = _central(lr, 0.15)
    r0 = lr.uniform(0.3, 0.5)
    th = np.arctan2(c.y - cy, c.x - cx)
    dl = np.hypot(c.x - cx, c.y - cy) * (1.0 + 0.18 * np.cos(5 * th + 2.0 * c.f["warp"]))
    inner = np.clip((r0 - dl) / 0.05 + 0.5, 0.0, 1.0)
    gastric = np.array([0.93, 0.45, 0.34], np.float32)
    c.A[:] = c.A * (1.0 - inner[..., None]) + gastric * inner[..., None]


def _paint_no_view(c: _Ctx, lr: np.random.Generator) -> None:
    _paint_reduced_view(c, lr, severity=1.6)
    c.exposure *= 0.5


_PAINTERS = {
    "Angiectasia": _paint_angiectasia,
    "Blood - fresh": _paint_blood_fresh,
    "Blood - hematin": _paint_hematin,
    "Erosion": _paint_erosion,
    "Erythema": _paint_erythema,
    "Foreign Body": _paint_foreign_body,
    "Lymphangiectasia": _paint_lymphangiectasia,
    "Polyp": _paint_polyp,
    "Ulcer": lambda c, lr: _paint_erosion(c, lr, ulcer=True),
    "Reduced Mucosal View": _paint_reduced_view,
    "Pylorus": _paint_pylorus,
    "Ileocecal valve": _paint_ileocecal_valve,
    "Ampulla of Vater": _paint_ampulla,
    "z-line": _paint_zline,
    "no view": _paint_no_view,
}
# Geometry first (landmarks), then lesions on the mucosa, then what hides the mucosa.
_ORDER = {
    "Pylorus": 0, "Ileocecal valve": 0, "Ampulla of Vater": 0, "z-line": 0,
    "Reduced Mucosal View": 3, "no view": 3,
}


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
    unknown = [f for f in findings if f not in _FINDING_CODE]
    if unknown:
        raise ValueError(f"unknown finding(s) {unknown}; known: {list(FINDINGS)}")
    c = _Ctx(scene, t)
    _base(c, scene, look)
    base_rng = np.random.default_rng([scene.layout_seed, 0])
    n_debris = int(base_rng.poisson(look.debris * (1.6 if scene.section == "colon" else 0.6)))
    _debris(c, base_rng, n_debris)
    for fnd in sorted(findings, key=lambda f: _ORDER.get(f, 1)):
        painter = _PAINTERS.get(fnd)
        if painter is not None:
            lr = np.random.default_rng([scene.layout_seed, _FINDING_CODE[fnd]])
            painter(c, lr)
    clean = "Normal clean mucosa" in findings
    n_bub = int(base_rng.poisson(look.bubbles * (0.5 if clean else 1.0)))
    if n_bub:
        _bubbles(c, base_rng, n_bub)

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
    sh = np.clip(c.Sh, 1e-4, None)[..., None] ** _SHADOW_EXP
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
