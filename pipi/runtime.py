"""Where and how a run computes: device, precision, memory format, compilation, determinism,
and the stream of uint8 batches that feeds the device.

``TrainConfig`` holds what was asked (``device="auto"``, ``precision="auto"``, ...; hashed as
given); :func:`resolve_runtime` turns it into a :class:`Runtime` on this machine (logged as
``resolved_*`` params). Everything that runs only on a GPU is guarded by
``device.type == "cuda"`` and kept short:

* ``precision``: ``torch.autocast`` around the forward pass and the loss (bf16 or fp16; fp16
  adds a ``GradScaler``); augmentation and the prior stay in float32. ``auto`` is fp32 under
  the paper's recipe (``profile=paper``: the paper trains without mixed precision) and bf16 on
  a GPU that has it under the machine profiles (demo, smoke); bf16/fp16 under the paper's
  recipe only when asked.
* ``channels_last``: model and inputs in NHWC memory format.
* ``compile``: ``torch.compile`` of the model (the uncompiled module keeps the weights, so
  checkpoints and state dicts are unchanged).
* ``deterministic``: ``torch.use_deterministic_algorithms`` (warn-only), cuDNN deterministic
  without autotuning, and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``; ``False`` lets cuDNN autotune.
* ``graph``: ``on`` captures the per-frame training step as one CUDA graph and replays it
  (``pipi.training.graphed``); CUDA only, refused on a CPU before anything starts.
* ``data_path``: ``host`` streams batches from the memmap (below); ``device`` keeps the uint8
  training set on the training device and gathers each batch there by index
  (:class:`ResidentBatches`), no host transfer per step.

:class:`DeviceBatches` gathers each batch from the uint8 cache on a background thread into
pinned memory and copies it to the GPU on a side stream, so batch ``i + 1`` is read and
transferred while batch ``i`` trains; frames cross the bus as uint8 (a quarter of float32).

:func:`keep_freed_memory` makes the process's malloc keep the memory a batch frees for the
next batch (``train``, ``predict``): glibc's default hands each batch's large activations back
to the kernel and faults every page in again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pipi.errors import ConfigError
from pipi.options.runtime import (  # noqa: F401 (the options, re-exported)
    DATA_PATHS,
    DEVICES,
    GRAPHS,
    PAPER_PROFILES,
    PRECISIONS,
    SWITCHES,
    check_runtime,
)

AMP_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
def auto_precision(device: torch.device, *, profile: str) -> str:
    """What ``precision=auto`` means for ``profile`` on ``device``: fp32 under a paper recipe
    or off CUDA; bf16 on a CUDA device that has it otherwise."""
    if profile in PAPER_PROFILES or device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp32"


@dataclass(frozen=True)
class Runtime:
    """The resolved options of a run on this machine."""

    device: torch.device
    precision: str = "fp32"          # fp32 | bf16 | fp16
    channels_last: bool = False
    compile: bool = False
    deterministic: bool = True
    graph: bool = False              # the training step replayed as a CUDA graph
    data_path: str = "host"          # host | device

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return AMP_DTYPES[self.precision]

    def autocast(self) -> AbstractContextManager:
        """Mixed precision for the forward pass and the loss (a no-op for fp32)."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Model inputs in the run's memory format."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for fp16 (disabled, a pass-through, otherwise)."""
        return torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")

    def params(self) -> dict:
        """The ``resolved_*`` run params."""
        name = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
                else "cpu")
        return {"resolved_device": str(self.device), "resolved_device_name": name,
                "resolved_precision": self.precision,
                "resolved_channels_last": str(self.channels_last).lower(),
                "resolved_graph": "on" if self.graph else "off",
                "resolved_data_path": self.data_path,
                "torch_version": torch.__version__}


def resolve_runtime(*, device: str = "auto", precision: str = "auto",
                    channels_last: str = "auto", compile: bool = False,
                    deterministic: bool = True, graph: str = "off",
                    data_path: str = "host", profile: str = "paper") -> Runtime:
    """The :class:`Runtime` these options give on this machine (ConfigError if impossible).

    ``profile`` decides what ``precision=auto`` means (:func:`auto_precision`)."""
    check_runtime(device=device, precision=precision, channels_last=channels_last,
                  compile=compile, deterministic=deterministic, graph=graph,
                  data_path=data_path)
    if device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device}: torch sees no CUDA device (torch "
                              f"{torch.__version__}); use device=cpu or device=auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device={device}: only {torch.cuda.device_count()} CUDA "
                              "device(s) visible")
    if precision == "auto":
        precision = auto_precision(dev, profile=profile)
    elif precision == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision=bf16: {torch.cuda.get_device_name(dev)} has no bf16; "
                          "use precision=fp16 or fp32")
    if graph == "on" and dev.type != "cuda":
        raise ConfigError(f"graph=on needs a CUDA device, and device={device} runs on "
                          f"{dev.type}; use graph=off here (or device=cuda on a GPU machine)")
    if channels_last == "auto":   # NHWC on a GPU; and for inference on a oneDNN CPU, where
        # it ran EfficientNet-B0 25% faster (89 vs 71 frames/s at 224 px, batch 64, 2 cores)
        cl = dev.type == "cuda" or (profile == "predict" and torch.backends.mkldnn.is_available())
    else:
        cl = channels_last == "true"
    return Runtime(dev, precision, cl, compile, deterministic, graph == "on", data_path)


def runtime_of(cfg, *, device: str | None = None) -> Runtime:
    """:func:`resolve_runtime` of a ``TrainConfig`` (``device`` overrides ``cfg.device``)."""
    return resolve_runtime(device=device or cfg.device, precision=cfg.precision,
                           channels_last=cfg.channels_last, compile=cfg.compile,
                           deterministic=cfg.deterministic, graph=cfg.graph,
                           data_path=cfg.data_path, profile=cfg.profile)


#: ``PIPI_MALLOC=system`` leaves the C library's allocator as it is (:func:`keep_freed_memory`)
MALLOC_ENV = "PIPI_MALLOC"
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4   # glibc's mallopt parameters (malloc.h)
_MALLOC: dict[str, bool] = {}


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse: no chunk of its own mapping, no trim.

    By default glibc maps each large block (a batch's activations: tens of MB) on its own
    and unmaps it when freed, so every batch faults its pages in again. On this 2-core
    machine an EfficientNet-B0 forward at 224 px, batch 64, spent more time in the kernel than
    in the network (37.7 s system against 33.0 s user, 16.8 M page faults over 11 batches)
    and ran at 21.5 frames/s; with freed memory kept, 69 frames/s (1.8 s system), the peak
    resident memory 2.4 GB instead of 1.8 GB (``benchmarks/bench_malloc.py``). What PyTorch's
    CPU tuning guide gets from jemalloc or tcmalloc, without a preloaded library.

    Applied once per process, before the work (DataLoader workers forked later inherit it);
    the memory is then held at the process's peak until it exits. Linux with glibc only;
    ``PIPI_MALLOC=system`` leaves the allocator alone. Returns whether it is in effect."""
    if "on" not in _MALLOC:
        _MALLOC["on"] = False
        if os.environ.get(MALLOC_ENV, "").strip().lower() != "system":
            import ctypes
            import ctypes.util
            import platform

            if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
                try:
                    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                    _MALLOC["on"] = bool(libc.mallopt(_M_MMAP_MAX, 0)
                                         and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
                except (OSError, AttributeError):
                    pass
    return _MALLOC["on"]


def apply_determinism(rt: Runtime) -> None:
    """Deterministic algorithms (and cuDNN without autotuning), or autotuned speed."""
    torch.use_deterministic_algorithms(rt.deterministic, warn_only=True)
    if rt.device.type == "cuda":
        if rt.deterministic:  # cuBLAS needs this before its first call to be deterministic
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = rt.deterministic
        torch.backends.cudnn.benchmark = not rt.deterministic


def prepare_model(model: torch.nn.Module, rt: Runtime) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(model, forward)``: the model on the device in its memory format, and what to call
    (``torch.compile(model)`` when asked; it shares the model's parameters)."""
    model = model.to(rt.device)
    if rt.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model, (torch.compile(model) if rt.compile else model)


def weighted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                           weight: torch.Tensor | None) -> torch.Tensor:
    """``F.cross_entropy(logits, labels, weight=weight)`` (weighted mean) as an explicit
    per-row loss and two sums: no atomics, so deterministic on CUDA, where the fused
    weighted ``nll_loss`` reduction is not."""
    per_row = F.cross_entropy(logits.float(), labels, reduction="none")  # (B,)
    if weight is None:
        return per_row.mean()
    w = weight.to(per_row.dtype)[labels]  # (B,)
    return (per_row * w).sum() / w.sum()


# --------------------------------------------------------------------------- batches
def _gather(images: np.ndarray, idx: np.ndarray, pin: bool) -> torch.Tensor:
    """Rows ``idx`` of a uint8 memmap, in that order (read sorted for locality).

    NumPy only on a CPU, no torch operator: it runs on :class:`DeviceBatches`' worker thread,
    and a torch operator there (an ``index_select``; under deterministic algorithms even
    ``torch.empty``, which then fills the new memory) starts a second OpenMP team beside the
    training step's: on a 2-core CPU the step ran 30% slower with it (issue 40). Pinned
    memory (for CUDA) can only come from torch."""
    sel = np.sort(idx)
    read = images[sel]                                  # one sorted read of the memmap
    shape = (len(idx), *images.shape[1:])
    out = (torch.empty(shape, dtype=torch.uint8, pin_memory=True) if pin
           else torch.from_numpy(np.empty(shape, dtype=np.uint8)))
    np.take(read, np.argsort(np.argsort(idx)), axis=0, out=out.numpy())
    return out


class DeviceBatches:
    """Iterate ``(x_uint8, labels)`` of index batches on ``device``, prefetching one ahead.

    A worker thread gathers batch ``i + 2`` from the memmap while batch ``i`` is consumed;
    on CUDA batch ``i + 1`` is already being copied (pinned memory, side stream,
    ``non_blocking``) and the consumer's stream waits for it only when it takes it.
    ``labels`` None yields ``None`` labels.
    """

    def __init__(self, images: np.ndarray, index_batches: Sequence[np.ndarray],
                 device: torch.device, *, labels: np.ndarray | None = None):
        self.images, self.batches, self.labels = images, list(index_batches), labels
        self.device = torch.device(device)

    def __len__(self) -> int:
        return len(self.batches)

    def _host(self, idx: np.ndarray):
        pin = self.device.type == "cuda"
        x = _gather(self.images, idx, pin)
        y = None
        if self.labels is not None:
            y = torch.from_numpy(np.ascontiguousarray(self.labels[idx]))
            y = y.pin_memory() if pin else y
        return x, y

    def _upload(self, host, stream):
        x, y = host
        if stream is None:  # CPU: the gathered tensors are the batch
            return x.to(self.device), None if y is None else y.to(self.device)
        with torch.cuda.stream(stream):
            return (x.to(self.device, non_blocking=True),
                    None if y is None else y.to(self.device, non_blocking=True))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        n = len(self.batches)
        if n == 0:
            return
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pipi-batches") as pool:
            pending = pool.submit(self._host, self.batches[0])
            nxt = self._upload(pending.result(), stream)
            pending = pool.submit(self._host, self.batches[1]) if n > 1 else None
            for i in range(n):
                cur = nxt
                if stream is not None:
                    main = torch.cuda.current_stream(self.device)
                    main.wait_stream(stream)
                    for t in cur:
                        if t is not None:
                            t.record_stream(main)
                if i + 1 < n:
                    nxt = self._upload(pending.result(), stream)  # overlaps step i
                    pending = pool.submit(self._host, self.batches[i + 2]) if i + 2 < n else None
                yield cur


class ResidentBatches:
    """The uint8 images (and labels) copied to ``device`` once; each batch is gathered there
    by index (``index_select``), so no frame crosses the bus per step (``data_path=device``).

    Yields the same ``(x_uint8, labels)`` batches, in the same order, as :class:`DeviceBatches`
    over the same index batches. On CUDA the set must fit in free memory (one clear error
    otherwise: 31,820 frames at 224 px are 4.8 GB).
    """

    def __init__(self, images: np.ndarray, device: torch.device, *,
                 labels: np.ndarray | None = None):
        self.device = torch.device(device)
        if images.dtype != np.uint8:
            raise ConfigError(f"data_path=device keeps uint8 frames; got {images.dtype}")
        need = int(np.prod(images.shape))
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if need > 0.8 * free:
                raise ConfigError(
                    f"data_path=device: the training set needs {need / 1e9:.2f} GB and "
                    f"{torch.cuda.get_device_name(self.device)} has {free / 1e9:.2f} GB free "
                    "(80% usable for it); use data_path=host")
        # copied in chunks: a read-only memmap is never held in host memory whole
        self.images = torch.empty(images.shape, dtype=torch.uint8, device=self.device)
        for i in range(0, len(images), 1024):
            self.images[i:i + 1024].copy_(torch.from_numpy(np.array(images[i:i + 1024])))
        self.labels = (None if labels is None else
                       torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
                       .to(self.device))
        self.nbytes = need

    def __len__(self) -> int:
        return len(self.images)

    def batches(self, index_batches: Sequence[np.ndarray]
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        for idx in index_batches:
            i = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
            i = i.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else i
            yield (self.images.index_select(0, i),
                   None if self.labels is None else self.labels.index_select(0, i))
