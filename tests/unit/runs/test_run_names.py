"""Run names carry what tells runs apart: profile and the data's short name (issue 30: a demo
and a smoke run were both `pi-efficientnet_b0-s42`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipi.config import make_config
from pipi.runs.data import data_short_name, default_staged
from pipi.runs.training import run_name


@pytest.mark.parametrize("folder,short", [
    (default_staged("demo"), "synthetic-demo"),
    (default_staged("tiny", 3), "synthetic-tiny-s3"),
    (Path("/data/staged/kvasir-paper-split"), "kvasir-paper-split"),
    (Path("/data/kvasir-synthetic-unknownpreset-s0"), "kvasir-synthetic-unknownpreset-s0"),
])
def test_the_data_short_name_is_the_staged_folder_or_the_synthetic_preset(folder, short):
    assert data_short_name(folder) == short


def test_the_same_arm_on_two_data_and_profiles_has_two_names():
    demo = make_config(cell="pi", backbone="efficientnet_b0", seed=42, profile="demo")
    smoke = make_config(cell="pi", backbone="efficientnet_b0", seed=42, profile="smoke")
    a = run_name(demo, default_staged("demo"))
    b = run_name(smoke, default_staged("tiny"))
    assert a == "pi-s42-demo-synthetic-demo-efficientnet_b0"
    assert b == "pi-s42-smoke-synthetic-tiny-efficientnet_b0"
    assert a[:20] != b[:20]   # the runs table shows about 20 characters
