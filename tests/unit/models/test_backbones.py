"""Tests of pipi.models: backbones, per-frame heads, the C2 encoder and the C3 autoencoder.

Everything runs on CPU with ``weights=None`` and small inputs (32-64 px).
"""

from __future__ import annotations

import copy
import functools
import math
import urllib.error

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from pipi.errors import ConfigError
from pipi.models import (
    ARCHS,
    FEATURE_DIMS,
    DistillClassifier,
    FrameClassifier,
    NormalAutoencoder,
    SequenceHead,
    TemporalEncoder,
    build_backbone,
    distill_loss,
    residual_features,
    sinusoidal_encoding,
)

# First conv of each torchvision model: (out_channels, kernel size), from the architectures.
FIRST_CONV = {"efficientnet_b0": (32, 3), "resnet18": (64, 7), "convnext_tiny": (96, 4),
              "resnet50": (64, 7)}


def assert_close_scaled(actual, expected, *, rel=1e-5):
    """assert_close with the absolute tolerance scaled to the reference's magnitude.

    Randomly initialised EfficientNet-B0 in eval mode emits embeddings of order 1e-15, so a
    fixed absolute tolerance would make comparisons vacuous.
    """
    scale = expected.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(actual, expected, rtol=rel, atol=rel * scale)


def _differs(actual, expected, *, rel=1e-2):
    return (actual - expected).abs().max().item() > rel * expected.abs().max().item()


def _seeded_backbone(arch, seed=0, **kwargs):
    torch.manual_seed(seed)
    return build_backbone(arch, weights=None, **kwargs).eval()


@functools.cache
def _shared_backbone(arch, in_channels=3, prior_init="kaiming"):
    """Seeded backbones shared by the read-only widening tests (built once per session)."""
    return _seeded_backbone(arch, in_channels=in_channels, prior_init=prior_init)


@functools.cache
def _torchvision_model(arch, seed=0):
    """The full torchvision model (with its 1000-way classifier) built under the same seed."""
    torch.manual_seed(seed)
    return torchvision.models.get_model(arch, weights=None).eval()


def _penultimate(model, x):
    """Input of a torchvision model's final Linear, captured with a forward pre-hook."""
    final = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    captured = []
    handle = final.register_forward_pre_hook(lambda mod, args: captured.append(args[0]))
    try:
        model(x)
    finally:
        handle.remove()
    return captured[0]


# --------------------------------------------------------------------------- backbones


@pytest.mark.parametrize("arch", ARCHS)
def test_backbone_shapes_and_matches_torchvision(arch):
    backbone = _shared_backbone(arch)
    assert backbone.feature_dim == FEATURE_DIMS[arch]
    assert backbone.in_channels == 3
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        fmap = backbone.forward_features(x)
        emb = backbone(x)
        reference = _penultimate(_torchvision_model(arch), x)
    assert fmap.shape == (2, FEATURE_DIMS[arch], 2, 2)  # all three downsample by 32
    assert emb.shape == (2, FEATURE_DIMS[arch])
    assert_close_scaled(emb, reference)
    # pool: spatial mean, plus a channel LayerNorm for ConvNeXt.
    pooled = fmap.mean(dim=(2, 3))
    if arch == "convnext_tiny":
        norm = backbone.body.classifier[0]
        pooled = F.layer_norm(pooled, (pooled.shape[1],), norm.weight, norm.bias, norm.eps)
    assert_close_scaled(backbone.pool(fmap), pooled)
    # no 1000-way classifier left anywhere
    assert not any(isinstance(m, nn.Linear) and m.out_features == 1000 for m in backbone.modules())


