"""Outside checkpoints: a torchvision classifier's state dict loaded into a pipi frame model.

A released checkpoint is the state dict of a torchvision model whose last Linear has one
output per class (Kvasir-Capsule's 14, or the staged data's class set; ``efficientnet_b0``:
``classifier.1``, ``resnet18``: ``fc``, ``convnext_tiny``: ``classifier.2``), often saved
from a wrapper: every key may start with ``module.`` (DataParallel / DDP), ``model.`` (a
Lightning-style module) or ``_orig_mod.`` (``torch.compile``). The first convolution takes 3
channels (RGB cells) or 5 (RGB + P_blood + Phi). pipi's own key names (``backbone.body.*``,
``head.*``) are accepted too. A ``distill`` checkpoint may carry pipi's auxiliary decoder
(``aux.*``); without it the decoder keeps its initial weights (it is not used at
deployment).

The published code's own checkpoints (``train_stage2_pi.py``: ``best_model.pt`` and the
per-epoch ``last_model.pt``) are a dict with the state dict of its ``ImageClassifierPI`` under
``model_state`` beside ``class_names`` (the output order: ImageFolder's sorted class folders),
``args`` (its command line) and training state; the keys are ``backbone.<torchvision key>``
(the classifier removed, ConvNeXt's LayerNorm2d kept) and ``head.1.*`` (``head`` is
``Sequential(Dropout, Linear)``). :func:`read_checkpoint` reads either form,
:func:`load_external_state` maps the keys and orders the head's rows by ``class_names``, and
:func:`file_settings` says what ``args`` fixes (backbone, image size, cell, prior).
Its distillation files (``train_stage2_pi_distill.py``) hold ``ImageClassifierPIDistill``:
``backbone.stem.*`` / ``backbone.body.*`` (ResNets: stem = conv1, bn1; body = layer1..4;
EfficientNet and ConvNeXt: body = ``features``), ``distill_decoder.*`` and ``head.1.*``; they
load as cell ``distill`` (the decoder, another form than pipi's, is not kept).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from pipi.classes import KVASIR, ClassSet
from pipi.errors import DataError, reason_of
from pipi.models.backbones import ARCHS

__all__ = ["HEAD_KEYS", "WRAPPER_PREFIXES", "ExternalCheckpoint", "file_settings",
           "load_external_state", "read_checkpoint", "read_state_dict"]

#: The torchvision module whose Linear is the classifier head, per architecture.
HEAD_KEYS: dict[str, str] = {"efficientnet_b0": "classifier.1", "resnet18": "fc",
                             "convnext_tiny": "classifier.2", "resnet50": "fc"}
#: The published code's classifier head (``Sequential(Dropout, Linear)``) and trunk prefix.
AUTHORS_HEAD, AUTHORS_TRUNK = "head.1.", "backbone."
#: The published distillation model's auxiliary decoder (3x3 conv, GELU, 3x3 conv, GELU, 1x1
#: conv; 64 channels): another form than pipi's, unused at deployment, so not kept.
AUTHORS_DECODER = "distill_decoder."
#: Where pipi's ``decoder=code`` model keeps the published decoder (models.heads.CodeDecoder).
CODE_DECODER = "aux.layers."
#: Prefixes a wrapper puts before every key (stripped, repeatedly, when all keys have one).
WRAPPER_PREFIXES: tuple[str, ...] = ("module.", "model.", "_orig_mod.")
#: Entries of a checkpoint dict that hold the state dict (first found wins).
_CONTAINERS = ("model_state", "state_dict", "model_state_dict", "model", "net")
#: At most this many keys of each kind are named in an error.
_SHOWN = 40


@dataclass(frozen=True)
class ExternalCheckpoint:
    """A torch save file read for import.

    Attributes
    ----------
    state : Mapping[str, Tensor]
        The state dict (the file itself, or its ``model_state`` / ``state_dict`` / ... entry).
    container : str
        The entry the state dict was under (``""``: the file is a bare state dict).
    class_names : tuple of str or None
        The file's output order (``class_names`` of the published layout), if it says one.
    args : Mapping
        The training arguments the file records (``args``; empty if none).
    """

    state: Mapping[str, Tensor]
    container: str = ""
    class_names: tuple[str, ...] | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


def _numpy_scalar_globals() -> list:
    """What a pickled numpy scalar needs (sklearn metrics in a checkpoint's ``history`` and
    ``best_val_macro_f1``): the scalar constructor, under numpy 1's and numpy 2's module
    names, and the plain numeric dtypes. No ndarray, no code."""
    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    dtypes = [type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32",
                                          "int16", "int8", "uint8", "bool")]
    return [(scalar, "numpy.core.multiarray.scalar"),
            (scalar, "numpy._core.multiarray.scalar"), np.dtype, *dtypes]


def _load(path: Path):
    try:
        with torch.serialization.safe_globals(_numpy_scalar_globals()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch's pickle advice would print before ours
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for unreadable files
        first = reason_of(exc)
        if "weights only load failed" in first.lower():  # torch's advice would load code
            first = "not a torch save file holding only tensors and plain data"
        raise DataError(f"{path}: cannot read it as a torch state dict ({type(exc).__name__}: "
                        f"{first}); pass a file saved with torch.save(model.state_dict(), "
                        "path)") from None


def _is_state(obj) -> bool:
    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, Tensor)
                                                          for v in obj.values())


def read_checkpoint(path: Path) -> ExternalCheckpoint:
    """Read a torch save file: a state dict, or a checkpoint dict holding one.

    Loaded with ``weights_only=True`` (tensors and plain data; numpy scalars allowed, nothing
    that runs code). Raises :class:`DataError` (one line) for an unreadable file, a file
    without a state dict, or ``class_names`` / ``args`` of the wrong type.
    """
    obj = _load(path)
    container = ""
    outer = obj if isinstance(obj, Mapping) else {}
    if isinstance(obj, Mapping) and not _is_state(obj):
        for key in _CONTAINERS:
            if _is_state(obj.get(key)):
                obj, container = obj[key], key
                break
    if not _is_state(obj):
        raise DataError(f"{path}: holds no state dict (a mapping of parameter names to tensors, "
                        f"or a checkpoint dict with one under {' / '.join(_CONTAINERS)})")
    names = outer.get("class_names") if container else None
    if names is not None and not (isinstance(names, (list, tuple))
                                  and all(isinstance(n, str) for n in names)):
        raise DataError(f"{path}: class_names must be a list of class names, got "
                        f"{type(names).__name__}")
    args = outer.get("args") if container else None
    if args is not None and not isinstance(args, Mapping):
        raise DataError(f"{path}: args must be a mapping of training arguments, got "
                        f"{type(args).__name__}")
    return ExternalCheckpoint({str(k): v for k, v in obj.items()}, container,
                              tuple(names) if names is not None else None, dict(args or {}))


def read_state_dict(path: Path) -> dict[str, Tensor]:
    """The tensors of a torch save file: a state dict, or a checkpoint dict holding one."""
    return dict(read_checkpoint(path).state)


#: ``physics_prior_version`` of the published code -> pipi's ``hb_index``.
CODE_PRIORS = {"v1": "code", "v2": "code_v2"}
#: ``ablate_input_channels`` of a +PI file (channels zeroed in training and test) -> cell.
ABLATED_CELLS = {"": "pi", "4": "pblood_only", "3": "phi_only"}
#: The published v2 prior's pivot and alpha floor (pipi.prior.SCALE_FIXED["code_v2"]).
CODE_V2_PIVOT, CODE_V2_MIN_ALPHA = 0.30, 6.0


def _number(args: Mapping, key: str, path: Path, *, positive: bool = True) -> float | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
            math.isfinite(float(value)) and (float(value) > 0 or not positive)):
        raise DataError(f"{path}: args.{key}={value!r} is not a positive number")
    return float(value)


def file_settings(ckpt: ExternalCheckpoint, path: Path) -> dict[str, Any]:
    """What a published checkpoint's ``args`` fixes, in pipi's option names.

    ``model_name`` -> ``backbone``, ``image_size``, ``use_physics_prior`` -> ``cell`` (``pi``
    or ``a``; ``pblood_only`` / ``phi_only`` when ``ablate_input_channels`` zeroed channel 4 /
    3), ``decoder=code`` for the published distillation layout (its decoder is kept) and,
    for a +PI file, the prior: ``hb_index`` (``code`` for
    ``physics_prior_version=v1``, ``code_v2`` for v2), ``second_channel=log_gb_phi``,
    ``alpha`` (``physics_alpha``; at least 6 for v2, as the code applies it) and
    ``lambda_eff`` (``physics_lambda_eff``; ``None`` is 0.25 x the diagonal). Keys the file
    does not give are absent. Raises :class:`DataError` for a value pipi cannot reproduce
    (an unknown backbone or prior version, a v2 pivot other than 0.30).
    """
    args, out = ckpt.args, {}
    if _is_authors_distill(_strip_wrappers(dict(ckpt.state))):
        out["decoder"] = "code"   # the published distillation layout: its decoder is kept
    if not args:
        return out
    name = args.get("model_name")
    if name is not None:
        if name not in ARCHS:
            raise DataError(f"{path}: args.model_name={name!r} is not a backbone pipi has "
                            f"({', '.join(ARCHS)})")
        out["backbone"] = name
    size = args.get("image_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 16:
            raise DataError(f"{path}: args.image_size={size!r} is not an integer >= 16")
        out["image_size"] = int(size)
    use = args.get("use_physics_prior")
    if use is None:
        if "distill_lambda" in args:   # train_stage2_pi_distill.py: 3-channel RGB + decoder
            out["cell"] = "distill"
        return out
    out["cell"] = "pi" if use else "a"
    if not use:
        return out
    ablate = str(args.get("ablate_input_channels") or "").replace(" ", "")
    if ablate not in ABLATED_CELLS:
        raise DataError(f"{path}: args.ablate_input_channels={ablate!r} has no pipi cell; "
                        f"pipi has {', '.join(f'{k!r} ({v})' for k, v in ABLATED_CELLS.items())}")
    out["cell"] = ABLATED_CELLS[ablate]
    version = args.get("physics_prior_version", "v1")
    if version not in CODE_PRIORS:
        raise DataError(f"{path}: args.physics_prior_version={version!r} is unknown; pipi "
                        f"reproduces the published code's {' and '.join(CODE_PRIORS)}")
    out["hb_index"] = CODE_PRIORS[version]
    out["second_channel"] = "log_gb_phi"
    alpha = _number(args, "physics_alpha", path)
    if alpha is None:
        alpha = 4.0  # the published code's default
    if version == "v2":
        pivot = _number(args, "physics_pivot_v2", path, positive=False)
        if pivot is not None and abs(pivot - CODE_V2_PIVOT) > 1e-12:
            raise DataError(f"{path}: args.physics_pivot_v2={pivot}; pipi's code_v2 prior has "
                            f"the published pivot {CODE_V2_PIVOT} only")
        alpha = max(alpha, CODE_V2_MIN_ALPHA)
    out["alpha"] = alpha
    out["lambda_eff"] = _number(args, "physics_lambda_eff", path)
    return out


def _strip_wrappers(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if all(k.startswith(prefix) for k in sd):
                sd = {k[len(prefix):]: v for k, v in sd.items()}
                changed = True
    return sd


def _is_authors(sd: Mapping[str, Tensor]) -> bool:
    """The published code's ImageClassifierPI keys: ``backbone.<tv key>`` and ``head.1.*``."""
    return (any(k.startswith(AUTHORS_HEAD) for k in sd)
            and not any(k.startswith("backbone.body.") for k in sd)
            and all(k.startswith((AUTHORS_TRUNK, AUTHORS_HEAD)) for k in sd))


