"""Outside checkpoints: a torchvision classifier's state dict loaded into a pipi frame model.

A released checkpoint is the state dict of a torchvision model whose last Linear has 14
outputs (``efficientnet_b0``: ``classifier.1``, ``resnet18``: ``fc``, ``convnext_tiny``:
``classifier.2``), often saved from a wrapper: every key may start with ``module.``
(DataParallel / DDP), ``model.`` (a Lightning-style module) or ``_orig_mod.``
(``torch.compile``). The first convolution takes 3 channels (RGB cells) or 5 (RGB +
P_blood + Phi). pipi's own key names (``backbone.body.*``, ``head.*``) are accepted too.
A ``distill`` checkpoint may carry pipi's auxiliary decoder (``aux.*``); without it the
decoder keeps its initial weights (it is not used at deployment).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from pipi.errors import DataError, reason_of

__all__ = ["HEAD_KEYS", "WRAPPER_PREFIXES", "load_external_state", "read_state_dict"]

#: The torchvision module whose Linear is the classifier head, per architecture.
HEAD_KEYS: dict[str, str] = {"efficientnet_b0": "classifier.1", "resnet18": "fc",
                             "convnext_tiny": "classifier.2"}
#: Prefixes a wrapper puts before every key (stripped, repeatedly, when all keys have one).
WRAPPER_PREFIXES: tuple[str, ...] = ("module.", "model.", "_orig_mod.")
#: Entries of a checkpoint dict that hold the state dict (first found wins).
_CONTAINERS = ("state_dict", "model_state_dict", "model", "net")
#: At most this many keys of each kind are named in an error.
_SHOWN = 40


def read_state_dict(path: Path) -> dict[str, Tensor]:
    """The tensors of a torch save file: a state dict, or a checkpoint dict holding one."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for unreadable files
        first = reason_of(exc)
        if "weights only load failed" in first.lower():  # torch's advice would load code
            first = "not a torch save file holding only tensors"
        raise DataError(f"{path}: cannot read it as a torch state dict ({type(exc).__name__}: "
                        f"{first}); pass a file saved with torch.save(model.state_dict(), "
                        "path)") from None
    if isinstance(obj, Mapping) and not all(isinstance(v, Tensor) for v in obj.values()):
        for key in _CONTAINERS:
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, Tensor)
                                                            for v in inner.values()):
                obj = inner
                break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, Tensor)
                                                          for v in obj.values()):
        raise DataError(f"{path}: holds no state dict (a mapping of parameter names to tensors, "
                        f"or a checkpoint dict with one under {' / '.join(_CONTAINERS)})")
    return {str(k): v for k, v in obj.items()}


def _strip_wrappers(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if all(k.startswith(prefix) for k in sd):
                sd = {k[len(prefix):]: v for k, v in sd.items()}
                changed = True
    return sd


def _to_pipi_names(sd: dict[str, Tensor], arch: str) -> dict[str, Tensor]:
    """torchvision key names -> pipi frame model names (pipi's own names stay)."""
    if any(k.startswith("backbone.body.") for k in sd):
        return sd
    head = HEAD_KEYS[arch] + "."
    out = {}
    for k, v in sd.items():
        if k.startswith(head):
            out["head." + k[len(head):]] = v
        elif k.startswith("aux."):
            out[k] = v
        else:
            out["backbone.body." + k] = v
    return out


def _named(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return f"[{shown}{f', ... and {len(keys) - _SHOWN} more' if len(keys) > _SHOWN else ''}]"


def load_external_state(model: nn.Module, sd: Mapping[str, Tensor], *, arch: str,
                        cell: str, source: str) -> dict[str, str]:
    """Load an outside state dict into ``model`` (a pipi frame model of ``arch``).

    Returns facts for the run's tags (``key_form``: the wrapper prefix found, ``aux_head``
    for ``distill``). Raises one :class:`DataError` naming every key that does not match
    (missing and unexpected, with pipi's name and the file's), or the first convolution
    whose input channels differ from what ``cell`` needs, or a shape that differs.
    """
    raw = dict(sd)
    stripped = _strip_wrappers(raw)
    prefix = next(iter(raw))[: len(next(iter(raw))) - len(next(iter(stripped)))]
    theirs = _to_pipi_names(stripped, arch)
    expected = model.state_dict()
    optional = {k for k in expected if k.startswith("aux.")}  # distill's decoder
    missing = [k for k in expected if k not in theirs and k not in optional]
    unexpected = [k for k in theirs if k not in expected]
    if missing or unexpected:
        back = {pipi: orig for orig, pipi in zip(stripped, theirs, strict=True)}
        parts = []
        if missing:
            parts.append(f"missing {len(missing)}: {_named([_tv(k, arch) for k in missing])}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)}: "
                         f"{_named([prefix + back.get(k, k) for k in unexpected])}")
        raise DataError(f"{source}: the keys do not match the {arch} model of cell {cell} "
                        f"(torchvision names, {HEAD_KEYS[arch]} the 14-class head; prefix "
                        f"{prefix or 'none'}): " + "; ".join(parts))
    conv = next(k for k in expected if k.endswith(".weight") and expected[k].ndim == 4)
    want, got = expected[conv].shape[1], theirs[conv].shape[1]
    if want != got:
        what = "RGB" if want == 3 else "RGB + P_blood + Phi"
        raise DataError(f"{source}: its first convolution ({_tv(conv, arch)}) takes {got} input "
                        f"channels; cell {cell} needs {want} ({what}): pass the cell the "
                        "checkpoint was trained as")
    shapes = [k for k in expected if k in theirs and theirs[k].shape != expected[k].shape]
    if shapes:
        detail = ", ".join(f"{_tv(k, arch)} file {tuple(theirs[k].shape)} model "
                           f"{tuple(expected[k].shape)}" for k in shapes[:5])
        raise DataError(f"{source}: {len(shapes)} tensors have another shape than the {arch} "
                        f"model of cell {cell} (14 classes): {detail}")
    model.load_state_dict({**{k: v for k, v in expected.items() if k in optional},
                           **theirs}, strict=True)
    pipi_names = any(k.startswith("backbone.body.") for k in stripped)
    facts = {"key_form": (f"prefix {prefix}" if prefix else "no prefix") + ", "
                         + ("pipi" if pipi_names else "torchvision") + " names"}
    if optional:
        have = optional & set(theirs)
        facts["aux_head"] = ("loaded" if have == optional else "partly loaded" if have
                             else "absent (initial weights; unused at deployment)")
    return facts


def _tv(key: str, arch: str) -> str:
    """A pipi key in torchvision's naming (for messages)."""
    if key.startswith("backbone.body."):
        return key[len("backbone.body."):]
    if key.startswith("head."):
        return HEAD_KEYS[arch] + "." + key[len("head."):]
    return key
