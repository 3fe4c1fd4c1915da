"""Foundation-model linear probes through timm: frozen backbone, trained linear head; weights
in each model's published format; any timm:<name> backbone with the 5-channel input."""

from __future__ import annotations

import pytest
import timm
import torch

from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.models.timm_backbones import build_timm_backbone
from pipi.training.frames import build_frame_model

SIZE = 32  # small image: DINOv2's 14 px patches are padded to a 3 x 3 grid


@pytest.mark.parametrize("backbone,dim", [("dinov2_vitb14", 768), ("biomedclip_vitb16", 512)])
def test_probe_trains_only_the_head(backbone, dim):
    torch.manual_seed(0)
    cfg = make_config(cell="probe", backbone=backbone, profile="smoke", weights="none")
    model = build_frame_model(cfg)
    assert model.head.in_features == dim and model.head.out_features == 14
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    model.train()
    assert not model.backbone.training  # frozen features: eval mode even in training
    x, y = torch.rand(4, 3, SIZE, SIZE), torch.tensor([0, 1, 2, 3])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    assert model.head.weight.grad is not None and model.head.weight.grad.abs().sum() > 0
    opt.step()
    after = model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"head.weight", "head.bias"}


def _random_state_dict(timm_name: str) -> dict[str, torch.Tensor]:
    """Random tensors in the layout of timm's ``timm_name`` (built on the meta device: no
    weight init, which is most of the cost of building a ViT-B on a CPU)."""
    with torch.device("meta"):
        ref = timm.create_model(timm_name, pretrained=False, num_classes=0)
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn(v.shape, generator=g) * 0.02 for k, v in ref.state_dict().items()}


def _published_dinov2(tmp_path):
    """A state dict in DINOv2's released layout: timm's ViT-B/14 keys plus mask_token, at
    the released 518 px position grid (37 x 37 + CLS)."""
    sd = _random_state_dict("vit_base_patch14_dinov2")
    sd["mask_token"] = torch.zeros(1, 768)
    assert sd["pos_embed"].shape == (1, 37 * 37 + 1, 768)
    path = tmp_path / "dinov2_vitb14_pretrain.pth"
    torch.save(sd, path)
    return path, sd


def test_dinov2_published_weights_load_through_timms_filter(tmp_path):
    path, sd = _published_dinov2(tmp_path)
    b = build_timm_backbone("dinov2_vitb14", weights=str(path), image_size=SIZE)
    got = b.body.state_dict()
    assert torch.equal(got["blocks.3.attn.qkv.weight"], sd["blocks.3.attn.qkv.weight"])
    assert torch.equal(got["cls_token"], sd["cls_token"])
    assert got["pos_embed"].shape[1] != sd["pos_embed"].shape[1]  # resampled to the run's grid


def test_biomedclip_open_clip_checkpoint_maps_visual_keys(tmp_path):
    trunk = _random_state_dict("vit_base_patch16_224")
    with torch.device("meta"):
        tower = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0)
    tower = tower.to_empty(device="cpu")
    tower.load_state_dict(trunk)                  # the reference tower: the file's own weights
    tower.eval()
    sd = {f"visual.trunk.{k}": v for k, v in trunk.items()}
    proj = torch.randn(512, 768)
    sd["visual.head.proj.weight"] = proj
    sd["text.transformer.encoder.layer.0.attention.self.query.weight"] = torch.zeros(4, 4)
    sd["logit_scale"] = torch.tensor(4.6)
    path = tmp_path / "open_clip_pytorch_model.bin"
    torch.save(sd, path)
    b = build_timm_backbone("biomedclip_vitb16", weights=str(path), image_size=224)
    assert torch.equal(b.body.head.weight, proj)
    assert torch.equal(b.body.blocks[0].norm1.weight, sd["visual.trunk.blocks.0.norm1.weight"])
    x = torch.rand(1, 3, 224, 224)
    want = tower.forward_head(tower.forward_features(x)) @ proj.T
    torch.testing.assert_close(b(x), want, rtol=1e-4, atol=1e-4)


def test_non_matching_keys_are_one_error_listing_them(tmp_path):
    path, sd = _published_dinov2(tmp_path)
    sd.pop("blocks.0.norm1.weight")
    sd["extra.thing"] = torch.zeros(2)
    torch.save(sd, path)
    with pytest.raises(ConfigError, match=r"missing \['blocks.0.norm1.weight'\].*"
                                          r"unexpected \['extra.thing'\]"):
        build_timm_backbone("dinov2_vitb14", weights=str(path), image_size=SIZE)


@pytest.mark.parametrize("name", ["timm:resnet18", "dinov2_vitb14"])
def test_five_channel_input_widens_the_first_layer(name):
    torch.manual_seed(0)
    rgb = build_timm_backbone(name, weights="none", in_channels=3, image_size=SIZE)
    torch.manual_seed(0)
    five = build_timm_backbone(name, weights="none", in_channels=5, image_size=SIZE,
                               prior_init="zeros")
    assert five.first_conv.in_channels == 5
    torch.testing.assert_close(five.first_conv.weight[:, :3], rgb.first_conv.weight)
    x = torch.rand(2, 3, SIZE, SIZE)
    rgb.eval(), five.eval()
    torch.testing.assert_close(five(torch.cat([x, torch.rand(2, 2, SIZE, SIZE)], 1)), rgb(x))


def test_timm_backbones_config_rules():
    cfg = make_config(cell="pi", backbone="timm:resnet18", profile="smoke", weights="none")
    assert build_frame_model(cfg).backbone.in_channels == 5
    with pytest.raises(ConfigError, match="torchvision backbone"):
        make_config(cell="distill", backbone="dinov2_vitb14", profile="smoke")
    with pytest.raises(ConfigError, match="weights=imagenet does not apply"):
        build_timm_backbone("dinov2_vitb14", weights="imagenet")
    with pytest.raises(ConfigError, match="timm has no model"):
        build_timm_backbone("timm:no_such_net_xyz", weights="none")
    with pytest.raises(ConfigError, match="is unknown"):
        make_config(cell="a", backbone="vit_huge", profile="smoke")
