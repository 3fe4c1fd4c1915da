"""`pipi onnx` (issue 40 item 4): a per-frame model exports with its prior as an ONNX graph
whose ONNX Runtime probabilities equal the torch module's on frames it tells apart."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
import torch

from pipi.config import make_config
from pipi.data.cache import build_cache
from pipi.errors import ConfigError
from pipi.serving.frame_model import FrameInputs, build_frame_model
from pipi.serving.onnx_export import INPUT, export_onnx
from pipi.serving.predictors import FrameModule

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def frames(tiny_staged, tmp_path_factory):
    """Real frames of the tiny release at 32 px, RGB in [0, 1]."""
    df = pd.read_parquet(tiny_staged / "frames.parquet")
    man = json.loads((tiny_staged / "manifest.json").read_text())
    imgs = build_cache(tiny_staged, df, size=32, digest=man["data_digest"],
                       cache_dir=tmp_path_factory.mktemp("cache"), progress=False)
    return torch.from_numpy(np.asarray(imgs[:48])).float() / 255.0   # N x 3 x 32 x 32


def _pi_module(frames):
    """(config, module) of a fresh 32-px ``pi`` ResNet-18 whose BN statistics come from the
    real frames (so that its answers depend on the frame), in eval mode."""
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32)
    net = build_frame_model(cfg)
    inputs = FrameInputs(cfg)
    net.train()                               # BN statistics of real frames, then eval
    with torch.no_grad():
        for i in range(0, 48, 16):
            net(inputs(frames[i:i + 16], train=False)[0])
    return cfg, FrameModule(net.eval(), inputs, cfg)


def test_a_pi_model_exports_with_its_prior_and_answers_as_torch(frames, tmp_path):
    cfg, module = _pi_module(frames)
    res = export_onnx(module, tmp_path / "pi.onnx", metadata={"model": "test v1"},
                      check=frames[:8])
    assert res.max_abs_diff < 1e-5
    sess = ort.InferenceSession(str(res.path), providers=["CPUExecutionProvider"])
    x = frames[16:40]                          # other frames, another batch size
    got = sess.run(None, {INPUT: x.numpy()})[0]
    with torch.no_grad():
        want = module(x).numpy()
    assert want.std(0).max() > 1e-3            # the model tells these frames apart
    np.testing.assert_allclose(got, want, atol=1e-5)
    props = {p.key: p.value for p in onnx.load(str(res.path)).metadata_props}
    assert json.loads(props["class_names"]) == list(cfg.class_set.names)
    assert props["image_size"] == "32" and props["model"] == "test v1"
    # the prior's cache holds real tensors again after the trace
    with torch.no_grad():
        assert type(module(x[:2])) is torch.Tensor
    with pytest.raises(ConfigError, match="N x 3 x 32 x 32"):
        export_onnx(module, tmp_path / "x.onnx", check=torch.rand(2, 3, 48, 48))
    assert not (tmp_path / "x.onnx").exists()


def test_frames_in_nhwc_reach_the_network_in_nhwc_with_the_same_answers(frames):
    """`pipi predict` hands the module NHWC batches (channels_last on a oneDNN CPU): the
    network gets them in NHWC after the prior is computed (the transform's output is NCHW,
    which a channels_last network reorders layer by layer), and answers as for NCHW."""
    _, module = _pi_module(frames)
    seen = []
    module.network.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    x = frames[:24]
    with torch.no_grad():
        want = module(x).numpy()
        module.to(memory_format=torch.channels_last)
        got = module(x.contiguous(memory_format=torch.channels_last)).numpy()
    assert seen == [False, True]
    assert want.std(0).max() > 1e-3            # the model tells these frames apart
    np.testing.assert_allclose(got, want, atol=1e-5)
