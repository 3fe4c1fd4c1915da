"""Model coverage the way timm tests its models: one forward + backward + optimizer step per
(cell x backbone) at 32 px, through the same input path and loss training uses. No MLflow, no
data: random uint8 frames. A cell whose streams do not reach the classifier, a prior channel
that receives no gradient, or a step that leaves the weights unchanged fails here in seconds
rather than in a smoke run."""

from __future__ import annotations

import pytest
import torch

from pipi.cells import CELLS, PER_FRAME_CELLS, SEQUENCE_CELLS
from pipi.classes import NUM_CLASSES
from pipi.config import make_config
from pipi.models.backbones import ARCHS
from pipi.models.sequence import SequenceModel
from pipi.training.frames import FrameInputs, _frame_loss, build_frame_model, optimizer_step

SIZE = 32


def _first_conv(model: torch.nn.Module) -> torch.nn.Conv2d:
    return next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))


@pytest.mark.parametrize("backbone", ARCHS)
@pytest.mark.parametrize("cell", PER_FRAME_CELLS)
def test_one_training_step_per_frame_cell_and_backbone(cell, backbone):
    torch.manual_seed(0)
    cfg = make_config(cell=cell, backbone=backbone, seed=0, profile="smoke", weights="none")
    model = build_frame_model(cfg).train()
    gen = torch.Generator().manual_seed(0)
    x8 = torch.randint(0, 256, (4, 3, SIZE, SIZE), generator=gen, dtype=torch.uint8)
    y = torch.tensor([0, 3, 5, 7])
    x, p_blood = FrameInputs(cfg)(x8.float(), train=True, gen=gen, scale=255.0)
    assert x.shape == (4, CELLS[cell].input_channels, SIZE, SIZE)
    assert (p_blood is not None) == (CELLS[cell].input_channels == 5 or CELLS[cell].distill)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = _frame_loss(model, x, y, p_blood, torch.ones(NUM_CLASSES), cfg, torch.device("cpu"))
    value = optimizer_step(loss, opt, where=f"{cell}/{backbone}")
    assert torch.isfinite(torch.tensor(value))
    conv = _first_conv(model)
    assert conv.in_channels == CELLS[cell].input_channels
    if CELLS[cell].frozen:  # a linear probe: the backbone is a fixed feature extractor
        assert all(p.grad is None for n, p in model.named_parameters() if not n.startswith("head"))
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
        assert changed and all(n.startswith("head") for n in changed), changed
        return
    assert conv.weight.grad is not None and conv.weight.grad[:, :3].abs().sum() > 0
    if CELLS[cell].input_channels == 5:
        # a prior channel the cell keeps gets gradient; one it zeroes in training gets none
        for ch in (3, 4):
            g = conv.weight.grad[:, ch].abs().sum()
            assert (g == 0) == (ch in CELLS[cell].zero_channels), (cell, ch, float(g))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "the optimizer step changed no weight"
    model.eval()
    with torch.no_grad():
        out = model(FrameInputs(cfg)(x8.float(), train=False, scale=255.0)[0])
    logits = out[0] if isinstance(out, tuple) else out
    assert logits.shape == (4, NUM_CLASSES)


@pytest.mark.parametrize("cell", SEQUENCE_CELLS)
def test_one_training_step_per_sequence_head(cell):
    """The head each sequence cell trains on its frozen backbone's window embeddings."""
    torch.manual_seed(0)
    c = CELLS[cell]
    c1_dim = {None: 0, "c8": 8, "c8_patient": 8, "c13": 13}[c.c1]
    model = SequenceModel(emb_dim=16, window=4, temporal=c.temporal, c1_dim=c1_dim,
                          c3_dim=192 if c.c3 else 0)
    batch = {"emb": torch.randn(3, 4, 16), "centre": torch.tensor([0, 2, 3]),
             "mask": torch.tensor([[False] * 4, [False] * 4, [True, False, False, False]])}
    if c1_dim:
        batch["c1"] = torch.randn(3, c1_dim)
    if c.c3:
        batch["c3"] = torch.randn(3, 192)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 2, 3]))
    optimizer_step(loss, opt, where=cell)
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), cell
    assert (model.temporal is not None) == c.temporal
