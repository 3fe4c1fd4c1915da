"""The resumable checkpoint (``checkpoints/last.pt``): tensors and plain data only.

What a training loop saves each epoch (model, optimizer and scheduler state dicts, the best
epoch, the history, the RNG states as tensors, the configuration as a dict) is made of
tensors, numbers, strings, lists, tuples and dicts, so it is read back with
``torch.load(weights_only=True)``: a file replaced in the artifact store cannot run code in
the process that resumes from it, it is refused in one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipi.errors import DataError, reason_of

__all__ = ["plain_state", "read_checkpoint"]


def plain_state(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays made Python numbers and tensors, so that
    ``torch.load(weights_only=True)`` reads it back (it refuses numpy objects)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, Mapping):
        return {k: plain_state(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_state(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain_state(v) for v in obj)
    return obj


def read_checkpoint(path: Path, *, what: str) -> dict:
    """The checkpoint dict in ``path``, loaded without unpickling code; ``what`` names it in
    the one-line error (a file holding other objects, a truncated or corrupt file)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for unreadable files
        text = str(exc)
        if "weights only load failed" in text.lower():  # torch's advice would run the code
            found = re.search(r"GLOBAL ([\w.]+)", text)
            raise DataError(
                f"{what}: holds objects other than tensors and plain data"
                + (f" ({found.group(1)})" if found else "")
                + "; refused without loading them (a pipi checkpoint holds none: the file was "
                "replaced). Start a new run instead of resuming this one") from None
        raise DataError(f"{what}: cannot read it ({type(exc).__name__}: {reason_of(exc)}); "
                        "the file is truncated or corrupt. Start a new run instead of resuming "
                        "this one") from None
    if not isinstance(state, dict) or "config" not in state:
        raise DataError(f"{what}: not a pipi training checkpoint (no 'config' entry); start a "
                        "new run instead of resuming this one")
    return state