def _is_authors_distill(sd: Mapping[str, Tensor]) -> bool:
    """The published code's ImageClassifierPIDistill keys: ``backbone.stem.*`` /
    ``backbone.body.*`` (a torchvision backbone split into stem, body and pool),
    ``distill_decoder.*`` and ``head.1.*`` (pipi's own distill model has ``head.weight``)."""
    return (any(k.startswith(AUTHORS_HEAD) for k in sd)
            and any(k.startswith(("backbone.body.", "backbone.stem.")) for k in sd)
            and all(k.startswith(("backbone.stem.", "backbone.body.", AUTHORS_HEAD,
                                  AUTHORS_DECODER)) for k in sd))


def _distill_tv_key(key: str, arch: str) -> str:
    """A published distillation trunk key as torchvision names it: ResNets' stem is
    ``Sequential(conv1, bn1, relu, maxpool)`` and body ``Sequential(layer1..layer4)``;
    EfficientNet's and ConvNeXt's body is ``features`` (no stem)."""
    part, _, rest = key.partition(".")
    index, _, tail = rest.partition(".")
    if arch.startswith("resnet"):
        if part == "stem":
            return {"0": "conv1", "1": "bn1"}.get(index, f"stem.{index}") + "." + tail
        return f"layer{int(index) + 1}.{tail}" if index.isdigit() else f"{part}.{rest}"
    return f"features.{rest}" if part == "body" else f"{part}.{rest}"


