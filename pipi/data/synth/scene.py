"""Scene primitives of the procedural frame renderer (:mod:`pipi.data.synth.render`).

What a frame can show (:data:`SECTIONS`, :data:`FINDINGS`), the reference colours, a
patient's appearance (:class:`Look`), the capsule optics (:class:`Optics`, :data:`OPTICS`), the
per-segment :class:`Scene` with its noise fields, and the painting context (``PaintContext``) with the
blob and blend helpers the painters of :mod:`pipi.data.synth.paint` draw with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from PIL import Image

from pipi.classes import CLASSES

__all__ = [
    "FINDINGS",
    "OPTICS",
    "SECTIONS",
    "Look",
    "Optics",
    "Scene",
    "new_scene",
    "random_look",
]

#: Anatomical sections (Galar's section columns), in the capsule's order of passage.
SECTIONS: tuple[str, ...] = ("mouth", "esophagus", "stomach", "small intestine", "colon")

#: Everything ``render_frame`` can draw: the 14 Kvasir classes plus Galar-only findings.
FINDINGS: tuple[str, ...] = (*CLASSES, "z-line", "no view")
FINDING_CODE = {f: i + 1 for i, f in enumerate(FINDINGS)}

# Reference colours (display-space reflectance, R G B). Haemoglobin absorbs G and B strongly.
BLOOD = np.array([0.62, 0.05, 0.04], np.float32)
CLOT = np.array([0.36, 0.03, 0.03], np.float32)
HEMATIN = np.array([0.20, 0.10, 0.06], np.float32)
ANGIO = np.array([0.86, 0.17, 0.14], np.float32)
INFLAMED = np.array([0.84, 0.24, 0.19], np.float32)
ERYTHEMA = np.array([0.90, 0.32, 0.25], np.float32)
FIBRIN = np.array([0.95, 0.90, 0.70], np.float32)
CHYLE = np.array([0.97, 0.95, 0.84], np.float32)  # lymph: white, creamy
BILE = np.array([0.74, 0.70, 0.20], np.float32)
DEBRIS = np.array([0.44, 0.38, 0.15], np.float32)
TURBID = np.array([0.52, 0.46, 0.22], np.float32)
PLASTIC = np.array([0.80, 0.81, 0.82], np.float32)
METAL = np.array([0.66, 0.68, 0.71], np.float32)
SHADOW_EXP = np.array([0.6, 1.0, 1.3], np.float32)


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


class PaintContext:
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


def blob(
    c: PaintContext, cx: float, cy: float, rx: float, ry: float, theta: float = 0.0,
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


def mix(c: PaintContext, win, m: np.ndarray, colour, strength: float = 1.0) -> None:
    """Blend the albedo towards ``colour`` (array (3,) or (h, w, 3)) under mask ``m``."""
    w = (m * strength)[..., None]
    c.A[win] = c.A[win] * (1.0 - w) + np.asarray(colour, np.float32) * w
