"""Painters of the procedural frame renderer (:mod:`pipi.data.synth.render`).

Debris and bubbles, and one painter per finding (``PAINTERS``, applied in ``PAINT_ORDER``), each
drawing its class signature into the albedo, shading and specular fields of a
:mod:`pipi.data.synth.scene` painting context.
"""

from __future__ import annotations

import numpy as np

from pipi.data.synth.scene import (
    ANGIO,
    BLOOD,
    CHYLE,
    CLOT,
    DEBRIS,
    ERYTHEMA,
    FIBRIN,
    HEMATIN,
    INFLAMED,
    METAL,
    PLASTIC,
    TURBID,
    PaintContext,
    blob,
    mix,
)

# --------------------------------------------------------------------------------------------
# Debris and bubbles
# --------------------------------------------------------------------------------------------


def paint_debris(c: PaintContext, lr: np.random.Generator, n: int, *, big: bool = False) -> None:
    """Brown-green particles (food residue, faeces) floating on the mucosa."""
    cover = 0.0
    for _ in range(n):
        cx, cy = lr.uniform(-0.9, 0.9, 2)
        rad = lr.uniform(0.04, 0.16 if big else 0.09)
        bl = blob(c, cx, cy, rad, rad * lr.uniform(0.4, 1.0), lr.uniform(0, np.pi),
                   rough=0.35, soft=0.25, field_name="mid2")
        if bl is None:
            continue
        win, m, _ = bl
        tone = DEBRIS * lr.uniform(0.7, 1.25)
        mix(c, win, m, tone)
        c.Sh[win] *= 1.0 - 0.25 * m * (0.5 + 0.5 * c.f["hi"][win])
        cover += float(m.sum())
    c.debris_cover += cover / c.side**2


def paint_bubbles(c: PaintContext, lr: np.random.Generator, n: int, *, rmax: float = 0.14) -> None:
    """Gas bubbles: a thin bright rim, a darker edge line, a specular dot; slightly milky."""
    specs = []
    for _ in range(n):
        cx, cy = lr.uniform(-0.85, 0.85, 2)
        rad = lr.uniform(0.03, rmax)
        specs.append((cx, cy, rad, lr.uniform(-0.6, -0.2), lr.uniform(-0.6, -0.2)))
        c.bubble_cover += np.pi * rad * rad / 4.0

    def apply(c: PaintContext, img: np.ndarray) -> None:
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


def _paint_blood_fresh(c: PaintContext, lr: np.random.Generator) -> None:
    # A pool or stream of fresh blood covering a large central part of the view, in
    # blood-tinged luminal fluid that reddens the whole field.
    c.A[:] = c.A * np.float32(1.0 - (w := lr.uniform(0.2, 0.4))) + BLOOD * np.float32(w)
    cx, cy = _central(lr, 0.12)
    rx = lr.uniform(0.5, 0.8)
    parts = [(cx, cy, rx, rx * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi))]
    for _ in range(int(lr.integers(0, 3))):
        ang = lr.uniform(0, 2 * np.pi)
        parts.append((cx + 0.5 * rx * np.cos(ang), cy + 0.5 * rx * np.sin(ang),
                      lr.uniform(0.15, 0.35), lr.uniform(0.1, 0.25), ang))
    for px, py, ax, ay, th in parts:
        bl = blob(c, px, py, ax, ay, th, rough=0.3, soft=0.25)
        if bl is None:
            continue
        win, m, _ = bl
        clot = np.clip(0.5 + 0.8 * c.f["mid2"][win], 0.0, 1.0)[..., None]
        colour = BLOOD * (1.0 - 0.6 * clot) + CLOT * 0.6 * clot
        mix(c, win, m, colour)
        # A blood film hides the villi and reflects as a smooth wet surface.
        c.Sh[win] = c.Sh[win] * (1.0 - 0.6 * m) + 0.6 * m * (1.0 + 0.04 * c.f["lo"][win])
        c.spec[win] = np.maximum(
            c.spec[win], m * np.clip((c.f["spec"][win] - 1.7) / 0.5, 0.0, 1.0))
        c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_hematin(c: PaintContext, lr: np.random.Generator) -> None:
    # Altered blood: dark brown-black clumps and coffee-ground speckles.
    cx, cy = _central(lr, 0.25)
    for _ in range(int(lr.integers(3, 8))):
        px, py = cx + lr.normal(0, 0.25), cy + lr.normal(0, 0.25)
        rad = lr.uniform(0.06, 0.22)
        bl = blob(c, px, py, rad, rad * lr.uniform(0.5, 1.0), lr.uniform(0, np.pi),
                   rough=0.4, soft=0.3, field_name="mid2")
        if bl is None:
            continue
        win, m, _ = bl
        grain = np.clip(0.6 + 0.5 * c.f["hi"][win], 0.0, 1.0)[..., None]
        mix(c, win, m, HEMATIN * (0.7 + 0.6 * grain))
        c.lesion[win] = np.maximum(c.lesion[win], m)
    # Speckles around the clumps.
    bl = blob(c, cx, cy, 0.6, 0.6, rough=0.2, soft=0.4)
    if bl is not None:
        win, m, _ = bl
        sp = np.clip((c.f["spec"][win] - 1.0) / 0.3, 0.0, 1.0) * m
        mix(c, win, sp, HEMATIN)


