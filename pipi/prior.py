"""Analytic optical prior: hemoglobin probability map ``P_blood`` and radial fluence ``Phi``.

Implements the paper's section "Analytic prior" (``sec:prior``) in pure torch, batched, on any
device, with no I/O:

* ``H = R / (R + G + B)`` per pixel (the published code's ``R / (G + B)`` behind
  ``hb_index="code"``; its scale-fixed "v2" prior behind ``hb_index="code_v2"``, below);
* ``H_norm``: ``H`` clipped per image to its 1st and 99th percentiles (linear interpolation,
  bit-identical to ``torch.quantile(..., interpolation="linear")``) and min-max rescaled to
  ``[0, 1]`` with those two bounds;
* ``P_blood = sigmoid(alpha * (H_norm - 0.5)) * Phi``;
* ``Phi(r) = exp(-r / lambda_eff)``, ``r`` the Euclidean distance in pixels from the image centre,
  ``lambda_eff = 0.25 x`` the image diagonal (the published code's ``log(G/B) * Phi`` second
  channel behind ``second_channel="log_gb_phi"``).

Conventions (not fixed by the paper, chosen here and tested):

* Pixel ``(i, j)`` sits at ``(i, j)``; the centre is ``((H - 1) / 2, (W - 1) / 2)`` and
  ``lambda_eff = 0.25 * sqrt(H**2 + W**2)``, as in the published implementation (79.2 px at
  224 x 224, the paper's "about 79"), so ``Phi = 1`` at the centre (odd sizes) and
  ``Phi = exp(-sqrt((H-1)**2 + (W-1)**2) / (0.5 * sqrt(H**2 + W**2)))``, slightly above
  ``e**-2``, in the corners.
* ``mask="fov"`` (not the published behaviour) takes the two percentiles over the field of view
  only: the pixels ``valid`` marks (the ones a zero-filled rotation did not create), or, without
  ``valid``, the pixels that are not black in all three channels.
* Division is made safe by clamping the paper index's denominator to at least ``EPS = 1e-6``:
  ``R / max(S, EPS)`` (a black pixel has ``H = 0``); every pixel whose denominator is at least
  ``EPS`` gets the exact formula. The published code's variants keep its own guard, ``EPS``
  added: ``R / (G + B + EPS)``, ``(R - G) / (R + G + EPS)``, ``log((G + EPS) / (B + EPS))``,
  so an imported checkpoint sees the inputs it was trained on.
* A flat ``H`` (99th minus 1st percentile at most ``EPS``, e.g. a constant or grey image, where
  ``R / (R + G + B)`` differs from 1/3 only by rounding) has no contrast to rescale, and
  rescaling would only amplify rounding noise; it gets the neutral ``H_norm = 0.5`` everywhere,
  so ``P_blood = Phi / 2``.

The published code's v2 prior (``hb_index="code_v2"``) has no per-image normalisation:
``P_blood = sigmoid(max(alpha, 6) * ((R - G) / (R + G + EPS) - 0.30)) * Phi`` (no clip, no mask).

The module also computes the C1 summary features of a ``P_blood`` map (``c1_features``): the
8 global scalars of the C1_8 cells and the 13-dimensional C1_13 form with 5 connected-component
topology features.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from scipy import ndimage

from pipi.errors import ConfigError
from pipi.options.prior import (  # noqa: F401 (the prior's options, re-exported)
    DEFAULT_ALPHA,
    HB_INDEX_NAMES,
    PRIOR_MASKS,
    SECOND_CHANNELS,
    PriorConfig,
    default_lambda,
)

__all__ = ["C1_8_NAMES", "C1_13_NAMES", "EPS", "PriorConfig", "c1_features",
           "clear_fluence_cache", "exact_quantile", "fluence_map", "prior_channels"]

#: Lower bound on every denominator (and on both arguments of ``log(G / B)``); also the largest
#: percentile span of ``H`` treated as flat.
EPS = 1e-6

#: Names of the 8 C1 summary scalars, in ``c1_features`` column order.
C1_8_NAMES: tuple[str, ...] = (
    "mean",
    "max",
    "top1pct_mean",
    "top5pct_mean",
    "center_max",
    "center_top1pct_mean",
    "frac_gt_0.5",
    "frac_gt_0.7",
)

#: Names of the 13 C1 features (the 8 scalars, then 5 blob-topology features of P_blood > 0.5).
C1_13_NAMES: tuple[str, ...] = C1_8_NAMES + (
    "blob_count",
    "largest_blob_area_frac",
    "largest_blob_center_dist",
    "largest_blob_log_aspect",
    "blob_size_entropy",
)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def _hb_paper(x: torch.Tensor) -> torch.Tensor:
    """``R / (R + G + B)`` of ``(B, 3, H, W)``, denominator clamped to ``EPS``."""
    return x[:, 0] / x.sum(1).clamp_min_(EPS)


def _hb_code(x: torch.Tensor) -> torch.Tensor:
    """``R / (G + B + EPS)`` (published code)."""
    return x[:, 0] / x[:, 1:].sum(1).add_(EPS)


def _hb_code_v2(x: torch.Tensor) -> torch.Tensor:
    """``(R - G) / (R + G + EPS)`` (published code's v2)."""
    return (x[:, 0] - x[:, 1]) / (x[:, 0] + x[:, 1]).add_(EPS)


#: Hemoglobin index variants: name -> f(x) for ``x`` ``(B, 3, H, W)``, returning ``(B, H, W)``.
HB_INDICES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "paper": _hb_paper,
    "code": _hb_code,
    "code_v2": _hb_code_v2,
}
#: Index -> (pivot, alpha floor): ``sigmoid(max(alpha, floor) * (H - pivot))``, no normalisation.
SCALE_FIXED: dict[str, tuple[float, float]] = {"code_v2": (0.30, 6.0)}

