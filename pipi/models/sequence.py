"""The sequence-aware head: the C2 encoder (optional) plus ``SequenceHead`` over the streams."""

from __future__ import annotations

import torch
from torch import nn

from pipi.classes import NUM_CLASSES
from pipi.models.temporal import SequenceHead, TemporalEncoder


class SequenceModel(nn.Module):
    """C2 encoder (optional) plus ``SequenceHead`` over the cell's streams.

    ``forward(emb, centre, mask, c1=None, c3=None)``: ``emb`` (B, W, D) window embeddings,
    ``centre`` (B,), ``mask`` (B, W) True at padding, ``c1`` (B, 8|13), ``c3`` (B, 192).
    Without C2 the centre frame's embedding is used as is.
    """

    def __init__(self, *, emb_dim: int, window: int, temporal: bool, c1_dim: int = 0,
                 c3_dim: int = 0, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.temporal = TemporalEncoder(emb_dim, window=window) if temporal else None
        dims = {"c2" if temporal else "emb": emb_dim}
        if c1_dim:
            dims["c1"] = c1_dim
        if c3_dim:
            dims["c3"] = c3_dim
        self.spec = {"emb_dim": emb_dim, "window": window, "temporal": temporal,
                     "c1_dim": c1_dim, "c3_dim": c3_dim, "num_classes": num_classes}
        self.head = SequenceHead(dims, num_classes)

    def forward(self, emb, centre, mask, c1=None, c3=None):
        if self.temporal is not None:
            streams = {"c2": self.temporal(emb, centre, key_padding_mask=mask)}
        else:
            streams = {"emb": emb[torch.arange(len(emb), device=emb.device), centre]}
        if c1 is not None:
            streams["c1"] = c1
        if c3 is not None:
            streams["c3"] = c3
        return self.head(streams)