def _paint_angiectasia(c: PaintContext, lr: np.random.Generator) -> None:
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
        halo = blob(c, px, py, rad * 1.7, rad * 1.7, rough=0.2, soft=0.8)
        if halo is not None:
            win, m, _ = halo
            mix(c, win, m, ERYTHEMA, strength=0.45)
        bl = blob(c, px, py, rad, rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi),
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
        colour = ANGIO * (1.0 - 0.3 * core) + np.array([0.74, 0.10, 0.09], np.float32) * 0.3 * core
        mix(c, win, mm, colour)
        c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_lymphangiectasia(c: PaintContext, lr: np.random.Generator) -> None:
    # Dilated lacteals: scattered white/creamy villous spots; no haemoglobin.
    cx, cy = _central(lr, 0.2)
    spread = lr.uniform(0.35, 0.65)
    region = blob(c, cx, cy, spread * 1.2, spread * 1.2, rough=0.2, soft=0.6)
    if region is not None:
        win, m, _ = region
        mix(c, win, m, CHYLE, strength=0.35)  # swollen, whitish villi
        c.lesion[win] = np.maximum(c.lesion[win], (m > 0.5).astype(np.float32))
    for _ in range(int(lr.integers(25, 70))):
        px, py = cx + lr.normal(0, spread * 0.6), cy + lr.normal(0, spread * 0.6)
        rad = lr.uniform(0.02, 0.06)
        bl = blob(c, px, py, rad, rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi),
                   rough=0.1, soft=0.4, field_name="hi")
        if bl is None:
            continue
        win, m, _ = bl
        mix(c, win, m, CHYLE * lr.uniform(0.95, 1.03))
        c.Sh[win] *= 1.0 + 0.12 * m  # raised spots catch light


def _paint_erosion(c: PaintContext, lr: np.random.Generator, *, ulcer: bool = False) -> None:
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
        outer = blob(c, px, py, rad * halo, ry * halo, th, rough=0.15, soft=0.7)
        if outer is not None:
            win, m, _ = outer
            mix(c, win, m, ERYTHEMA, strength=0.4 if ulcer else 0.25)
        rim = blob(c, px, py, rad * (1 + rim_w), ry * (1 + rim_w), th, rough=0.2, soft=0.3)
        if rim is not None:
            win, m, _ = rim
            mix(c, win, m, INFLAMED)
            c.lesion[win] = np.maximum(c.lesion[win], m)
        base = blob(c, px, py, rad, ry, th, rough=0.25, soft=0.25)
        if base is not None:
            win, m, d = base
            slough = np.clip(0.5 + 0.4 * c.f["hi"][win], 0.0, 1.0)[..., None]
            colour = FIBRIN * (0.92 + 0.1 * slough)
            mix(c, win, m, colour)
            if ulcer:  # crater: shadowed wall just inside the rim
                c.Sh[win] *= 1.0 - 0.3 * np.exp(-(((d - 0.85) / 0.15) ** 2))
            c.Sh[win] = c.Sh[win] * (1.0 - 0.5 * m) + 0.5 * m  # flat, no villi


