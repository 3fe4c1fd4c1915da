"""What the registered models accept: images and clips from a request, checked before use.

One function per input shape, each returning plain ``uint8`` arrays or raising
:class:`InputError` (a ``DataError``) with one line that names the offending image and what
to send instead. The pyfunc flavour (``pipi.tracking.pyfunc``) turns that line into an HTTP
400; nothing is ever cast silently.

Accepted forms of one image:

* ``uint8`` ``H x W x 3`` RGB;
* any integer array with every value in [0, 255] (JSON numbers arrive as int64);
* a float array with every value in [0, 1], converted explicitly as ``round(255 * x)``
  (the documented float form; values above 1, NaN or inf are refused, never wrapped);
* a base64 string (or bytes) of a JPEG or PNG file, optionally as a ``data:image/...;base64,``
  URI. A 16-bit PNG is scaled to 8 bits (``round(255 * v / 65535)``; grayscale becomes three
  equal channels), never clipped.

Refused: another rank or channel count, bool or complex arrays, a side under
:data:`MIN_SIDE` pixels (a 1 x 1 "image" would get a confident prediction), more pixels than
``PIPI_SERVE_MAX_PIXELS`` per image, more images than ``PIPI_SERVE_MAX_IMAGES`` per request,
an empty request.

A batch is a DataFrame with an ``image`` column (base64 strings: the registered model's
signature; ``dataframe_records``) or a ``pixels`` column (arrays: the signature's array form),
a mapping ``{"image": [...]}`` / ``{"pixels": [...]}`` (``inputs``), a 4-D array, an object
array / list of images of different sizes, or a single image (the last three in process, on
a model without an input schema).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from PIL import Image, UnidentifiedImageError

from pipi.data.cache import decode_at
from pipi.errors import DataError

__all__ = ["IMAGE_KEY", "MIN_SIDE", "PIXELS_KEY", "InputError", "Limits", "check_image", "clips_from_input", "decode_file",
           "decode_image", "encode_image", "encode_png", "images_from_input"]

#: Column (``dataframe_records``) or key (``inputs``) that holds the images of a request.
IMAGE_KEY = "image"
#: Column / key of the array form: each value one ``H x W x 3`` image as nested lists.
PIXELS_KEY = "pixels"
#: Smallest accepted image side in pixels (the smallest training size is 16).
MIN_SIDE = 16
FORMATS = ("JPEG", "PNG")


class InputError(DataError):
    """A request the model refuses (the message is one line, safe to return to a client)."""


class Limits:
    """Per-request limits, read from the environment when the model is loaded, and the
    model's input size (``decode_size``): a JPEG is then decoded as the training cache decodes
    it (``pipi.data.cache.load_frame``: PIL's ``draft``, the smallest DCT scale that is at
    least that size), so a served file gets the pixels its run was evaluated on."""

    def __init__(self, *, max_images: int | None = None, max_pixels: int | None = None,
                 decode_size: int | None = None):
        self.max_images = max_images or int(os.environ.get("PIPI_SERVE_MAX_IMAGES", 256))
        self.max_pixels = max_pixels or int(os.environ.get("PIPI_SERVE_MAX_PIXELS", 4096 * 4096))
        self.decode_size = decode_size


def decode_image(data: str | bytes, *, where: str, limits: Limits) -> np.ndarray:
    """A base64 JPEG/PNG (or data URI) -> ``uint8`` ``H x W x 3`` RGB."""
    if isinstance(data, str):
        if data.startswith("data:"):
            data = data.partition(",")[2]
        data = data.encode("ascii", errors="replace")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{where}: not valid base64 (send the JPEG or PNG file's bytes "
                         "base64-encoded)") from None
    return decode_file(raw, where=where, limits=limits, after="after base64 decoding")


def decode_file(raw: bytes, *, where: str, limits: Limits, after: str = "") -> np.ndarray:
    """A JPEG/PNG file's bytes -> ``uint8`` ``H x W x 3`` RGB, as a request's image is
    decoded (``pipi predict`` reads frames from disk this way)."""
    try:
        with Image.open(io.BytesIO(raw)) as im:
            if im.format not in FORMATS:
                raise InputError(f"{where}: a {im.format} image; send JPEG or PNG")
            w, h = im.size
            _check_size(h, w, where=where, limits=limits)
            if limits.decode_size:
                decode_at(im, limits.decode_size)
            arr = _to_rgb8(im, where=where)
    except Image.DecompressionBombError as exc:
        # PIL refuses to even open it: its header declares more pixels than PIL's own guard
        m = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(m[1])} pixels" if m else "more pixels than PIL opens"
        raise InputError(f"{where}: an image of {size}, over the limit of {limits.max_pixels} "
                         "pixels per image (PIPI_SERVE_MAX_PIXELS)") from None
    except (UnidentifiedImageError, OSError, SyntaxError):
        raise InputError(f"{where}: not a JPEG or PNG image ({len(raw)} bytes"
                         + (f" {after}" if after else "") + ")") from None
    return arr


#: PIL modes of 16-bit (and 32-bit integer) grayscale PNGs
_WIDE_GRAY = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _to_rgb8(im: Image.Image, *, where: str) -> np.ndarray:
    """8-bit RGB. A 16-bit grayscale PNG is scaled (``round(255 * v / 65535)``), not clipped
    as ``convert("RGB")`` would (everything above 255 white); 16-bit RGB PNGs PIL already
    reads as 8-bit RGB (their high bytes)."""
    if im.mode in _WIDE_GRAY:
        a = np.asarray(im).astype(np.float64)
        if a.size and (a.min() < 0 or a.max() > 65535):
            raise InputError(f"{where}: a {im.mode} image with values outside 0..65535; send "
                             "8-bit or 16-bit JPEG or PNG")
        g = np.rint(a * (255.0 / 65535.0)).astype(np.uint8)
        return np.repeat(g[..., None], 3, axis=2)
    return np.asarray(im.convert("RGB"))


def encode_image(image: np.ndarray, *, fmt: str = "JPEG", quality: int = 95) -> str:
    """``uint8`` ``H x W x 3`` -> base64 string of a JPEG (or PNG) file: what a client sends."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buf, format=fmt, quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def encode_png(image: np.ndarray) -> str:
    """Lossless base64 form of an image (decodes back to the same pixels)."""
    return encode_image(image, fmt="PNG")


