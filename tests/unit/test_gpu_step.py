"""`graph` and `data_path` (issue 23): options, the CPU refusal, the device-resident data path
(same batches and losses as the host path), and, on CUDA, the graphed step against the eager one.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pipi.config import make_config, recipe_command, run_params, train_params
from pipi.data.cache import AugmentConfig, augment, augment_draws, batches
from pipi.errors import ConfigError
from pipi.runtime import DeviceBatches, ResidentBatches, resolve_runtime, runtime_of
from pipi.training.frames import (
    FrameInputs,
    _frame_loss,
    build_frame_model,
    class_weights,
    seed_everything,
    train_one_epoch,
)


def _images(n=40, size=32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 3, size, size), dtype=np.uint8),
            rng.integers(0, 14, n).astype(np.int64))


# --------------------------------------------------------------------------- options
def test_graph_on_is_refused_on_a_cpu_with_one_line():
    with pytest.raises(ConfigError, match=r"^graph=on needs a CUDA device.*use graph=off"):
        resolve_runtime(device="cpu", graph="on")
    rt = resolve_runtime(device="cpu", graph="off", data_path="device")
    assert rt.params()["resolved_graph"] == "off"
    assert rt.params()["resolved_data_path"] == "device"


@pytest.mark.parametrize("command", ["train", "ablate"])
def test_cli_refuses_graph_on_cpu_before_anything_starts(command, tmp_path, monkeypatch):
    from pipi.cli import ENTRY_POINTS

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}/never")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    res = CliRunner().invoke(ENTRY_POINTS[command],
                             ["--device", "cpu", "--graph", "on", "--profile", "smoke"])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: graph=on needs a CUDA device")
    assert not (tmp_path / "never").exists()  # nothing was tracked


@pytest.mark.parametrize("bad, match", [
    ({"graph": "yes"}, r"graph='yes'"),
    ({"data_path": "gpu"}, r"data_path='gpu'"),
    ({"graph": "on", "compile": True}, r"graph=on with compile=true"),
    ({"graph": "on", "precision": "fp16"}, r"graph=on with precision=fp16"),
    ({"graph": "on", "prior_mask": "fov"}, r"graph=on with prior_mask=fov"),
])
def test_bad_combinations_name_the_option(bad, match):
    with pytest.raises(ConfigError, match=match):
        make_config(cell="pi", profile="smoke", **bad)


def test_options_travel_in_params_and_recipe():
    cfg = make_config(cell="pi", profile="smoke", graph="on", data_path="device")
    p = run_params(cfg)
    assert (p["graph"], p["data_path"]) == ("on", "device")
    tp = train_params(cfg)
    assert (tp["graph"], tp["data_path"]) == ("on", "device")
    assert "graph=on" in recipe_command(cfg) and "data_path=device" in recipe_command(cfg)
    assert "graph" not in train_params(make_config(cell="pi", profile="smoke"))
    # a sweep passes them to every child; a sequence head trains eagerly from its streams
    seq = make_config(cell="b", profile="smoke", graph="on", data_path="device")
    assert (seq.graph, seq.data_path) == ("off", "host")
    with pytest.raises(ConfigError, match="sequence cell"):
        replace(seq, graph="on")


# --------------------------------------------------------------------------- augmentation
def test_predrawn_augmentation_equals_the_generator_path():
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(3)) * 255
    aug = AugmentConfig(0.5, 10.0, 0.15, 0.15, 0.1)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = augment(x, aug, g1, scale=255.0, normalized=True)
    b = augment(x, aug, None, scale=255.0, normalized=True, draws=augment_draws(g2, 4))
    assert torch.equal(a, b)
    assert torch.equal(g1.get_state(), g2.get_state())  # the same numbers were consumed


# --------------------------------------------------------------------------- data path
def test_resident_batches_equal_streamed_batches():
    images, labels = _images(n=37)
    idx = batches(len(labels), 8, gen=torch.Generator().manual_seed(1))
    host = list(DeviceBatches(images, idx, torch.device("cpu"), labels=labels))
    dev = list(ResidentBatches(images, torch.device("cpu"), labels=labels).batches(idx))
    assert len(host) == len(dev) == 5
    for (hx, hy), (dx, dy), i in zip(host, dev, idx):
        assert torch.equal(hx, dx) and torch.equal(hy, dy)
        assert torch.equal(dx, torch.from_numpy(images[i]))  # the requested order, not sorted


def _train(data_path: str, *, epochs=2, cell="pi"):
    cfg = make_config(cell=cell, backbone="resnet18", profile="smoke", weights="none",
                      device="cpu", data_path=data_path, batch_size=8, max_batches=0)
    rt = runtime_of(cfg)
    images, labels = _images(n=20, size=cfg.image_size)  # 3 batches an epoch, the last short
    gen = seed_everything(5, rt)
    model = build_frame_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    source = (ResidentBatches(images, rt.device, labels=labels) if rt.data_path == "device"
              else images)
    inputs, weights = FrameInputs(cfg, check=False), class_weights(labels)
    losses = [train_one_epoch(model, source, labels, inputs, opt, weights, cfg=cfg, gen=gen,
                              device=rt.device, epoch=e, progress=False, runtime=rt)
              for e in range(epochs)]
    return losses, model.state_dict()


def test_device_data_path_gives_the_host_path_losses():
    host_losses, host_state = _train("host")
    dev_losses, dev_state = _train("device")
    assert len(host_losses) == 2 and all(np.isfinite(host_losses))
    assert dev_losses == host_losses  # bit for bit: the same batches in the same order
    for k in host_state:
        assert torch.equal(host_state[k], dev_state[k]), k
    # and the comparison can fail: another cell on the same stream gives other losses
    other, _ = _train("host", epochs=1, cell="a")
    assert other[0] != host_losses[0]


# --------------------------------------------------------------------------- CUDA graph
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cell", ["a", "pi"])
def test_graphed_step_matches_eager_on_cuda(cell):
    from pipi.training.frames import graphed_step
    from pipi.training.graphed import capturable_adamw

    cfg = make_config(cell=cell, backbone="resnet18", profile="smoke", weights="none",
                      device="cuda", precision="fp32", batch_size=8, max_batches=0)
    images, labels = _images(n=8 * 9 + 5, size=cfg.image_size)  # 9 full batches + a tail
    base = build_frame_model(cfg)

    def run(graph: bool) -> list[float]:
        rt = runtime_of(replace(cfg, graph="on" if graph else "off"))
        gen = seed_everything(11, rt)
        model = copy.deepcopy(base).to(rt.device)
        model.train()
        weights = class_weights(labels).to(rt.device)
        inputs = FrameInputs(cfg, check=False)
        if graph:
            opt = capturable_adamw(model.parameters(), lr=cfg.lr,
                                   weight_decay=cfg.weight_decay, device=rt.device)
            step = graphed_step(model, opt, inputs, weights, cfg, rt)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                                    weight_decay=cfg.weight_decay)
        out = []
        for _ in range(2):  # two epochs: replays after the capture, and the eager tail
            idx = batches(len(labels), cfg.batch_size, gen=gen)
            for x8, y in ResidentBatches(images, rt.device, labels=labels).batches(idx):
                if graph:
                    loss = step(x8, y, gen)
                else:
                    x, p = inputs(x8.float(), train=True, gen=gen, scale=255.0)
                    loss = _frame_loss(model, rt.inputs(x), y, p, weights, cfg, rt.device)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                out.append(float(loss))
        return out

    eager, graphed = run(False), run(True)
    assert len(eager) == 20
    np.testing.assert_allclose(graphed, eager, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- benchmark
def _bench_train():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_train.py"
    spec = importlib.util.spec_from_file_location("bench_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_refuses_graph_on_a_cpu(capsys):
    with pytest.raises(SystemExit) as exc:
        _bench_train().main(["--device", "cpu", "--graph", "on"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: graph=on needs a CUDA device")


def test_benchmark_spread_is_the_paired_median():
    ratios = [0.5, 0.9, 0.7, 0.8, 0.6]
    text = _bench_train().spread(ratios)
    assert text.startswith(f"median {np.median(ratios):.3f}")
    assert "range 0.500-0.900" in text and "5 rounds" in text