@pytest.mark.parametrize("prior_init", ["kaiming", "zeros"])
@pytest.mark.parametrize("arch", ARCHS)
def test_widening_copies_rgb_and_inits_prior_channels(arch, prior_init):
    rgb = _shared_backbone(arch)
    wide = _shared_backbone(arch, 5, prior_init)
    assert wide.in_channels == 5
    out_ch, k = FIRST_CONV[arch]
    w = wide.first_conv.weight
    assert tuple(w.shape) == (out_ch, 5, k, k)
    assert torch.equal(w[:, :3], rgb.first_conv.weight)
    if rgb.first_conv.bias is not None:
        assert torch.equal(wide.first_conv.bias, rgb.first_conv.bias)
    extra = w[:, 3:]
    if prior_init == "zeros":
        assert torch.count_nonzero(extra) == 0
    else:
        expected_std = math.sqrt(2.0 / (out_ch * k * k))  # kaiming, fan_out, relu
        assert extra.std().item() == pytest.approx(expected_std, rel=0.15)
        assert abs(extra.mean().item()) < 0.2 * expected_std
    # every other parameter and buffer is untouched
    rgb_sd, wide_sd = rgb.state_dict(), wide.state_dict()
    assert rgb_sd.keys() == wide_sd.keys()
    conv_key = [k_ for k_ in rgb_sd if rgb_sd[k_].shape != wide_sd[k_].shape]
    assert len(conv_key) == 1 and conv_key[0].endswith("weight")
    for key in rgb_sd:
        if key not in conv_key:
            assert torch.equal(rgb_sd[key], wide_sd[key]), key


@pytest.mark.parametrize("arch", ARCHS)
def test_widened_model_reduces_to_rgb_model(arch):
    rgb = _shared_backbone(arch)
    zeros = _shared_backbone(arch, 5, "zeros")
    kaiming = _shared_backbone(arch, 5, "kaiming")
    x = torch.randn(2, 3, 32, 32)
    prior = torch.rand(2, 2, 32, 32) + 0.5
    with torch.no_grad():
        ref = rgb(x)
        # zero prior channels: same output whatever the init (up to summation order)
        for model in (zeros, kaiming):
            out = model(torch.cat([x, torch.zeros_like(prior)], dim=1))
            assert_close_scaled(out, ref)
        # zero-initialised weights ignore even a non-zero prior
        assert_close_scaled(zeros(torch.cat([x, prior], 1)), ref)
        # kaiming-initialised weights do not
        assert _differs(kaiming(torch.cat([x, prior], 1)), ref)


@pytest.mark.parametrize("arch", ARCHS)
def test_state_dict_file_loading(arch, tmp_path):
    tv_sd = _torchvision_model(arch).state_dict()  # full model, with classifier
    full = tmp_path / "full.pth"
    torch.save(tv_sd, full)
    head_keys = [k for k in tv_sd if k.startswith(("fc.", "classifier."))]
    headless = tmp_path / "headless.pth"
    torch.save({k: v for k, v in tv_sd.items() if k not in head_keys[-2:]}, headless)

    torch.manual_seed(2)  # a different random init, overwritten by the file
    for path in (full, str(headless)):
        backbone = build_backbone(arch, weights=path)
        for key, value in backbone.body.state_dict().items():
            assert torch.equal(value, tv_sd[key]), key

    # 3-channel file into a 5-channel backbone: loaded, then widened
    wide = build_backbone(arch, weights=full, in_channels=5, prior_init="zeros")
    conv_key = {"resnet18": "conv1.weight", "resnet50": "conv1.weight"}.get(
        arch, "features.0.0.weight")
    assert torch.equal(wide.first_conv.weight[:, :3], tv_sd[conv_key])
    assert torch.count_nonzero(wide.first_conv.weight[:, 3:]) == 0


def test_pipi_checkpoint_loading(tmp_path):
    arch = "resnet18"
    torch.manual_seed(3)
    trained = FrameClassifier(build_backbone(arch, weights=None, in_channels=5), 4)
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"state_dict": trained.state_dict(), "epoch": 7, "cell": "pi"}, ckpt)
    torch.manual_seed(4)
    loaded = build_backbone(arch, weights=ckpt, in_channels=5)
    want = trained.backbone.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, want[key]), key
    with pytest.raises(ConfigError, match="in_channels=5"):
        build_backbone(arch, weights=ckpt, in_channels=3)

    # a plain Backbone state_dict works too
    bb_file = tmp_path / "backbone.pt"
    torch.save(trained.backbone.state_dict(), bb_file)
    again = build_backbone(arch, weights=bb_file, in_channels=5)
    assert torch.equal(again.first_conv.weight, trained.backbone.first_conv.weight)

    # wrong architecture
    with pytest.raises(ConfigError, match="does not match"):
        build_backbone("efficientnet_b0", weights=bb_file, in_channels=5)