def _check_size(h: int, w: int, *, where: str, limits: Limits) -> None:
    if min(h, w) < MIN_SIDE:
        raise InputError(f"{where}: {h} x {w} pixels is too small to classify (at least "
                         f"{MIN_SIDE} x {MIN_SIDE})")
    if h * w > limits.max_pixels:
        raise InputError(f"{where}: {h} x {w} pixels is over the limit of {limits.max_pixels} "
                         "pixels per image (PIPI_SERVE_MAX_PIXELS)")


def check_image(a, *, where: str, limits: Limits) -> np.ndarray:
    """One image as a numeric array -> ``uint8`` ``H x W x 3`` (see the module docstring)."""
    if isinstance(a, (str, bytes)):
        return decode_image(a, where=where, limits=limits)
    try:
        a = np.asarray(a)
    except ValueError:
        raise InputError(f"{where}: ragged nested lists; each image must be H x W x 3") from None
    if a.dtype == object:
        try:
            a = np.asarray(a.tolist())
        except ValueError:
            raise InputError(f"{where}: ragged nested lists; each image must be H x W x 3") \
                from None
    if a.ndim != 3 or a.shape[-1] != 3:
        what = f"{a.shape[-1]} channels" if a.ndim == 3 else f"rank {a.ndim}"
        raise InputError(f"{where}: expected an H x W x 3 RGB image, got shape "
                         f"{tuple(a.shape)} ({what})")
    _check_size(a.shape[0], a.shape[1], where=where, limits=limits)
    kind = a.dtype.kind
    if a.dtype == np.uint8:
        return a
    if kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi > 255:
            raise InputError(f"{where}: integer values must lie in [0, 255], got [{lo}, {hi}]")
        return a.astype(np.uint8)
    if kind == "f":
        if not np.isfinite(a).all():
            raise InputError(f"{where}: contains NaN or infinite values")
        lo, hi = float(a.min()), float(a.max())
        if lo < 0.0 or hi > 1.0:
            raise InputError(f"{where}: float images must lie in [0, 1] (converted as "
                             f"round(255 * x)), got [{lo:g}, {hi:g}]; send uint8 for 0..255")
        return np.rint(a * 255.0).astype(np.uint8)
    raise InputError(f"{where}: dtype {a.dtype} is not an image; send uint8 RGB, floats in "
                     "[0, 1] or base64 JPEG/PNG strings")


