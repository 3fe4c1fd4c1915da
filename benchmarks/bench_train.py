"""Training throughput: the full training step against the model alone, in one process.

    .venv/bin/python benchmarks/bench_train.py [--backbone efficientnet_b0] [--cell a|pi]
        [--size 224] [--device auto|cpu|cuda] [--precision auto|fp32|bf16|fp16]
        [--channels-last auto|true|false] [--compile] [--no-deterministic]
        [--graph off|on] [--data-path host|device]
        [--batch-size 32] [--steps 30] [--warmup 5] [--rounds 5]

* **end-to-end**: ``pipi.training.frames.train_one_epoch`` over a uint8 memmap cache (the format
  ``build_cache`` writes): gather -> device (uint8, pinned + prefetched on CUDA) ->
  augmentation -> prior -> forward/backward/AdamW step, in the run's precision and memory
  format, as ``train`` runs it (random frames: the cost does not depend on the pixels).
* **model only**: forward/backward/step on input tensors already on the device, already
  augmented and normalised (the ceiling the data path can reach).
* ``--graph on``: both steps captured as CUDA graphs and replayed (``pipi.training.graphed``:
  the end-to-end step with augmentation and prior, the model-only step on its fixed tensors),
  with a capturable AdamW; refused on a CPU with the run's one-line error (exit 2).
* ``--data-path device``: the scratch cache copied to the device once and batches gathered
  there by index (``pipi.runtime.ResidentBatches``), as ``train -P data_path=device`` runs.
* **ratio** end-to-end / model only (target >= 0.90): the median of the per-round ratios
  (model only and end to end alternate in short rounds, so a round pair sees the same load)
  with their spread, beside the ratio of the best rounds; and the projected time of the
  paper's recipe per run, 30 epochs x 31,820 training frames (training steps only;
  validation adds one forward pass over the val split per epoch).
* **logging overhead**: what ``fit_epochs`` sends to MLflow per epoch (four metrics and the
  resumable checkpoint: model, AdamW state, scheduler, RNG; ``RunTracker``) into a scratch
  SQLite store with a local artifact folder, as a share of one paper-recipe epoch (target < 5%).

The defaults follow the device: 224 px on CUDA, the demo profile's 64 px on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from pipi import tracking
from pipi.config import make_config
from pipi.errors import PipiError
from pipi.runtime import ResidentBatches, prepare_model, runtime_of
from pipi.training.frames import (
    FrameInputs,
    _frame_loss,
    build_frame_model,
    graphed_step,
    seed_everything,
    train_one_epoch,
)
from pipi.training.graphed import capturable_adamw, graph_callable

PAPER_FRAMES, PAPER_EPOCHS = 31_820, 30


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def optimizer_for(model, cfg, rt):
    if rt.graph:
        return capturable_adamw(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                device=rt.device)
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def end_to_end(model, fwd, cfg, rt, cache, labels, opt):
    """``steps(n) -> frames/s`` of ``train_one_epoch`` capped at ``n`` batches."""
    weights = torch.ones(14, device=rt.device)
    inputs, gen = FrameInputs(cfg, check=False), torch.Generator().manual_seed(0)
    scaler = rt.scaler()
    source = ResidentBatches(cache, rt.device, labels=labels) if rt.data_path == "device" \
        else cache
    graphed = graphed_step(fwd, opt, inputs, weights, cfg, rt) if rt.graph else None

    def steps(n: int) -> float:
        _sync(rt.device)
        t = time.perf_counter()
        train_one_epoch(model, source, labels, inputs, opt, weights,
                        cfg=replace(cfg, max_batches=n), gen=gen,
                        device=rt.device, epoch=0, progress=False, runtime=rt, forward=fwd,
                        scaler=scaler, graphed=graphed)  # ends with the epoch's one sync
        _sync(rt.device)
        return n * cfg.batch_size / (time.perf_counter() - t)

    return steps


def model_only(model, fwd, cfg, rt, opt):
    """``steps(n) -> frames/s`` of forward/backward/step on pre-made device tensors."""
    ch = cfg.cell_config.input_channels
    g = torch.Generator().manual_seed(1)
    x = rt.inputs(torch.randn(cfg.batch_size, ch, cfg.image_size, cfg.image_size,
                              generator=g).to(rt.device))
    y = torch.randint(0, 14, (cfg.batch_size,), generator=g).to(rt.device)
    weights = torch.ones(14, device=rt.device)
    scaler = rt.scaler()
    model.train()

    def step():
        with rt.autocast():
            loss = _frame_loss(fwd, x, y, None, weights, cfg, rt.device)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if rt.graph:  # fp16 (the scaler) is refused with graph=on
        def body():
            with torch.autocast("cuda", dtype=rt.amp_dtype or torch.float32,
                                enabled=rt.amp_dtype is not None, cache_enabled=False):
                loss = _frame_loss(fwd, x, y, None, weights, cfg, rt.device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        step = graph_callable(body, device=rt.device)

    def steps(n: int) -> float:
        _sync(rt.device)
        t = time.perf_counter()
        for _ in range(n):
            step()
        _sync(rt.device)
        return n * cfg.batch_size / (time.perf_counter() - t)

    return steps


def logging_seconds(model, cfg, *, repeats: int = 3) -> float:
    """Seconds per epoch of fit_epochs' MLflow calls, into a scratch SQLite store."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs)
    loss = sum(p.float().pow(2).sum() for p in model.parameters())
    loss.backward()
    opt.step()  # AdamW state exists, as in a real checkpoint
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        tracking.configure(uri)
        times = []
        with tracking.pipi_run(entry_point="bench_train", experiment="bench_train") as run:
            tracker = tracking.RunTracker(run, Path(tmp) / "ckpt")
            for epoch in range(repeats + 1):
                t = time.perf_counter()
                tracker.log_metrics({"train/loss": 1.0, "val/macro_auc": 0.5,
                                     "val/macro_f1": 0.5, "train/lr": 1e-3}, step=epoch)
                tracker.log_checkpoint({
                    "config": cfg.to_dict(), "epoch": epoch, "model": model.state_dict(),
                    "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "best": {"score": 0.5, "epoch": epoch, "state": None, "bad_epochs": 0},
                    "history": [], "gen_state": torch.Generator().get_state(),
                    "torch_rng": torch.get_rng_state()})
                times.append(time.perf_counter() - t)
        opt.zero_grad(set_to_none=True)
    return float(np.median(times[1:]))  # the first call also creates the experiment


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="efficientnet_b0")
    ap.add_argument("--cell", default="pi", choices=["a", "pi"])
    ap.add_argument("--size", type=int, default=0, help="px (default: 224 on CUDA, 64 on CPU)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--channels-last", default="auto")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-deterministic", action="store_true")
    ap.add_argument("--graph", default="off", choices=["off", "on"],
                    help="replay both steps as CUDA graphs (CUDA only)")
    ap.add_argument("--data-path", default="host", choices=["host", "device"],
                    help="device: the cache resident on the device, batches by index")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30, help="batches per timing round")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="paired timing rounds")
    ap.add_argument("--frames", type=int, default=2048, help="frames in the scratch cache")
    a = ap.parse_args(argv)
    try:
        bench(a)
    except PipiError as exc:  # e.g. --graph on without CUDA: the run's own one-line refusal
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def spread(values) -> str:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return (f"median {med:.3f}, IQR {q1:.3f}-{q3:.3f}, range {min(values):.3f}-"
            f"{max(values):.3f}, {len(values)} rounds")


