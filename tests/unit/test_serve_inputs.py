"""Serving inputs the probes broke (issue 24): 16-bit PNGs, a decompression bomb, JSON nested
too deeply. Files written the way other tools write them; the answers checked line by line."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from pipi.serving.guard import RequestGuard
from pipi.serving.model_input import InputError, Limits, decode_image


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png16_gray(values: np.ndarray) -> bytes:
    """A 16-bit grayscale PNG written by hand from the PNG specification (big-endian samples,
    filter byte 0 per row): not by PIL, which decodes it."""
    h, w = values.shape
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + values[r].astype(">u2").tobytes() for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(rows)) + _png_chunk(b"IEND", b""))


def test_a_16_bit_grayscale_png_is_scaled_to_8_bits_not_clipped():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 65536, (32, 40), dtype=np.uint32)
    values[0, :4] = [0, 257, 32768, 65535]
    got = decode_image(_b64(_png16_gray(values)), where="image 0", limits=Limits())
    expected = np.rint(values.astype(np.float64) * 255 / 65535).astype(np.uint8)
    assert got.shape == (32, 40, 3) and got.dtype == np.uint8
    assert (got == expected[..., None]).all()
    assert list(got[0, :4, 0]) == [0, 1, 128, 255]


def test_a_16_bit_rgb_png_keeps_its_colours():
    rgb16 = np.zeros((20, 20, 3), dtype=np.uint16)
    rgb16[..., 0] = 65535          # full red
    rgb16[..., 2] = 32896          # half blue (128 * 257)
    h, w, _ = rgb16.shape
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + rgb16[r].astype(">u2").tobytes() for r in range(h))
    raw = (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
           + _png_chunk(b"IDAT", zlib.compress(rows)) + _png_chunk(b"IEND", b""))
    got = decode_image(_b64(raw), where="image 0", limits=Limits())
    assert tuple(got[5, 5]) == (255, 0, 128)


def test_a_decompression_bomb_is_reported_as_too_many_pixels():
    # the header of a 20000 x 20000 RGB PNG: PIL refuses it on opening
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    raw = (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
           + _png_chunk(b"IDAT", zlib.compress(b"")) + _png_chunk(b"IEND", b""))
    with pytest.raises(InputError) as exc:
        decode_image(_b64(raw), where="image 3", limits=Limits())
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("image 3: an image of 400000000 pixels, over the limit of"), msg
    assert "PIPI_SERVE_MAX_PIXELS" in msg


def test_json_nested_too_deeply_is_a_400_in_one_line():
    """``pipi serve``'s request guard answers before the app behind it parses anything."""
    calls, sent = [], []

    async def app(scope, receive, send):
        calls.append(scope)

    body = b"[" * 200000 + b"]" * 200000

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/invocations",
             "headers": [(b"content-type", b"application/json")]}
    asyncio.run(RequestGuard(app)(scope, receive, send))
    assert sent[0]["status"] == 400 and (b"content-type", b"application/json") in sent[0]["headers"]
    doc = json.loads(sent[1]["body"])
    assert doc["error_code"] == "BAD_REQUEST" and "nested too deeply" in doc["message"]
    assert "\n" not in doc["message"] and not calls


def test_pil_writes_16_bit_gray_the_same_way():
    """The same scaling for a 16-bit PNG that PIL itself wrote (mode I;16)."""
    values = np.full((16, 16), 40000, dtype=np.uint16)
    buf = io.BytesIO()
    im = Image.fromarray(values)
    assert im.mode.startswith("I;16")
    im.save(buf, format="PNG")
    got = decode_image(_b64(buf.getvalue()), where="image 0", limits=Limits())
    assert (got == round(40000 * 255 / 65535)).all()


@pytest.mark.parametrize(("side", "size"), [(576, 224), (576, 64), (336, 64), (336, 224)])
def test_a_served_jpeg_gets_the_pixels_its_run_was_evaluated_on(tmp_path, side, size):
    """The training cache decodes a JPEG with PIL's draft (a DCT scale >= the model size) and
    then resizes; the served file must go the same way, or a Galar frame (576 px) at the
    paper's 224 px differs by up to 6 grey levels from what the run was scored on."""
    from pipi.data.cache import load_frame
    from pipi.serving.model_input import images_from_input
    from pipi.serving.sequence_clip import resize_batch

    rng = np.random.default_rng(side + size)
    y, x = np.mgrid[0:side, 0:side] / side
    img = np.stack([np.sin(7 * x + 3 * y) * 127 + 128, np.cos(5 * y) * 100 + 100, x * 255], -1)
    img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
    path = tmp_path / "frame.jpg"
    Image.fromarray(img).save(path, format="JPEG", quality=90)
    b64 = _b64(path.read_bytes())

    def served(limits):
        (arr,) = images_from_input({"image": [b64]}, limits=limits)
        return np.rint(resize_batch([arr], size)[0].numpy() * 255).astype(int)

    cached = load_frame(path, size).astype(int)
    np.testing.assert_array_equal(served(Limits(decode_size=size)), cached)
    if side // size >= 2:  # a DCT scale applies: a full decode would not match
        assert np.abs(served(Limits()) - cached).max() > 0