def _paint_erythema(c: PaintContext, lr: np.random.Generator) -> None:
    # Diffuse, patchy redness of the mucosa (hyperaemia), villi intact.
    cx, cy = _central(lr, 0.25)
    for _ in range(int(lr.integers(1, 3))):
        rad = lr.uniform(0.35, 0.7)
        bl = blob(c, cx + lr.normal(0, 0.15), cy + lr.normal(0, 0.15), rad,
                   rad * lr.uniform(0.6, 1.0), lr.uniform(0, np.pi), rough=0.4, soft=0.6)
        if bl is None:
            continue
        win, m, _ = bl
        mott = np.clip(0.6 + 0.5 * c.f["mid2"][win], 0.2, 1.0)
        mix(c, win, m * mott, ERYTHEMA, strength=0.8)
        c.lesion[win] = np.maximum(c.lesion[win], (m > 0.5).astype(np.float32))


def _dome(d: np.ndarray) -> np.ndarray:
    """Shading of a hemispherical bump lit from the camera, ``d`` the normalised radius."""
    h = np.sqrt(np.clip(1.0 - d * d, 0.0, 1.0))
    return 0.55 + 0.45 * h


def _paint_polyp(c: PaintContext, lr: np.random.Generator) -> None:
    # A raised, lobulated mass: dome shading, a contact shadow, a specular cap.
    cx, cy = _central(lr, 0.2)
    rad = lr.uniform(0.24, 0.4)
    ry = rad * lr.uniform(0.75, 1.0)
    th = lr.uniform(0, np.pi)
    shadow = blob(c, cx + 0.04, cy + 0.05, rad * 1.25, ry * 1.25, th, soft=0.5)
    if shadow is not None:
        win, m, _ = shadow
        c.Sh[win] *= 1.0 - 0.4 * m
    bl = blob(c, cx, cy, rad, ry, th, rough=0.08, soft=0.15, field_name="mid2")
    if bl is None:
        return
    win, m, d = bl
    lobes = 1.0 + 0.12 * c.f["mid2"][win]
    tone = c.A[win].mean(axis=(0, 1)) * np.array([1.03, 0.9, 0.88], np.float32)
    mix(c, win, m, tone)
    shade = _dome(d) * lobes * (1.0 + 0.05 * c.f["hi"][win])
    c.Sh[win] = c.Sh[win] * (1.0 - m) + shade * m * 1.15
    hx, hy = cx - 0.35 * rad, cy - 0.35 * ry
    hl = np.exp(-((np.hypot(c.x[win] - hx, c.y[win] - hy) / (0.12 * rad)) ** 2))
    c.spec[win] = np.maximum(c.spec[win], hl * m)
    c.lesion[win] = np.maximum(c.lesion[win], m)


def _stadium(c: PaintContext, cx, cy, length, width, theta, extra=0.0):
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


def _paint_foreign_body(c: PaintContext, lr: np.random.Generator) -> None:
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
        colour = np.broadcast_to(PLASTIC, m.shape + (3,)).copy()
        dome = (a > length / 2 - width * 0.1)[..., None]
        colour = np.where(dome, np.array([0.25, 0.27, 0.3], np.float32), colour)
        mix(c, win, m, colour)
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
            mix(c, win, m, METAL)
            c.Sh[win] = c.Sh[win] * (1.0 - m) + m * (0.35 + 0.9 * cyl)
            c.spec[win] = np.maximum(c.spec[win], m * np.exp(-(((b + 0.2) / 0.3) ** 2)))
            c.lesion[win] = np.maximum(c.lesion[win], m)