def bench(a) -> None:
    probe = make_config(cell=a.cell, backbone=a.backbone, device=a.device)
    size = a.size or (224 if runtime_of(probe).device.type == "cuda" else 64)
    cfg = make_config(cell=a.cell, backbone=a.backbone, profile="paper", weights="none",
                      image_size=size, batch_size=a.batch_size, device=a.device,
                      precision=a.precision, channels_last=a.channels_last, compile=a.compile,
                      deterministic=not a.no_deterministic, graph=a.graph,
                      data_path=a.data_path)
    rt = runtime_of(cfg)  # graph=on on a CPU stops here
    seed_everything(0, rt)
    model, fwd = prepare_model(build_frame_model(cfg), rt)
    # each timer trains its own copy (a CUDA graph owns its model's gradient buffers)
    model2 = copy.deepcopy(model)
    fwd2 = torch.compile(model2) if rt.compile else model2
    name = torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else \
        f"cpu ({torch.get_num_threads()} threads)"
    print(f"bench_train: {cfg.backbone} cell {cfg.cell}, {size} px, batch {cfg.batch_size}, "
          f"{name}, precision {rt.precision}, channels_last {rt.channels_last}, "
          f"compile {rt.compile}, deterministic {rt.deterministic}, graph "
          f"{'on' if rt.graph else 'off'}, data path {rt.data_path}, torch {torch.__version__}")

    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        n = max(a.frames, (a.steps + a.warmup) * a.batch_size)
        cache = np.lib.format.open_memmap(f"{tmp}/cache.npy", mode="w+", dtype=np.uint8,
                                          shape=(n, 3, size, size))
        rng = np.random.default_rng(0)
        for i in range(0, n, 256):
            cache[i:i + 256] = rng.integers(0, 256, cache[i:i + 256].shape, dtype=np.uint8)
        cache.flush()
        cache = np.load(f"{tmp}/cache.npy", mmap_mode="r")
        labels = rng.integers(0, 14, n)
        timers = {"model": model_only(model, fwd, cfg, rt, optimizer_for(model, cfg, rt)),
                  "e2e": end_to_end(model2, fwd2, cfg, rt, cache, labels,
                                    optimizer_for(model2, cfg, rt))}
        for t in timers.values():
            t(max(a.warmup, 5) if rt.graph else a.warmup)  # graph: 3 warm-up steps + capture
        # paired rounds: model only then end to end, so each ratio compares rounds that saw
        # the same load on a shared machine; the best rounds are reported beside them
        fps = {k: [] for k in timers}
        for _ in range(a.rounds):
            for k, t in timers.items():
                fps[k].append(t(a.steps))
        mo, e2e = max(fps["model"]), max(fps["e2e"])
        ratios = [e / m for e, m in zip(fps["e2e"], fps["model"])]
        del cache
    log_s = logging_seconds(model, cfg)
    epoch_s = PAPER_FRAMES / e2e
    run_s = PAPER_EPOCHS * epoch_s
    med_e2e = float(np.median(fps["e2e"]))
    print(f"model only (device tensors)      {mo:9.1f} frames/s best, "
          f"{np.median(fps['model']):.1f} median   (rounds: "
          f"{', '.join(f'{v:.1f}' for v in fps['model'])})")
    print(f"end-to-end (cache -> step)       {e2e:9.1f} frames/s best, {med_e2e:.1f} median"
          f"   (rounds: {', '.join(f'{v:.1f}' for v in fps['e2e'])})")
    print(f"ratio end-to-end / model only    {np.median(ratios):9.3f}   paired per round: "
          f"{spread(ratios)}; best-of ratio {e2e / mo:.3f} (target >= 0.90)")
    print(f"paper recipe per run             {run_s / 60:9.1f} min   best round, "
          f"{PAPER_EPOCHS * PAPER_FRAMES / med_e2e / 60:.1f} min median "
          f"({PAPER_EPOCHS} epochs x {PAPER_FRAMES:,} frames at {size} px, training steps, "
          "this device)")
    print(f"MLflow logging per epoch         {log_s:9.3f} s     "
          f"= {100 * log_s / epoch_s:.2f}% of a {epoch_s:.1f} s paper epoch (target < 5%)")
    if not (math.isfinite(e2e / mo) and all(map(math.isfinite, ratios))):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
