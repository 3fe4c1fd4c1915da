"""Galar staging on the tiny synthetic release (the real on-disk format) and broken copies of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipi.data import synth
from pipi.data.staging import stage_galar


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("galar") / "release"
    return synth.synthesize_galar(out, preset="tiny", seed=3, progress=False)


@pytest.mark.slow
def test_stage_demo_release(tmp_path):
    """The demo release (24 videos, ids >= 61 among them, all four capsule systems)."""
    release = synth.synthesize_galar(tmp_path / "demo", preset="demo", seed=0, progress=False)
    r = stage_galar(release, tmp_path / "out", frames_per_class=40, seed=0, progress=False)
    m = r.manifest
    assert set(m["vendor_folds"]) == set(synth.GALAR_CAPSULE_SYSTEMS)
    assert m["galar_official_split"]["test"] and m["galar_official_split"]["train"]
    assert r.frames.groupby("class").size().max() <= 40
    assert set(m["evaluable_classes"]) >= {"Angiectasia", "Blood - fresh", "Lymphangiectasia",
                                           "Normal clean mucosa", "Polyp", "Ulcer"}
