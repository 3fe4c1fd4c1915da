"""The report's palette and its two ways to turn a matplotlib figure into PNG bytes (Agg
canvas, no pyplot state). Its own module: a figure outside ``aggregate`` (``pipi predict``'s
timeline) needs these and not the analysis that :mod:`pipi.report.figures` draws."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

__all__ = ["COLORS", "figure_png", "fixed_png"]

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
          "#8c8c8c", "#ccb974", "#64b5cd", "#1b9e77", "#d95f02", "#7570b3", "#e7298a"]


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    """A PNG of ``fig`` cropped to what it draws (``bbox_inches="tight"``)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def fixed_png(fig: Figure, dpi: int) -> bytes:
    """An RGB PNG of a figure whose layout is fixed (margins set to hold every label): one
    Agg draw and one encoding, where ``bbox_inches="tight"`` measures the figure before
    drawing it and Agg's PNG is RGBA (a quarter more bytes on an opaque figure)."""
    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    buf = io.BytesIO()
    Image.fromarray(np.asarray(canvas.buffer_rgba())[..., :3]).save(buf, format="PNG")
    return buf.getvalue()