# --------------------------------------------------------------------------------------------
# Exact selection-based quantile
# --------------------------------------------------------------------------------------------


def _ranks(q: float, n: int, dtype: torch.dtype) -> tuple[int, int, torch.Tensor]:
    """Indices below/above and weight of quantile ``q`` of ``n`` values, as torch computes them."""
    # torch.quantile evaluates ``q * (n - 1)`` in the input dtype; do the same so that the
    # interpolation weight (and hence the result) is bit-identical.
    rank = torch.tensor(q, dtype=dtype) * (n - 1)
    below = int(torch.floor(rank).item())
    above = int(torch.ceil(rank).item())
    weight = rank - below
    return below, above, weight


def exact_quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """Row-wise linear-interpolation quantile by selection instead of a full sort.

    Equal (bit for bit on float32/float64) to
    ``torch.quantile(values, q, dim=-1, interpolation="linear")`` for finite input, but reads only
    the two neighbouring order statistics, found with ``torch.topk`` from whichever end of the
    distribution is nearer; falls back to a sort when ``q`` is near the median.

    Parameters
    ----------
    values : Tensor
        ``(B, N)`` floating-point, finite.
    q : float
        Quantile in ``[0, 1]``.

    Returns
    -------
    Tensor
        ``(B,)``, dtype and device of ``values``.
    """
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"values must have shape (B, N) with N >= 1, got {tuple(values.shape)}")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    n = values.shape[1]
    below, above, weight = _ranks(q, n, values.dtype)
    k_low = above + 1  # smallest k values contain order statistics `below` and `above`
    k_high = n - below  # largest k values contain them too
    if min(k_low, k_high) > max(64, n // 8):
        # Near the median selection loses to sorting.
        srt = torch.sort(values, dim=-1).values
        v_below, v_above = srt[:, below], srt[:, above]
    elif k_low <= k_high:
        sel = torch.topk(values, k_low, dim=-1, largest=False, sorted=True).values
        v_below, v_above = sel[:, below], sel[:, above]
    else:
        sel = torch.topk(values, k_high, dim=-1, largest=True, sorted=True).values
        v_below, v_above = sel[:, n - 1 - below], sel[:, n - 1 - above]
    return torch.lerp(v_below, v_above, weight.to(values.device))


# --------------------------------------------------------------------------------------------
# Prior channels
# --------------------------------------------------------------------------------------------


def _fov_quantiles(x: torch.Tensor, flat: torch.Tensor, valid: torch.Tensor | None,
                   qs: tuple[float, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-image quantiles of ``flat`` (B, N) over the field-of-view pixels only."""
    bsz = flat.shape[0]
    if valid is None:
        valid = x.amax(dim=1) > 0  # (B, H, W): not black in every channel
    valid = valid.reshape(bsz, -1).to(flat.device)
    if valid.shape != flat.shape:
        raise ValueError(f"valid must have shape (B, H, W) matching the images, got "
                         f"{tuple(valid.shape)} for {tuple(flat.shape)} values")
    empty = ~valid.any(dim=1)  # an all-black image: fall back to every pixel
    masked = flat.masked_fill(~(valid | empty[:, None]), float("nan"))
    q = torch.tensor(qs, dtype=flat.dtype, device=flat.device)
    out = torch.nanquantile(masked, q, dim=1, interpolation="linear")  # (2, B)
    return out[0], out[1]


@functools.lru_cache(maxsize=32)
def _fluence_cached(
    h: int, w: int, lam: float | None, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``Phi`` as an ``(H, W)`` tensor, computed in float64 then cast; cached, do not modify."""
    if lam is None:
        lam = default_lambda(h, w)
    ys = torch.arange(h, dtype=torch.float64) - (h - 1) / 2.0
    xs = torch.arange(w, dtype=torch.float64) - (w - 1) / 2.0
    r = torch.sqrt(ys[:, None] ** 2 + xs[None, :] ** 2)  # (H, W)
    if lam == 0.0:  # only a 1 x 1 image: r = 0 everywhere, Phi = 1
        phi = torch.ones_like(r)
    else:
        phi = torch.exp(-r / lam)
    return phi.to(device=device, dtype=dtype)


#: Empty the fluence cache (after a ``torch.export`` trace, which may leave traced maps in it).
clear_fluence_cache = _fluence_cached.cache_clear


def fluence_map(
    height: int,
    width: int,
    *,
    lambda_eff: float | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Radial fluence ``Phi(r) = exp(-r / lambda_eff)`` as a fresh ``(height, width)`` tensor.

    Parameters
    ----------
    height, width : int
        Image size in pixels (>= 1).
    lambda_eff : float or None
        Attenuation length in pixels; ``None``: 0.25 x the diagonal (module docstring: the
        corners get 0.1365 at 224 x 224, slightly above ``e**-2``). 1 x 1 gives ``Phi = 1``.
    device, dtype
        Where and how the map is returned.

    Returns
    -------
    Tensor
        ``(height, width)``.
    """
    if height < 1 or width < 1:
        raise ValueError(f"height and width must be >= 1, got {height} x {width}")
    PriorConfig(lambda_eff=lambda_eff)  # validates lambda_eff
    dev = torch.device(device) if device is not None else torch.device("cpu")
    lam = None if lambda_eff is None else float(lambda_eff)
    return _fluence_cached(int(height), int(width), lam, dev, dtype).clone()


def _check_rgb(rgb01: torch.Tensor) -> None:
    """Reject anything but finite float ``(B, 3, H, W)`` in ``[0, 1]``."""
    if not isinstance(rgb01, torch.Tensor):
        raise TypeError(f"rgb01 must be a torch.Tensor, got {type(rgb01).__name__}")
    if not rgb01.is_floating_point():
        raise ValueError(
            f"rgb01 must be a floating-point tensor scaled to [0, 1], got dtype {rgb01.dtype}; "
            "convert uint8 images with x.float() / 255"
        )
    if rgb01.ndim != 4 or rgb01.shape[1] != 3:
        raise ValueError(
            f"rgb01 must have shape (B, 3, H, W) or (3, H, W), got {tuple(rgb01.shape)}"
        )
    if rgb01.numel() == 0:
        raise ValueError(f"rgb01 is empty, shape {tuple(rgb01.shape)}")
    lo, hi = torch.aminmax(rgb01)
    lo, hi = float(lo), float(hi)
    if not (lo >= 0.0 and hi <= 1.0):  # also false for NaN
        raise ValueError(
            f"rgb01 values must be finite and in [0, 1], got min {lo} and max {hi}; "
            "scale images to [0, 1] before normalising for the backbone"
        )


def prior_channels(
    rgb01: torch.Tensor,
    *,
    alpha: float = DEFAULT_ALPHA,
    lambda_eff: float | None = None,
    clip: tuple[float, float] = (0.01, 0.99),
    hb_index: str = "paper",
    second_channel: str = "phi",
    mask: str = "none",
    valid: torch.Tensor | None = None,
    check: bool = True,
) -> torch.Tensor:
    """The two analytic prior channels ``(P_blood, Phi)`` of a batch of RGB frames.

    Parameters
    ----------
    rgb01 : Tensor
        ``(B, 3, H, W)`` or ``(3, H, W)``, floating point, values in ``[0, 1]``, any device.
    alpha : float
        Steepness of the logistic in ``P_blood``.
    lambda_eff : float or None
        Attenuation length of ``Phi`` in pixels; ``None``: 0.25 x the image diagonal.
    clip : tuple of float
        Per-image percentile bounds (fractions) of the hemoglobin index.
    hb_index : {"paper", "code", "code_v2"}
        ``R / (R + G + B)``, the published code's ``R / (G + B)`` or its v2 prior.
    second_channel : {"phi", "log_gb_phi"}
        Channel 1: ``Phi`` or the published code's ``log(G / B) * Phi``.
    check : bool
        Validate the values of ``rgb01`` (a device synchronisation); the training loop, whose
        augmentation clamps to ``[0, 1]``, turns it off so a GPU step never waits.

    Returns
    -------
    Tensor
        ``(B, 2, H, W)`` (``(2, H, W)`` for a single image), dtype and device of ``rgb01``.
        Channel 0 is ``P_blood = sigmoid(alpha * (H_norm - 0.5)) * Phi`` in ``[0, 1]``; channel 1
        is ``Phi`` (or ``log(G/B) * Phi``).

    Raises
    ------
    ConfigError
        An option is invalid.
    ValueError
        ``rgb01`` has the wrong shape, is not floating point, or has values outside ``[0, 1]``.

    Examples
    --------
    >>> x = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    >>> p = prior_channels(x)
    >>> tuple(p.shape)
    (2, 2, 224, 224)
    >>> round(float(p[0, 1, 0, 0]), 4)  # Phi in a corner: slightly above e**-2 = 0.1353
    0.1365
    """
    cfg = PriorConfig(
        alpha=alpha,
        lambda_eff=lambda_eff,
        clip=clip,
        hb_index=hb_index,
        second_channel=second_channel,
        mask=mask,
    )
    single = isinstance(rgb01, torch.Tensor) and rgb01.ndim == 3
    x = rgb01.unsqueeze(0) if single else rgb01
    if check:
        _check_rgb(x)
    out_dtype = x.dtype
    if x.dtype in (torch.float16, torch.bfloat16):  # selection and exp are done in float32
        x = x.float()
    bsz, _, h, w = x.shape
    n = h * w
    hb = HB_INDICES[cfg.hb_index](x)  # (B, H, W), fresh tensor
    phi = _fluence_cached(h, w, cfg.lambda_eff, x.device, x.dtype)  # (H, W), shared
    if cfg.hb_index in SCALE_FIXED:  # no per-image normalisation (published v2)
        pivot, floor = SCALE_FIXED[cfg.hb_index]
        hb.sub_(pivot).mul_(max(cfg.alpha, floor)).sigmoid_().mul_(phi)
        return _with_second(hb, phi, x, cfg, out_dtype, single)

    flat = hb.reshape(bsz, n)  # a copy only for non-contiguous (e.g. channels_last) input
    q_lo, q_hi = cfg.clip
    if cfg.mask == "fov":
        lo, hi = _fov_quantiles(x, flat, valid, (q_lo, q_hi))
    else:
        lo = exact_quantile(flat, q_lo)  # (B,)
        hi = exact_quantile(flat, q_hi)  # (B,)
    span = hi - lo
    is_flat = span <= EPS  # no contrast: rescaling would amplify rounding noise
    scale = cfg.alpha / torch.where(is_flat, torch.ones_like(span), span)  # (B,)
    lo3 = lo.view(bsz, 1, 1)
    # P_blood = sigmoid(alpha * ((clamp(H, lo, hi) - lo) / span - 0.5)) * Phi, in place on `hb`.
    hb.clamp_(min=lo3, max=hi.view(bsz, 1, 1))
    hb.sub_(lo3).mul_(scale.view(bsz, 1, 1)).sub_(0.5 * cfg.alpha)
    # Flat H: neutral H_norm = 0.5, i.e. a logistic argument of 0 (no test of is_flat.any(),
    # which would synchronise a GPU).
    hb.masked_fill_(is_flat.view(bsz, 1, 1), 0.0)
    hb.sigmoid_().mul_(phi)
    return _with_second(hb, phi, x, cfg, out_dtype, single)


def _with_second(hb: torch.Tensor, phi: torch.Tensor, x: torch.Tensor, cfg: PriorConfig,
                 out_dtype: torch.dtype, single: bool) -> torch.Tensor:
    """``(P_blood, second channel)`` as ``(B, 2, H, W)`` (``(2, H, W)`` for one image)."""
    bsz, _, h, w = x.shape
    out = torch.empty((bsz, 2, h, w), dtype=out_dtype, device=x.device)
    out[:, 0] = hb
    if cfg.second_channel == "phi":
        out[:, 1] = phi
    else:
        green, blue = x[:, 1], x[:, 2]
        out[:, 1] = torch.log((green + EPS) / (blue + EPS)).mul_(phi)  # published code's guard
    return out[0] if single else out


# --------------------------------------------------------------------------------------------
# C1 summary features
# --------------------------------------------------------------------------------------------


def _top_count(n: int, percent: int) -> int:
    """``max(1, ceil(n * percent / 100))`` in exact integer arithmetic."""
    return max(1, -(-n * percent // 100))


def _center_crop(h: int, w: int) -> tuple[slice, slice]:
    """Centred crop of half the height and width: ``max(1, H // 2)`` rows from ``(H - hc) // 2``."""
    hc, wc = max(1, h // 2), max(1, w // 2)
    top, left = (h - hc) // 2, (w - wc) // 2
    return slice(top, top + hc), slice(left, left + wc)


def _topology(mask: np.ndarray) -> tuple[float, float, float, float, float]:
    """The 5 blob features of one boolean ``(H, W)`` mask (see ``c1_features``)."""
    h, w = mask.shape
    labels, count = ndimage.label(mask, structure=np.ones((3, 3), dtype=bool))
    if count == 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    areas = np.bincount(labels.ravel(), minlength=count + 1)[1:].astype(np.float64)
    big = int(np.argmax(areas)) + 1  # first (raster-order) label among equal largest areas
    ys, xs = np.nonzero(labels == big)
    area_frac = areas[big - 1] / (h * w)
    half_diag = 0.5 * math.hypot(h - 1, w - 1)
    dist = math.hypot(ys.mean() - (h - 1) / 2.0, xs.mean() - (w - 1) / 2.0)
    dist = dist / half_diag if half_diag > 0 else 0.0
    bw = xs.max() - xs.min() + 1
    bh = ys.max() - ys.min() + 1
    log_aspect = math.log((bw + 1) / (bh + 1))
    if count > 1:
        p = areas / areas.sum()
        entropy = float(-(p * np.log(p)).sum())
    else:
        entropy = 0.0
    return float(count), float(area_frac), float(dist), float(log_aspect), entropy


def c1_features(p_blood: torch.Tensor, *, form: int = 8) -> torch.Tensor:
    """Global summary features of ``P_blood`` maps (the C1_8 and C1_13 parameterisations).

    The 8 scalars (``C1_8_NAMES``), per map of ``n = H * W`` pixels:

    0. mean; 1. max;
    2. mean of the top 1 % of pixels; 3. mean of the top 5 %: "top p %" is the
       ``k = max(1, ceil(p * n / 100))`` largest values (ties are values, so the choice among
       equal pixels does not matter);
    4. max and 5. top-1 % mean over the central region, the centred crop of
       ``hc = max(1, H // 2)`` rows starting at row ``(H - hc) // 2`` and likewise for columns
       (rows/cols 56:168 at 224 x 224), ``k`` counted on the crop's pixels;
    6. fraction of pixels ``> 0.5``; 7. fraction ``> 0.7`` (strict).

    ``form=13`` appends 5 topology features (``C1_13_NAMES``) of the connected components of
    the mask ``P_blood > 0.5`` under 8-connectivity (diagonal neighbours connect):

    8. blob count;
    9. largest blob's area / ``n``;
    10. distance of the largest blob's centroid (mean pixel coordinate) from the image centre
        ``((H-1)/2, (W-1)/2)``, divided by the half-diagonal ``sqrt((H-1)**2 + (W-1)**2) / 2``
        (0 for a 1 x 1 map);
    11. ``log((w + 1) / (h + 1))`` of the largest blob's bounding box, ``w`` and ``h`` its width
        and height in pixels (``max - min + 1``);
    12. Shannon entropy (natural log) of the blob areas divided by their sum; 0 with <= 1 blob.

    With no blob all five are 0. Among blobs of equal largest area the one whose first pixel
    comes first in raster order is taken. Connected components are labelled on the CPU with
    ``scipy.ndimage.label``; everything else stays on the input's device.

    Parameters
    ----------
    p_blood : Tensor
        ``(B, H, W)`` or ``(B, 1, H, W)``, floating point, values in ``[0, 1]``.
    form : {8, 13}
        Number of features.

    Returns
    -------
    Tensor
        ``(B, form)``, dtype and device of ``p_blood``, columns as ``C1_8_NAMES`` /
        ``C1_13_NAMES``.
    """
    if isinstance(form, bool) or form not in (8, 13):
        raise ConfigError(f"form must be 8 or 13, got {form!r}")
    if not isinstance(p_blood, torch.Tensor):
        raise TypeError(f"p_blood must be a torch.Tensor, got {type(p_blood).__name__}")
    if not p_blood.is_floating_point():
        raise ValueError(f"p_blood must be floating point, got dtype {p_blood.dtype}")
    if p_blood.ndim == 4 and p_blood.shape[1] == 1:
        p_blood = p_blood[:, 0]
    if p_blood.ndim != 3 or p_blood.numel() == 0:
        raise ValueError(
            f"p_blood must have shape (B, H, W) or (B, 1, H, W), non-empty; "
            f"got {tuple(p_blood.shape)}"
        )
    lo, hi = (float(v) for v in torch.aminmax(p_blood))
    if not (lo >= 0.0 and hi <= 1.0):
        raise ValueError(f"p_blood values must be finite and in [0, 1], got min {lo} max {hi}")

    bsz, h, w = p_blood.shape
    n = h * w
    flat = p_blood.reshape(bsz, n)
    rows, cols = _center_crop(h, w)
    center = p_blood[:, rows, cols].reshape(bsz, -1)
    top5 = torch.topk(flat, _top_count(n, 5), dim=-1).values  # sorted, descending
    k1 = _top_count(n, 1)  # <= the top-5 count, so a prefix of it
    feats = [
        flat.mean(-1),
        top5[:, 0],
        top5[:, :k1].mean(-1),
        top5.mean(-1),
        center.amax(-1),
        torch.topk(center, _top_count(center.shape[1], 1), dim=-1).values.mean(-1),
        (flat > 0.5).sum(-1).to(flat.dtype) / n,
        (flat > 0.7).sum(-1).to(flat.dtype) / n,
    ]
    out = torch.stack(feats, dim=1)  # (B, 8)
    if form == 13:
        masks = (flat > 0.5).view(bsz, h, w).cpu().numpy()
        topo = np.array([_topology(m) for m in masks], dtype=np.float64)  # (B, 5)
        topo_t = torch.as_tensor(topo, device=out.device).to(out.dtype)
        out = torch.cat([out, topo_t], dim=1)
    return out
