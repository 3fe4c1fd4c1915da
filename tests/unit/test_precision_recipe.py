"""``precision=auto`` under the paper's recipe is fp32 on a CUDA device (simulated: the
capability queries of torch.cuda are monkeypatched; no GPU is needed)."""

from __future__ import annotations

import shlex

import pytest
import torch

from pipi.config import make_config, recipe_command
from pipi.runtime import auto_precision, resolve_runtime, runtime_of


@pytest.fixture
def fake_cuda(monkeypatch):
    """A visible CUDA device that supports bf16 (as every Ampere-or-later GPU does)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Fake H100")


def test_paper_profile_auto_is_fp32_on_cuda(fake_cuda):
    rt = runtime_of(make_config(cell="pi", profile="paper"))
    assert rt.device.type == "cuda"
    assert rt.precision == "fp32" and rt.amp_dtype is None
    assert resolve_runtime(precision="auto", profile="paper").precision == "fp32"


@pytest.mark.parametrize("profile", ["demo", "smoke"])
def test_machine_profiles_auto_is_bf16_on_cuda(fake_cuda, profile):
    assert runtime_of(make_config(cell="pi", profile=profile)).precision == "bf16"


def test_mixed_precision_only_when_asked_under_paper(fake_cuda):
    for asked in ("bf16", "fp16"):
        rt = runtime_of(make_config(cell="a", profile="paper", precision=asked))
        assert rt.precision == asked


def test_no_bf16_gpu_falls_back_to_fp32(fake_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert auto_precision(torch.device("cuda"), profile="demo") == "fp32"


def test_cpu_auto_is_fp32_everywhere():
    for profile in ("paper", "demo", "smoke"):
        assert auto_precision(torch.device("cpu"), profile=profile) == "fp32"


def _params(cmd: str) -> dict:
    words = shlex.split(cmd)
    return dict(w.split("=", 1) for w, prev in zip(words[1:], words) if prev == "-P")


def test_recipe_tag_names_resolved_mixed_precision():
    demo = make_config(cell="pi", profile="demo")
    assert _params(recipe_command(demo, precision="bf16"))["precision"] == "bf16"
    assert "precision" not in _params(recipe_command(demo, precision="fp32"))
    paper = make_config(cell="pi", profile="paper")  # auto -> fp32: the recipe holds anywhere
    assert "precision" not in _params(recipe_command(paper, precision="fp32"))
    asked = make_config(cell="pi", profile="paper", precision="fp16")
    assert _params(recipe_command(asked, precision="fp16"))["precision"] == "fp16"
