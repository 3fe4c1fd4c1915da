"""Tests of pipi.models.surgery on the three backbones (weights=None, CPU, 32 px inputs)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

from pipi.errors import ConfigError
from pipi.models import ARCHS, FrameClassifier, build_backbone
from pipi.models.surgery import (
    SUBSETS,
    bn_transplant,
    channel_norms,
    first_conv,
    first_conv_cosine,
    first_conv_path,
    norm_kind,
    subset_paths,
    subset_transplant,
)

NUM_CLASSES = 14
STEM = {"efficientnet_b0": ("backbone.body.features.0.",),
        "resnet18": ("backbone.body.conv1.", "backbone.body.bn1."),
        "convnext_tiny": ("backbone.body.features.0.",),
        "resnet50": ("backbone.body.conv1.", "backbone.body.bn1.")}
# (kind, layers, tensors) the norm transplant moves; EfficientNet-B0's 49 / 245 are the paper's.
NORMS = {"efficientnet_b0": ("batchnorm", 49, 245), "resnet18": ("batchnorm", 20, 100),
         "convnext_tiny": ("layernorm", 23, 46),
         # ResNet-50: bn1, 16 bottlenecks x 3, 4 downsample BNs
         "resnet50": ("batchnorm", 1 + 16 * 3 + 4, 5 * (1 + 16 * 3 + 4))}


def _randomize(model: nn.Module, seed: int) -> nn.Module:
    """Give every tensor (running statistics included) a distinct value per seed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if t.is_floating_point():
                r = torch.randn(t.shape, generator=g)
                t.copy_(r.abs() + 0.5 if key.endswith("running_var") else r * 0.1)
            else:
                t.fill_(seed + 7)  # num_batches_tracked
    return model.eval()


@functools.cache
def _pair(arch: str) -> tuple[nn.Module, nn.Module]:
    """(RGB model, +PI model), built once per session; tests must not modify them."""
    rgb = FrameClassifier(build_backbone(arch, weights=None, in_channels=3), NUM_CLASSES)
    pi = FrameClassifier(build_backbone(arch, weights=None, in_channels=5), NUM_CLASSES)
    return _randomize(rgb, 0), _randomize(pi, 1)


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _check_moved(out: nn.Module, rgb: nn.Module, pi: nn.Module, moved: set[str]) -> None:
    """Moved keys equal the source (+PI), every other key the destination (RGB)."""
    so, sr, sp = out.state_dict(), rgb.state_dict(), pi.state_dict()
    assert so.keys() == sr.keys()
    for k, v in so.items():
        ref = sp[k] if k in moved else sr[k]
        assert torch.equal(v, ref), k
        if k in moved:  # the test is not vacuous: source and destination differ there
            assert not torch.equal(sp[k], sr[k]), k


@pytest.mark.parametrize("arch", ARCHS)
def test_first_conv_and_channel_norms(arch):
    rgb, pi = _pair(arch)
    for model, cin in ((rgb, 3), (pi, 5)):
        conv = first_conv(model)
        assert isinstance(conv, nn.Conv2d) and conv.in_channels == cin
        assert dict(model.named_modules())[first_conv_path(model)] is conv
        assert first_conv(model.backbone) is conv  # a bare Backbone works too
    assert first_conv_path(rgb) == {"resnet18": "backbone.body.conv1",
                                    "resnet50": "backbone.body.conv1"}.get(
        arch, "backbone.body.features.0.0")
    norms = channel_norms(pi)
    assert list(norms) == ["R", "G", "B", "P_blood", "Phi"]
    w = first_conv(pi).weight.detach().numpy()
    for i, v in enumerate(norms.values()):
        assert v == pytest.approx(np.sqrt((w[:, i] ** 2).sum()), rel=1e-6)
    assert list(channel_norms(rgb)) == ["R", "G", "B"]


