"""What a reader of a whole capsule exam looks at first (``pipi predict``): per video, the
findings timeline (each class's probability against the frame index) and the frames the model
is surest about, per class."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipi.predictions import prob_columns_of
from pipi.report.png import COLORS, fixed_png

__all__ = ["findings_timeline", "top_frames"]

#: A class is drawn on the timeline when some frame gives it at least this probability.
SHOWN_AT = 0.5


def findings_timeline(df: pd.DataFrame, names: tuple[str, ...], *, video: str,
                      classes: int = 6) -> bytes:
    """PNG of one video's class probabilities against the frame index: the ``classes``
    classes with the highest peak probability (those reaching :data:`SHOWN_AT` drawn solid)."""
    rows = df[df["video_id"].astype(str) == str(video)].sort_values("frame_number")
    cols = prob_columns_of(rows)
    probs = rows[list(cols)].to_numpy(np.float64)
    peak = probs.max(0) if len(rows) else np.zeros(len(cols))
    order = np.argsort(-peak, kind="stable")[:classes]
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_axes((0.07, 0.16, 0.66, 0.74))
    x = rows["frame_number"].to_numpy()
    for k, c in enumerate(order):
        ax.plot(x, probs[:, c], lw=1.0, color=COLORS[c % len(COLORS)],
                ls="-" if peak[c] >= SHOWN_AT else ":",
                label=f"{names[c]} (peak {peak[c]:.2f})")
    ax.set_ylim(0, 1)
    ax.set_xlabel("frame index")
    ax.set_ylabel("probability")
    ax.set_title(f"video {video}: {len(rows)} frames", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fixed_png(fig, dpi=100)


def top_frames(df: pd.DataFrame, names: tuple[str, ...], *, k: int = 5) -> pd.DataFrame:
    """Per video and class, the ``k`` frames with the highest probability of that class:
    ``video_id``, ``class``, ``rank`` (1 = surest), ``frame_number``, ``path``,
    ``probability``."""
    cols = prob_columns_of(df)
    out = []
    for video, rows in df.groupby(df["video_id"].astype(str), sort=True):
        for c, col in enumerate(cols):
            best = rows.nlargest(k, col)
            out.append(pd.DataFrame({
                "video_id": video, "class": names[c], "rank": np.arange(1, len(best) + 1),
                "frame_number": best["frame_number"].to_numpy(), "path": best["path"].to_numpy(),
                "probability": best[col].to_numpy(np.float64)}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        columns=["video_id", "class", "rank", "frame_number", "path", "probability"])