@pytest.mark.parametrize("arch", ARCHS)
def test_imagenet_without_network_raises_config_error(arch, tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path))  # no cached weights
    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(ConfigError) as info:
        build_backbone(arch, weights="imagenet")
    assert "weights=none" in str(info.value)
    assert "weights=/path/to/file.pth" in str(info.value)
    assert isinstance(info.value.__cause__, urllib.error.URLError)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="efficientnet_b0.*resnet18.*convnext_tiny"):
        build_backbone("vit_b_16", weights=None)
    with pytest.raises(ConfigError, match="prior_init"):
        build_backbone("resnet18", weights=None, in_channels=5, prior_init="xavier")
    with pytest.raises(ConfigError, match="in_channels"):
        build_backbone("resnet18", weights=None, in_channels=2)
    with pytest.raises(ConfigError, match="weights=none"):
        build_backbone("resnet18", weights="/nonexistent/file.pth")
    assert build_backbone("resnet18", weights="none").in_channels == 3


# --------------------------------------------------------------------------- per-frame heads


@pytest.mark.parametrize("arch", ARCHS)
def test_frame_classifier_channels_last_and_autocast(arch):
    model = FrameClassifier(copy.deepcopy(_shared_backbone(arch, 5, "kaiming")), 6).eval()
    x = torch.randn(2, 5, 32, 32)
    with torch.no_grad():
        ref = model(x)
        assert ref.shape == (2, 6)
        assert model.embed(x).shape == (2, FEATURE_DIMS[arch])
        model_cl = model.to(memory_format=torch.channels_last)
        out_cl = model_cl(x.contiguous(memory_format=torch.channels_last))
        assert_close_scaled(out_cl, ref, rel=1e-4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out_amp = model_cl(x.contiguous(memory_format=torch.channels_last))
    assert out_amp.shape == (2, 6) and torch.isfinite(out_amp).all()


def test_distill_classifier_modes():
    torch.manual_seed(0)
    model = DistillClassifier(build_backbone("resnet18", weights=None), 5).eval()
    x = torch.randn(3, 3, 64, 64)
    calls = []
    model.aux.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        logits, aux = model(x)
        assert logits.shape == (3, 5)
        assert aux.shape == (3, 1, 2, 2)  # the feature map's resolution
        assert calls == [1]
        model.deploy_mode = True
        deployed = model(x)
    assert isinstance(deployed, torch.Tensor) and deployed.shape == (3, 5)
    assert calls == [1]  # decoder not executed in deploy mode
    torch.testing.assert_close(deployed, logits)
    with pytest.raises(ConfigError, match="3-channel"):
        DistillClassifier(build_backbone("resnet18", weights=None, in_channels=5), 5)


@pytest.mark.parametrize("p_blood_ndim", [3, 4])
def test_distill_loss_matches_hand_computation(p_blood_ndim):
    gen = torch.Generator().manual_seed(5)
    batch, classes, h, w, H, W = 4, 3, 2, 3, 8, 12
    logits = torch.randn(batch, classes, generator=gen, dtype=torch.float64)
    labels = torch.tensor([0, 2, 2, 1])
    aux = torch.randn(batch, 1, h, w, generator=gen, dtype=torch.float64)
    p_blood = torch.rand(batch, 1, H, W, generator=gen, dtype=torch.float64)
    weights = torch.tensor([0.5, 2.0, 1.5], dtype=torch.float64)
    lam = 0.3

    # weighted CE: sum_i w[y_i] * -log softmax(z_i)[y_i] / sum_i w[y_i]
    log_p = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    nll = -log_p[torch.arange(batch), labels]
    ce = (weights[labels] * nll).sum() / weights[labels].sum()
    # target: mean over 4x4 blocks (8x12 -> 2x3), then BCE with logits averaged over pixels
    target = p_blood.reshape(batch, 1, h, H // h, w, W // w).mean(dim=(3, 5))
    sig = torch.sigmoid(aux)
    bce = -(target * torch.log(sig) + (1 - target) * torch.log(1 - sig)).mean()
    expected = ce + lam * bce

    given = p_blood if p_blood_ndim == 4 else p_blood[:, 0]
    got = distill_loss(logits, labels, aux, given, class_weights=weights, lam=lam)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    unweighted = distill_loss(logits, labels, aux, given, lam=0.0)
    torch.testing.assert_close(unweighted, nll.mean(), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- C2


def test_sinusoidal_encoding_values():
    d_model = 256
    pe = sinusoidal_encoding(16, d_model)
    assert pe.shape == (16, d_model)
    assert torch.equal(pe[0, 0::2], torch.zeros(d_model // 2))
    assert torch.equal(pe[0, 1::2], torch.ones(d_model // 2))
    for pos, i in [(1, 0), (3, 1), (7, 10), (15, 64), (9, 127)]:
        angle = pos / 10000 ** (2 * i / d_model)
        assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_temporal_encoder_defaults_and_positional_encoding_added():
    enc = TemporalEncoder(1280)
    assert enc.out_dim == 1280 and enc.window == 16
    assert len(enc.encoder.layers) == 4
    layer = enc.encoder.layers[0]
    assert layer.self_attn.num_heads == 8 and layer.self_attn.embed_dim == 256
    assert layer.linear1.out_features == 512 and layer.dropout.p == 0.1

    # PE is added to the projected tokens before the encoder stack
    class PassThrough(nn.Module):
        def forward(self, h, **kwargs):
            return h

    enc.encoder = PassThrough()
    x = torch.randn(2, 16, 1280)
    with torch.no_grad():
        expected = enc.proj(x) + sinusoidal_encoding(16, 256)
        torch.testing.assert_close(enc.encode(x), expected)


def test_temporal_encoder_shapes_and_centre_token():
    torch.manual_seed(0)
    enc = TemporalEncoder(24, d_model=32, nhead=4, num_layers=2, dim_feedforward=64, out_dim=10)
    enc.eval()
    x = torch.randn(3, 16, 24)
    centre = torch.tensor([8, 0, 15])
    with torch.no_grad():
        out = enc(x, centre)
        tokens = enc.encode(x)
        assert out.shape == (3, 10) and tokens.shape == (3, 16, 32)
        expected = enc.out(tokens[torch.arange(3), centre])
        torch.testing.assert_close(out, expected)
        # each element is processed independently of the rest of the batch
        torch.testing.assert_close(enc(x[2:], centre[2:]), out[2:], rtol=1e-5, atol=1e-6)
        # a different centre picks a different token
        assert not torch.allclose(enc(x, torch.tensor([7, 1, 14])), out)
    with pytest.raises(ValueError, match="centre_index"):
        enc(x, torch.tensor([0, 16, 1]))


def test_temporal_encoder_padding_mask():
    torch.manual_seed(0)
    enc = TemporalEncoder(12, d_model=16, nhead=2, num_layers=2, dim_feedforward=32).eval()
    short = torch.randn(1, 10, 12)  # a 10-frame video, padded at the end to the 16 window
    padded = torch.cat([short, 100 * torch.randn(1, 6, 12)], dim=1)
    mask = torch.zeros(1, 16, dtype=torch.bool)
    mask[:, 10:] = True
    centre = torch.tensor([4])
    with torch.no_grad():
        ref = enc(short, centre)
        got = enc(padded, centre, key_padding_mask=mask)
        unmasked = enc(padded, centre)
    assert ref.shape == (1, 12)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(unmasked, ref, atol=1e-3)
    with pytest.raises(ValueError, match="padded"):
        enc(padded, torch.tensor([12]), key_padding_mask=mask)


def test_sequence_head_concat_order():
    head = SequenceHead({"c3": 2, "c1": 3, "c2": 4}, 5, dropout=0.0)
    assert head.stream_order == ("c1", "c2", "c3") and head.in_dim == 9
    linear = head.mlp[-1]
    with torch.no_grad():
        linear.weight.copy_(torch.arange(45, dtype=torch.float32).reshape(5, 9) / 10)
        linear.bias.copy_(torch.arange(5, dtype=torch.float32))
    c1, c2, c3 = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 2)
    concat = torch.cat([c1, c2, c3], dim=1)
    expected = concat @ linear.weight.T + linear.bias
    torch.testing.assert_close(head({"c2": c2, "c3": c3, "c1": c1}), expected)
    torch.testing.assert_close(head({"c1": c1, "c2": c2, "c3": c3}), expected)
    with pytest.raises(ValueError, match="expected streams"):
        head({"c1": c1, "c2": c2})
    with pytest.raises(ValueError, match="c3"):
        head({"c1": c1, "c2": c2, "c3": torch.randn(2, 3)})
    mlp = SequenceHead({"c2": 4, "c1": 3}, 5, hidden=16)
    assert mlp({"c1": c1, "c2": c2}).shape == (2, 5)
    assert mlp.mlp[0].in_features == 7 and mlp.mlp[0].out_features == 16


# --------------------------------------------------------------------------- C3


def test_autoencoder_size_and_shapes():
    ae = NormalAutoencoder().eval()
    n_params = sum(p.numel() for p in ae.parameters())
    assert 7e5 <= n_params <= 1.1e6
    assert not any(isinstance(m, nn.Linear) for m in ae.modules())
    with torch.no_grad():
        code = ae.encode(torch.rand(1, 3, 224, 224))
        assert code.shape == (1, 64, 7, 7)  # bottleneck 7 x 7 x 64
        widths = [blk[0].out_channels for blk in ae.encoder]
        assert widths == [16, 32, 64, 128, 64]
        for size in (64, 96, 128):
            out = ae(torch.rand(2, 3, size, size))
            assert out.shape == (2, 3, size, size)
            assert out.min() >= 0 and out.max() <= 1
    with pytest.raises(ValueError, match="divisible by 32"):
        ae(torch.rand(1, 3, 48, 48))


def test_residual_features_hand_computation():
    torch.manual_seed(0)
    ae = NormalAutoencoder().eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        feats = residual_features(ae, x)
        r = (x - ae(x)).abs()
    assert feats.shape == (2, 192)
    expected = r.reshape(2, 3, 8, 8, 8, 8).mean(dim=(3, 5)).reshape(2, 192)  # 8x8 blocks
    torch.testing.assert_close(feats, expected)


# --------------------------------------------------------------------------- training sanity


def _steps_reduce(model, loss_fn, params, steps=3, lr=1e-3):
    opt = torch.optim.Adam(params, lr=lr)
    first = None
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    with torch.no_grad():
        last = loss_fn().item()
    return first, last


def test_gradient_steps_reduce_losses():
    torch.manual_seed(0)
    x = torch.rand(4, 3, 32, 32)
    y = torch.tensor([0, 1, 2, 3])
    p_blood = torch.rand(4, 32, 32)

    clf = FrameClassifier(build_backbone("resnet18", weights=None), 4, dropout=0.0).train()
    first, last = _steps_reduce(clf, lambda: F.cross_entropy(clf(x), y), clf.parameters())
    assert last < first

    dist = DistillClassifier(build_backbone("resnet18", weights=None), 4, dropout=0.0).train()

    def joint():
        logits, aux = dist(x)
        return distill_loss(logits, y, aux, p_blood, class_weights=torch.ones(4), lam=1.0)

    first, last = _steps_reduce(dist, joint, dist.parameters())
    assert last < first

    ae = NormalAutoencoder().train()
    xa = torch.rand(2, 3, 64, 64)
    first, last = _steps_reduce(ae, lambda: F.l1_loss(ae(xa), xa), ae.parameters(), lr=3e-3)
    assert last < first

    enc = TemporalEncoder(16, d_model=32, nhead=4, num_layers=1, dim_feedforward=64, dropout=0.0)
    head = SequenceHead({"c2": 16}, 4, dropout=0.0)
    seq = torch.randn(4, 16, 16)
    centre = torch.full((4,), 8)
    params = [*enc.parameters(), *head.parameters()]
    first, last = _steps_reduce(
        enc, lambda: F.cross_entropy(head({"c2": enc(seq, centre)}), y), params, lr=3e-3
    )
    assert last < first