def _to_pipi_names(sd: dict[str, Tensor], arch: str) -> dict[str, Tensor]:
    """torchvision or published-code key names -> pipi frame model names (pipi's stay)."""
    if _is_authors_distill(sd):   # the decoder as -P decoder=code names it (aux.layers.*)
        return {("head." + k[len(AUTHORS_HEAD):] if k.startswith(AUTHORS_HEAD)
                 else CODE_DECODER + k[len(AUTHORS_DECODER):] if k.startswith(AUTHORS_DECODER)
                 else "backbone.body." + _distill_tv_key(k[len(AUTHORS_TRUNK):], arch)): v
                for k, v in sd.items()}
    if any(k.startswith("backbone.body.") for k in sd):
        return sd
    if _is_authors(sd):
        return {("head." + k[len(AUTHORS_HEAD):] if k.startswith(AUTHORS_HEAD)
                 else "backbone.body." + k[len(AUTHORS_TRUNK):]): v for k, v in sd.items()}
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


def _class_order(names: tuple[str, ...], source: str, classes: ClassSet = KVASIR) -> list[int]:
    """For each class of ``classes`` (the staged data's, in index order), the file's output
    row (``class_names`` matched by name, then by slug; Kvasir's set knows its aliases)."""
    def find(n: str) -> int | None:
        try:
            return classes.index(n)
        except KeyError:
            return None

    index = [find(n) for n in names]
    unknown = [n for n, k in zip(names, index, strict=True) if k is None]
    data = "pipi's" if classes.is_kvasir else "the staged data's"
    if unknown:
        lacks = "pipi does not know" if classes.is_kvasir else "the staged data does not have"
        raise DataError(f"{source}: class_names has classes {lacks}: {unknown}; {data} "
                        f"{len(classes)} classes: {list(classes.names)}")
    twice = sorted({names[i] for i, k in enumerate(index) if index.count(k) > 1})
    missing = [c for k, c in enumerate(classes.names) if k not in index]
    if twice or missing:
        raise DataError(f"{source}: class_names must name each of {data} {len(classes)} "
                        f"classes once; " + "; ".join(p for p in (
                            f"named twice: {twice}" if twice else "",
                            f"missing: {missing}" if missing else "") if p))
    return [index.index(k) for k in range(len(classes))]