def _paint_reduced_view(c: PaintContext, lr: np.random.Generator, *, severity: float = 1.0) -> None:
    # Turbid fluid, residue and bubbles hiding the mucosa; the scene is darker.
    f = c.f
    turbid = np.clip(0.55 + 0.35 * f["lo"] + 0.2 * f["mid"], 0.0, 1.0) * lr.uniform(0.5, 0.85)
    turbid = np.clip(turbid * severity, 0.0, 0.95)
    c.A[:] = c.A * (1.0 - turbid[..., None]) + TURBID * lr.uniform(0.8, 1.1) * turbid[..., None]
    c.Sh *= 1.0 - 0.3 * turbid
    c.exposure *= lr.uniform(0.4, 0.6) / max(severity, 1.0)
    paint_debris(c, lr, int(lr.integers(8, 20) * severity), big=True)
    paint_bubbles(c, lr, int(lr.integers(10, 30) * severity), rmax=0.16)


def _paint_pylorus(c: PaintContext, lr: np.random.Generator) -> None:
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


def _paint_ileocecal_valve(c: PaintContext, lr: np.random.Generator) -> None:
    # Two bulging, pale-yellow lips around a slit-like orifice.
    cx, cy = _central(lr, 0.15)
    th = lr.uniform(-0.5, 0.5)
    w = lr.uniform(0.35, 0.55)
    ct, st = np.cos(th), np.sin(th)
    lip_tone = np.array([0.93, 0.76, 0.56], np.float32)
    for sgn in (-1.0, 1.0):
        off = sgn * w * lr.uniform(0.3, 0.4)
        bl = blob(c, cx - off * st, cy + off * ct, w, w * lr.uniform(0.3, 0.42), th,
                   rough=0.06, soft=0.2, field_name="mid2")
        if bl is None:
            continue
        win, m, d = bl
        mix(c, win, m, lip_tone, strength=0.6)
        c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.15
    slit = blob(c, cx, cy, w * 0.8, w * lr.uniform(0.06, 0.12), th, rough=0.05, soft=0.3)
    if slit is not None:
        win, m, _ = slit
        c.Sh[win] *= 1.0 - 0.9 * m


def _paint_ampulla(c: PaintContext, lr: np.random.Generator) -> None:
    # Major duodenal papilla: a small nipple-like bump with a pinpoint orifice, under a
    # hooding longitudinal fold.
    cx, cy = _central(lr, 0.15)
    rad = lr.uniform(0.08, 0.14)
    th = lr.uniform(0, np.pi)
    nx, ny = -np.sin(th), np.cos(th)  # normal to the fold's long axis
    fold = blob(c, cx + 0.9 * rad * nx, cy + 0.9 * rad * ny, rad * 3.0, rad * 0.6, th,
                 rough=0.05, soft=0.4)
    if fold is not None:
        win, m, d = fold
        c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.1
    bl = blob(c, cx, cy, rad, rad * 0.85, th, soft=0.2)
    if bl is None:
        return
    win, m, d = bl
    mix(c, win, m, np.array([0.92, 0.62, 0.50], np.float32), strength=0.6)
    c.Sh[win] = c.Sh[win] * (1.0 - m) + m * _dome(d) * 1.2
    hole = np.clip((0.22 - d) / 0.08, 0.0, 1.0)
    c.Sh[win] *= 1.0 - 0.85 * hole


def _paint_zline(c: PaintContext, lr: np.random.Generator) -> None:
    # Squamocolumnar junction: pale oesophageal mucosa outside, red-orange gastric mucosa
    # inside an irregular ring around the lumen.
    cx, cy = _central(lr, 0.15)
    r0 = lr.uniform(0.3, 0.5)
    th = np.arctan2(c.y - cy, c.x - cx)
    dl = np.hypot(c.x - cx, c.y - cy) * (1.0 + 0.18 * np.cos(5 * th + 2.0 * c.f["warp"]))
    inner = np.clip((r0 - dl) / 0.05 + 0.5, 0.0, 1.0)
    gastric = np.array([0.93, 0.45, 0.34], np.float32)
    c.A[:] = c.A * (1.0 - inner[..., None]) + gastric * inner[..., None]


def _paint_no_view(c: PaintContext, lr: np.random.Generator) -> None:
    _paint_reduced_view(c, lr, severity=1.6)
    c.exposure *= 0.5


PAINTERS = {
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
PAINT_ORDER = {
    "Pylorus": 0, "Ileocecal valve": 0, "Ampulla of Vater": 0, "z-line": 0,
    "Reduced Mucosal View": 3, "no view": 3,
}