def _column(model_input) -> Sequence:
    """The list of per-image items of a DataFrame / mapping input."""
    if isinstance(model_input, pd.DataFrame):
        cols = [c for c in (IMAGE_KEY, PIXELS_KEY) if c in model_input.columns]
        if len(cols) == 2:   # one image per row, in whichever column the row fills
            return [_one_of(b64, px, row=i) for i, (b64, px) in
                    enumerate(zip(model_input[IMAGE_KEY], model_input[PIXELS_KEY]))]
        if cols:
            return list(model_input[cols[0]])
        if model_input.shape[1] == 1:
            return list(model_input.iloc[:, 0])
        raise InputError(f"expected a column named {IMAGE_KEY!r} (base64) or {PIXELS_KEY!r} "
                         f"(arrays), got columns {list(model_input.columns)[:5]}")
    for key in (IMAGE_KEY, PIXELS_KEY):
        if key in model_input:
            return model_input[key]
    if len(model_input) == 1:
        return next(iter(model_input.values()))
    raise InputError(f"expected a key named {IMAGE_KEY!r} (base64) or {PIXELS_KEY!r} (arrays), "
                     f"got keys {list(model_input)[:5]}")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _one_of(b64, pixels, *, row: int):
    if _missing(b64) == _missing(pixels):
        raise InputError(f"row {row}: give the image in exactly one of {IMAGE_KEY!r} (base64) "
                         f"and {PIXELS_KEY!r} (array)")
    return pixels if _missing(b64) else b64


def _items(model_input) -> list:
    """Split a batch into its images (not yet checked)."""
    if isinstance(model_input, (pd.DataFrame, Mapping)):
        model_input = _column(model_input)
    if isinstance(model_input, (str, bytes)):
        return [model_input]
    if isinstance(model_input, np.ndarray):
        if model_input.dtype.kind in "USO" and model_input.ndim == 1:
            return list(model_input)                     # strings or a ragged batch
        if model_input.dtype.kind in "US" and model_input.ndim == 0:
            return [model_input.item()]
        if model_input.ndim == 3:
            return [model_input]
        if model_input.ndim == 4:
            return list(model_input)
        raise InputError(f"expected H x W x 3 or B x H x W x 3 images, got an array of shape "
                         f"{tuple(model_input.shape)}")
    if isinstance(model_input, (list, tuple)):
        return list(model_input)
    raise InputError(f"cannot read images from a {type(model_input).__name__}; send uint8 "
                     "arrays or base64 JPEG/PNG strings")


def images_from_input(model_input, *, limits: Limits | None = None) -> list[np.ndarray]:
    """Every image of a request as ``uint8`` ``H x W x 3`` (InputError on the first bad one)."""
    limits = limits or Limits()
    items = _items(model_input)
    if not items:
        raise InputError("the request holds no image")
    if len(items) > limits.max_images:
        raise InputError(f"{len(items)} images in one request; the limit is "
                         f"{limits.max_images} (PIPI_SERVE_MAX_IMAGES)")
    return [check_image(x, where=f"image {i}", limits=limits) for i, x in enumerate(items)]


def clips_from_input(model_input, *, max_frames: int, limits: Limits | None = None
                     ) -> list[list[np.ndarray]]:
    """Clips of consecutive frames: one clip ``T x H x W x 3``, a batch ``B x T x H x W x 3``,
    or a list of clips of different lengths (each a list or array of frames, or base64
    strings); ``1 <= T <= max_frames``."""
    limits = limits or Limits()
    if isinstance(model_input, (pd.DataFrame, Mapping)):
        model_input = _column(model_input)
    if isinstance(model_input, np.ndarray) and model_input.dtype.kind not in "USO":
        if model_input.ndim == 4:
            model_input = [model_input]
        elif model_input.ndim != 5:
            raise InputError(f"expected a clip T x H x W x 3 or clips B x T x H x W x 3, got "
                             f"an array of shape {tuple(model_input.shape)}")
    if isinstance(model_input, np.ndarray) and model_input.dtype.kind in "US":
        model_input = [model_input]          # one clip of base64 frames
    if not isinstance(model_input, (list, tuple, np.ndarray)):
        raise InputError(f"cannot read clips from a {type(model_input).__name__}")
    clips = list(model_input)
    if not clips:
        raise InputError("the request holds no clip")
    if all(isinstance(c, (str, bytes)) for c in clips):
        clips = [clips]                      # one clip given as a list of base64 frames
    out, total = [], 0
    for b, clip in enumerate(clips):
        frames = list(clip) if not isinstance(clip, np.ndarray) or clip.ndim in (1, 4) \
            else None
        if frames is None:
            raise InputError(f"clip {b}: expected T x H x W x 3 frames, got shape "
                             f"{tuple(clip.shape)}")
        if not 1 <= len(frames) <= max_frames:
            raise InputError(f"clip {b}: {len(frames)} frames; a clip holds 1 to {max_frames} "
                             "consecutive frames of one video")
        total += len(frames)
        if total > limits.max_images:
            raise InputError(f"more than {limits.max_images} frames in one request "
                             "(PIPI_SERVE_MAX_IMAGES)")
        out.append([check_image(f, where=f"clip {b} frame {t}", limits=limits)
                    for t, f in enumerate(frames)])
    return out
