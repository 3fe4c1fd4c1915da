"""The per-frame training step as one CUDA graph (``graph=on``; CUDA only).

Augmentation, prior, forward, loss, backward and the AdamW step are captured once with
``torch.cuda.graph`` and replayed for every full batch, following PyTorch's whole-network
capture pattern (docs, "CUDA Graphs"):

* a few real steps run eagerly on a side stream first (AdamW creates its state lazily, and
  cuDNN/cuBLAS pick their kernels), then the gradients are set to None and the step is
  captured reading static buffers; capture records without running, so the capturing step
  is replayed once at once;
* for each later full batch its uint8 frames, labels and augmentation random numbers are
  copied into those static buffers and the graph is replayed; the random numbers are drawn
  on the CPU from the run's seeded generator exactly as the eager step draws them
  (``augment_draws``), so a seed gives the same augmentation and the same batches;
* the optimizer must be created capturable with the learning rate as a device tensor
  (:func:`capturable_adamw`): the cosine schedule writes the tensor in place and the graph
  reads it;
* a ragged last batch (another shape) runs eagerly with the gradients zeroed in place, so
  the graph's gradient buffers stay the parameters' ``.grad``.

fp16 loss scaling, ``compile=true`` and ``prior_mask=fov`` are refused with graph=on
(``pipi.runtime.check_runtime``, ``TrainConfig``).
"""

from __future__ import annotations

import torch

from pipi.data.cache import augment_draws
from pipi.errors import ConfigError
from pipi.runtime import Runtime


def capturable_adamw(params, *, lr: float, weight_decay: float,
                     device: torch.device) -> torch.optim.AdamW:
    """AdamW whose step can be captured: state and learning rate live on ``device``."""
    return torch.optim.AdamW(params, lr=torch.tensor(float(lr), device=device),
                             weight_decay=weight_decay, capturable=True)


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """After ``load_state_dict`` of a checkpoint written by an eager run: learning rate back
    to a device tensor, ``capturable`` on, the step counters on the device."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
        for p in group["params"]:
            st = optimizer.state.get(p, {})
            if isinstance(st.get("step"), torch.Tensor):
                st["step"] = st["step"].to(device=device, dtype=torch.float32)


class GraphedStep:
    """``step(x8, y, gen) -> loss`` (a device scalar, not synchronised): one training step
    of a per-frame cell, replayed from a CUDA graph for full batches.

    ``loss_fn(fwd, x, y, p_blood)`` is the cell's loss; ``inputs`` the run's ``FrameInputs``.
    """

    def __init__(self, *, forward, optimizer, inputs, loss_fn, runtime: Runtime,
                 batch_size: int, warmup: int = 3):
        if runtime.device.type != "cuda":
            raise ConfigError(f"graph=on needs a CUDA device; this run is on {runtime.device}")
        if not all(g.get("capturable") for g in optimizer.param_groups):
            raise ConfigError("graph=on needs a capturable optimizer (capturable_adamw)")
        self.fwd, self.opt, self.inputs, self.loss_fn = forward, optimizer, inputs, loss_fn
        self.rt, self.batch_size, self.warmup = runtime, batch_size, warmup
        self.dev = runtime.device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = 0
        self.side = torch.cuda.Stream(self.dev)

    def _body(self, x8: torch.Tensor, y: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        """Augmentation, prior, forward, loss, backward, step: nothing waits for the device."""
        x, p_blood = self.inputs(x8.float(), train=True, draws=draws, scale=255.0)
        amp = self.rt.amp_dtype
        # autocast's weight cache must be off inside a capture (PyTorch's CUDA graph notes)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None,
                            cache_enabled=False):
            loss = self.loss_fn(self.fwd, self.rt.inputs(x), y, p_blood)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def __call__(self, x8: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        # drawn here, in the eager step's order, from the run's CPU generator
        draws = augment_draws(gen, len(y)).pin_memory()
        if len(y) != self.batch_size:  # a ragged last batch: eager, same buffers
            self.opt.zero_grad(set_to_none=self.graph is None)
            return self._body(x8, y, draws.to(self.dev, non_blocking=True))
        if self.graph is not None:
            self.static_x.copy_(x8, non_blocking=True)
            self.static_y.copy_(y, non_blocking=True)
            self.static_draws.copy_(draws, non_blocking=True)
            self.graph.replay()
            return self.static_loss.clone()
        d = draws.to(self.dev, non_blocking=True)
        if self.warm < self.warmup:
            main = torch.cuda.current_stream(self.dev)
            self.side.wait_stream(main)
            with torch.cuda.stream(self.side):
                self.opt.zero_grad(set_to_none=True)
                loss = self._body(x8, y, d)
            main.wait_stream(self.side)
            self.warm += 1
            return loss.clone()
        return self._capture(x8, y, d)

    def _capture(self, x8: torch.Tensor, y: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        # static inputs allocated outside the graph's private memory pool
        self.static_x, self.static_y, self.static_draws = x8.clone(), y.clone(), draws.clone()
        torch.cuda.synchronize(self.dev)
        self.opt.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's pool
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the host data path's prefetch thread may pin host memory meanwhile
        # (it launches no CUDA work; "global" would fail the capture on its allocation)
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.static_loss = self._body(self.static_x, self.static_y, self.static_draws)
        self.graph.replay()  # the capture ran nothing: this replay is the step itself
        return self.static_loss.clone()


def graph_callable(fn, *, device: torch.device, warmup: int = 3):
    """``replay() -> fn's output tensor``: ``fn()`` (reading only tensors that stay put,
    e.g. a model-only step on fixed device tensors with a capturable optimizer) run
    ``warmup`` times on a side stream, then captured once; each ``replay()`` runs it again."""
    side, main = torch.cuda.Stream(device), torch.cuda.current_stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    main.wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay
