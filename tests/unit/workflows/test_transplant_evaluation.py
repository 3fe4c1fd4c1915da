"""The transplant workflow's evaluations on EfficientNet-B0 (BatchNorm) and ConvNeXt-Tiny
(LayerNorm): each of bn, B..F moves the donor's tensors into the RGB model, tags the kind the
donor's norms are, and the moved model still runs. Training and MLflow are covered once, on
ResNet-18, by tests/integration/test_mechanisms.py; here the models are built, not trained."""

from __future__ import annotations

import pytest
import torch

from pipi.classes import NUM_CLASSES
from pipi.models import FrameClassifier, build_backbone
from pipi.runs.runsets import SourceRun
from pipi.workflows.transplant import transplant_evaluation


@pytest.mark.parametrize("arch,kind", [("efficientnet_b0", "batchnorm"),
                                       ("convnext_tiny", "layernorm")])
def test_every_transplant_variant_on_the_other_backbones(arch, kind):
    torch.manual_seed(0)
    rgb = FrameClassifier(build_backbone(arch, weights=None, in_channels=3), NUM_CLASSES).eval()
    pi = FrameClassifier(build_backbone(arch, weights=None, in_channels=5), NUM_CLASSES).eval()
    with torch.no_grad():  # fresh norms are all 1/0 in both: give the donor its own values
        for key, v in pi.state_dict().items():
            if v.is_floating_point():
                r = torch.randn(v.shape)
                v.copy_(r.abs() + 0.5 if key.endswith("running_var") else r * 0.1)
    donor = SourceRun("d" * 32, "pi", arch, 3, "digest", "/data")
    x = torch.rand(2, 3, 32, 32)
    before = {k: v.clone() for k, v in rgb.state_dict().items()}
    donor_sd = pi.state_dict()  # read once: a state_dict() per key was most of this test's time
    for what in ("bn", "B", "C", "D", "E", "F"):
        ev = transplant_evaluation(what, donor=donor, models=lambda run_id: (pi, None))
        assert ev.variant == f"transplant_{what}" and ev.tags["pipi.donor_run_id"] == donor.run_id
        assert ev.tags["pipi.transplant_kind"] == (kind if what == "bn" else "subset")
        moved = ev.model_transform(rgb, None)
        moved_sd = moved.state_dict()
        changed = [k for k, v in moved_sd.items()
                   if not torch.equal(v, before[k]) and k in donor_sd]
        assert changed, what                          # something came from the donor
        assert all(torch.equal(moved_sd[k], donor_sd[k]) for k in changed)
        with torch.no_grad():
            assert torch.isfinite(moved(x)).all()
    assert all(torch.equal(v, before[k]) for k, v in rgb.state_dict().items())  # source kept