def _named(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return f"[{shown}{f', ... and {len(keys) - _SHOWN} more' if len(keys) > _SHOWN else ''}]"


def load_external_state(model: nn.Module, sd: Mapping[str, Tensor], *, arch: str,
                        cell: str, source: str,
                        class_names: tuple[str, ...] | None = None,
                        classes: ClassSet = KVASIR) -> dict[str, str]:
    """Load an outside state dict into ``model`` (a pipi frame model of ``arch`` whose head
    predicts ``classes``, the staged data's class set: Kvasir-Capsule's 14 by default).

    ``class_names`` (the file's output order) reorders the head's rows into the order of
    ``classes`` (names matched by slug; an unknown, repeated or missing class is refused).
    Without it the head's rows are taken in that order, and must be as many.
    Returns facts for the run's tags (``key_form``: the wrapper prefix and key names found,
    ``class_order``, ``aux_head`` for ``distill``). Raises one :class:`DataError` naming every
    key that does not match (missing and unexpected, with pipi's name and the file's), or the
    first convolution whose input channels differ from what ``cell`` needs, or a shape that
    differs.
    """
    raw = dict(sd)
    stripped = _strip_wrappers(raw)
    prefix = next(iter(raw))[: len(next(iter(raw))) - len(next(iter(stripped)))]
    authors = _is_authors(stripped)
    distill = _is_authors_distill(stripped)
    if distill and arch == "convnext_tiny":
        raise DataError(f"{source}: the published code's ConvNeXt-Tiny distillation model pools "
                        "without ConvNeXt's final LayerNorm2d (its classifier is removed whole); "
                        "pipi's ConvNeXt keeps it, so the answers would differ: not imported")
    theirs = _to_pipi_names(stripped, arch)
    expected = model.state_dict()
    if distill and not any(k.startswith(CODE_DECODER) for k in expected):
        # a model with pipi's own decoder: the file's decoder has no place in it (not kept)
        stripped = {k: v for k, v in stripped.items() if not k.startswith(AUTHORS_DECODER)}
        theirs = {k: v for k, v in theirs.items() if not k.startswith(CODE_DECODER)}
    order = _class_order(class_names, source, classes) if class_names is not None else None
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
                        f"(torchvision names, {HEAD_KEYS[arch]} the {len(classes)}-class head; "
                        f"prefix {prefix or 'none'}): " + "; ".join(parts))
    conv = next(k for k in expected if k.endswith(".weight") and expected[k].ndim == 4)
    want, got = expected[conv].shape[1], theirs[conv].shape[1]
    if want != got:
        what = "RGB" if want == 3 else "RGB + P_blood + Phi"
        raise DataError(f"{source}: its first convolution ({_tv(conv, arch)}) takes {got} input "
                        f"channels; cell {cell} needs {want} ({what}): pass the cell the "
                        "checkpoint was trained as")
    rows = theirs["head.weight"].shape[0] if "head.weight" in theirs else len(classes)
    if order is not None and rows != len(class_names):
        raise DataError(f"{source}: its head has {rows} outputs but class_names names "
                        f"{len(class_names)} classes")
    if order is None and rows != len(classes):
        data = "pipi's Kvasir-Capsule" if classes.is_kvasir else "the staged data's"
        raise DataError(f"{source}: its head has {rows} outputs; {data} class set has "
                        f"{len(classes)} ({', '.join(classes.names)}); import it against data "
                        f"staged with its {rows} classes, or save class_names beside it")
    if order is not None:
        theirs = {**theirs, **{k: theirs[k][order] for k in ("head.weight", "head.bias")
                               if k in theirs}}
    shapes = [k for k in expected if k in theirs and theirs[k].shape != expected[k].shape]
    if shapes:
        detail = ", ".join(f"{_tv(k, arch)} file {tuple(theirs[k].shape)} model "
                           f"{tuple(expected[k].shape)}" for k in shapes[:5])
        raise DataError(f"{source}: {len(shapes)} tensors have another shape than the {arch} "
                        f"model of cell {cell} ({len(classes)} classes): {detail}")
    model.load_state_dict({**{k: v for k, v in expected.items() if k in optional},
                           **theirs}, strict=True)
    pipi_names = not distill and any(k.startswith("backbone.body.") for k in stripped)
    form = ("published distillation code (backbone.stem/body.*, distill_decoder.*, head.1.*)"
            if distill else "pipi" if pipi_names
            else "published code (backbone.*, head.1.*)" if authors else "torchvision")
    facts = {"key_form": (f"prefix {prefix}" if prefix else "no prefix") + f", {form} names",
             "class_order": ("the file's class_names" if order is not None
                             else "pipi's class order" if classes.is_kvasir
                             else "the staged data's class order")}
    if optional:
        have = optional & set(theirs)
        facts["aux_head"] = ("loaded" if have == optional else "partly loaded" if have
                             else "the file's decoder (distill_decoder.*) not kept: the model "
                             "has pipi's decoder (decoder=code keeps it); initial weights, "
                             "unused at deployment" if distill
                             else "absent (initial weights; unused at deployment)")
    return facts


def _tv(key: str, arch: str) -> str:
    """A pipi key in torchvision's naming (for messages)."""
    if key.startswith("backbone.body."):
        return key[len("backbone.body."):]
    if key.startswith("head."):
        return HEAD_KEYS[arch] + "." + key[len("head."):]
    return key
