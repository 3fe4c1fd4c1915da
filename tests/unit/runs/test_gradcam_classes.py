"""The Grad-CAM overlap (transplant -P study=gradcam) on runs of another class set than
Kvasir-Capsule's 14: classes are named and indexed in the runs' own class set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from pipi.classes import CLASSES, ClassSet
from pipi.config import make_config
from pipi.runs.gradcam import GRADCAM_CLASSES, gradcam_classes, gradcam_overlap, sample_frames
from pipi.training.frames import build_frame_model

OWN = ClassSet(("Angioectasia", "Bleeding", "Worms"))  # "Bleeding" is index 1, as Kvasir's
# "Angiectasia" is: a Kvasir index would pick the wrong frames


def _frames() -> pd.DataFrame:
    lab = np.array([0, 1, 2, 1, 0, 2, 1, 1])
    return pd.DataFrame({"path": [f"test/{OWN[k]}/{i}.jpg" for i, k in enumerate(lab)],
                         "video_id": [f"v{i}" for i in range(len(lab))],
                         "class_index": lab, "class": [OWN[k] for k in lab],
                         "split": ["test"] * 7 + ["train"]})


def test_the_focal_classes_are_the_paper_s_on_kvasir_and_every_class_elsewhere():
    assert gradcam_classes() == gradcam_classes(CLASSES) == GRADCAM_CLASSES
    assert gradcam_classes(OWN.names) == OWN.names


def test_frames_are_sampled_by_the_class_set_s_own_index():
    frames = _frames()
    picked = sample_frames(frames, classes=OWN.names, n_frames=5, seed=0, names=OWN.names)
    for name, rows in picked.items():
        assert set(frames["class"].iloc[rows]) == {name}
        assert set(frames["split"].iloc[rows]) == {"test"}
    assert sorted(picked["Bleeding"].tolist()) == [1, 3, 6]


def test_gradcam_overlap_on_runs_of_another_class_set():
    frames = _frames()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (len(frames), 3, 32, 32), dtype=np.uint8)
    cfgs = [make_config(cell=c, backbone="resnet18", weights="none", profile="smoke")
            .with_classes(OWN) for c in ("a", "pi")]
    torch.manual_seed(0)
    models = [build_frame_model(c).eval() for c in cfgs]
    res = gradcam_overlap((models[0], cfgs[0]), (models[1], cfgs[1]), frames, images,
                          n_frames=2, seed=0, device=torch.device("cpu"))
    assert set(res.frames["class"]) == set(OWN.names)
    by_path = frames.set_index("path")["class"]
    assert (by_path.loc[res.frames["path"]].to_numpy() == res.frames["class"].to_numpy()).all()
    assert {f"gradcam/n/{n}" for n in OWN.names} <= set(res.metrics)