@pytest.mark.parametrize("arch", ARCHS)
def test_first_conv_cosine(arch):
    rgb, pi = _pair(arch)
    assert first_conv_cosine(rgb, rgb) == pytest.approx(1.0, abs=1e-12)
    c = first_conv_cosine(rgb, pi)
    a = first_conv(rgb).weight.detach().double().numpy().ravel()
    b = first_conv(pi).weight.detach().double().numpy()[:, :3].ravel()
    assert c == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), abs=1e-12)
    assert c == pytest.approx(first_conv_cosine(pi, rgb), abs=1e-15)
    assert -1.0 <= c <= 1.0
    # a widened copy of the RGB model has the same RGB slices: cosine exactly 1
    torch.manual_seed(0)
    widened = build_backbone(arch, weights=None, in_channels=5)
    with torch.no_grad():
        widened.first_conv.weight[:, :3] = first_conv(rgb).weight
    assert first_conv_cosine(rgb, widened) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("arch", ARCHS)
def test_bn_transplant(arch):
    rgb, pi = _pair(arch)
    before_rgb, before_pi = _snapshot(rgb), _snapshot(pi)
    t = bn_transplant(rgb, pi)
    kind, layers, tensors = NORMS[arch]
    assert (t.what, t.kind) == ("bn", kind) and norm_kind(rgb) == kind
    assert len(t.modules) == layers and len(t.tensors) == tensors
    assert t.n_parameters > 0
    _check_moved(t.model, rgb, pi, set(t.tensors))
    assert first_conv(t.model).in_channels == 3  # the RGB convolutions stay
    # the inputs are untouched and the copy is independent of them
    for k, v in rgb.state_dict().items():
        assert torch.equal(v, before_rgb[k])
    for k, v in pi.state_dict().items():
        assert torch.equal(v, before_pi[k])
    assert t.model is not rgb
    assert t.model(torch.rand(2, 3, 32, 32)).shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["B", "C", "D", "E", "F"])
def test_subset_transplant(arch, name):
    rgb, pi = _pair(arch)
    t = subset_transplant(rgb, pi, name)
    assert (t.what, t.kind) == (name, "subset")
    assert t.modules == subset_paths(rgb, name)
    sub = SUBSETS[arch][name]
    assert t.modules == tuple(f"backbone.body.{b}" for b in sub.blocks) + (
        ("head",) if sub.head else ())
    moved = set(t.tensors)
    assert moved == {k for k in rgb.state_dict() if k.startswith(tuple(m + "." for m in t.modules))}
    assert moved and not any(k.startswith(STEM[arch]) for k in moved)
    _check_moved(t.model, rgb, pi, moved)
    assert t.model(torch.rand(2, 3, 32, 32)).shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("arch", ARCHS)
def test_subsets_partition_everything_but_the_stem(arch):
    rgb, pi = _pair(arch)
    keys = {n: set(subset_transplant(rgb, pi, n).tensors) for n in "BCDEF"}
    parts = [keys[n] for n in "BCDE"]
    assert set().union(*parts) == keys["F"]
    assert sum(map(len, parts)) == len(keys["F"])  # disjoint
    rest = set(rgb.state_dict()) - keys["F"]
    assert rest and all(k.startswith(STEM[arch]) for k in rest)
    assert "head.weight" in keys["E"] and "head.weight" not in keys["D"]


def test_paper_subset_table_for_efficientnet():
    desc = {n: s.description for n, s in SUBSETS["efficientnet_b0"].items()}
    assert desc["B"] == "features.1, features.2"
    assert desc["C"] == "features.3, features.4, features.5"
    assert desc["D"] == "features.6, features.7"
    assert desc["E"] == "features.8 + classifier"
    assert desc["F"] == ", ".join(f"features.{i}" for i in range(1, 9)) + " + classifier"


def test_errors_say_how_to_fix():
    rgb, pi = _pair("resnet18")
    with pytest.raises(ConfigError, match=r"Unknown subset 'Z'.*B \(early: layer1\)"):
        subset_transplant(rgb, pi, "Z")
    with pytest.raises(ConfigError, match="same backbone"):
        bn_transplant(rgb, _pair("efficientnet_b0")[1])
    with pytest.raises(ConfigError, match="same backbone"):
        first_conv_cosine(rgb, _pair("efficientnet_b0")[0])
    with pytest.raises(ConfigError, match="no pipi Backbone"):
        first_conv(nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="FrameClassifier"):
        subset_paths(rgb.backbone, "E")
    other = FrameClassifier(build_backbone("resnet18", weights=None), 3)
    with pytest.raises(ConfigError, match="differ in shape|shape mismatch"):
        subset_transplant(rgb, other, "B")
