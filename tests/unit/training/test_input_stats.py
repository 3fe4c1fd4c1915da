"""Each backbone's RGB input is normalised with the statistics it was trained with: CLIP's for
BiomedCLIP's tower, a timm model's ``pretrained_cfg``, ImageNet's for the torchvision ones;
the fused train-time path and the evaluation path agree, and the prior channels stay raw."""

import pytest
import torch

from pipi.config import make_config
from pipi.models.timm_backbones import CLIP_STATS, IMAGENET_STATS, input_stats
from pipi.training.frames import FrameInputs


@pytest.mark.parametrize(("backbone", "cell", "want"), [
    ("resnet18", "a", IMAGENET_STATS),
    ("efficientnet_b0", "pi", IMAGENET_STATS),
    ("dinov2_vitb14", "probe", IMAGENET_STATS),
    ("biomedclip_vitb16", "probe", CLIP_STATS),
])
def test_evaluation_inputs_use_the_backbones_statistics(backbone, cell, want):
    cfg = make_config(cell=cell, backbone=backbone, profile="smoke", weights="none")
    x01 = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    x, _ = FrameInputs(cfg)(x01, train=False)
    mean = torch.tensor(want[0]).view(1, 3, 1, 1)
    std = torch.tensor(want[1]).view(1, 3, 1, 1)
    torch.testing.assert_close(x[:, :3], (x01 - mean) / std)


def test_the_fused_train_path_normalises_with_the_same_statistics():
    """With augmentation that changes nothing, train=True (normalisation folded into the
    colour matrix) equals the evaluation path, for CLIP's statistics too."""
    cfg = make_config(cell="probe", backbone="biomedclip_vitb16", profile="smoke",
                      weights="none", hflip=0.0, rotation_deg=0.0, jitter=(0.0, 0.0, 0.0))
    x01 = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    inputs = FrameInputs(cfg)
    fused, _ = inputs(x01, train=True, gen=torch.Generator().manual_seed(2))
    plain, _ = inputs(x01, train=False)
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)


def test_a_timm_model_brings_its_own_statistics():
    import timm

    want = timm.models.get_pretrained_cfg("vit_base_patch16_clip_224.openai")
    assert input_stats("timm:vit_base_patch16_clip_224.openai") == (tuple(want.mean),
                                                                   tuple(want.std))
    assert input_stats("timm:vit_base_patch16_clip_224.openai") == CLIP_STATS
    assert input_stats("timm:resnet50") == IMAGENET_STATS
    assert input_stats("timm:no_such_model_xyz") == IMAGENET_STATS
