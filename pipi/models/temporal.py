"""C2 temporal aggregation and the sequence-level classifier head.

``TemporalEncoder`` turns a window of per-frame embeddings (16 frames in the paper) into one
aggregated embedding for the window's centre frame. ``SequenceHead`` concatenates the named
feature streams of a cell (e.g. ``{"c1": 8, "c2": 1280, "c3": 192}``) and classifies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from pipi.errors import ConfigError

__all__ = ["SequenceHead", "TemporalEncoder", "sinusoidal_encoding"]


def sinusoidal_encoding(length: int, d_model: int) -> Tensor:
    """Fixed positional encoding of Vaswani et al. (2017), shape (length, d_model).

    ``PE[p, 2i] = sin(p / 10000^(2i / d_model))`` and ``PE[p, 2i + 1] = cos(same angle)``.
    """
    if d_model % 2:
        raise ConfigError(f"d_model must be even for the sinusoidal encoding, got {d_model}")
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # (d/2,)
    angle = position * inv_freq  # (L, d/2)
    pe = torch.empty(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(torch.float32)


class TemporalEncoder(nn.Module):
    """Transformer encoder over a window of frame embeddings; returns the centre token.

    Linear projection ``in_dim -> d_model``, plus the fixed sinusoidal positional encoding
    (added unscaled, before the encoder stack), then ``num_layers`` post-norm
    ``nn.TransformerEncoderLayer`` (ReLU feed-forward as in Vaswani et al.), then the centre
    frame's token through a Linear ``d_model -> out_dim``.

    Parameters
    ----------
    in_dim : int
        Width of the per-frame embeddings (1280 for EfficientNet-B0).
    d_model, nhead, num_layers, dim_feedforward, dropout : int, int, int, int, float
        Transformer shape; the defaults are the paper's (256, 8 heads, 4 layers, 512, 0.1).
    window : int
        Nominal window length (16 frames); sets the size of the precomputed positional table.
        Longer inputs still work (the table is extended on the fly).
    out_dim : int, optional
        Width of the aggregated embedding; defaults to ``in_dim`` ("yields a 1280-d
        aggregated embedding").
    """

    def __init__(
        self,
        in_dim: int,
        *,
        d_model: int = 256,
        nhead: int = 8,
        num_layers: int = 4,
        dim_feedforward: int = 512,
        dropout: float = 0.1,
        window: int = 16,
        out_dim: int | None = None,
    ) -> None:
        super().__init__()
        if d_model % nhead:
            raise ConfigError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        if window < 1 or in_dim < 1 or num_layers < 1:
            raise ConfigError(
                f"in_dim, num_layers and window must be >= 1, got {in_dim}, {num_layers}, {window}"
            )
        self.in_dim = in_dim
        self.d_model = d_model
        self.window = window
        self.out_dim = in_dim if out_dim is None else out_dim
        self.proj = nn.Linear(in_dim, d_model)
        self.register_buffer("pos_encoding", sinusoidal_encoding(window, d_model), persistent=False)
        layer = nn.TransformerEncoderLayer(
            d_model,
            nhead,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            batch_first=True,
        )
        # No nested-tensor fast path: padded positions then follow the same arithmetic in
        # train and eval, and outputs do not depend on which kernel path was taken.
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, self.out_dim)

    def _positions(self, length: int, ref: Tensor) -> Tensor:
        pe = self.pos_encoding
        if length > pe.shape[0]:
            pe = sinusoidal_encoding(length, self.d_model)
        return pe[:length].to(device=ref.device, dtype=ref.dtype)

    def encode(self, x: Tensor, *, key_padding_mask: Tensor | None = None) -> Tensor:
        """All tokens after the encoder stack: (B, T, in_dim) -> (B, T, d_model)."""
        if x.ndim != 3 or x.shape[-1] != self.in_dim:
            raise ValueError(f"expected (B, T, {self.in_dim}) input, got {tuple(x.shape)}")
        h = self.proj(x)  # (B, T, d_model)
        h = h + self._positions(h.shape[1], h)
        return self.encoder(h, src_key_padding_mask=key_padding_mask)

    def forward(
        self,
        x: Tensor,
        centre_index: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Aggregated embedding of each window's centre frame.

        Parameters
        ----------
        x : Tensor
            (B, T, in_dim) per-frame embeddings in frame order.
        centre_index : Tensor
            (B,) integer position of the centre (labelled) frame inside its window; windows at
            the start or end of a video are not centred.
        key_padding_mask : Tensor, optional
            (B, T) bool, True where a position is padding (videos shorter than the window).

        Returns
        -------
        Tensor
            (B, out_dim).
        """
        batch, length = x.shape[0], x.shape[1]
        centre_index = centre_index.to(device=x.device, dtype=torch.long).reshape(-1)
        if centre_index.shape[0] != batch:
            raise ValueError(f"centre_index must have {batch} entries, got {centre_index.shape[0]}")
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.to(device=x.device, dtype=torch.bool)
            if key_padding_mask.shape != (batch, length):
                raise ValueError(
                    f"key_padding_mask must be {(batch, length)}, got "
                    f"{tuple(key_padding_mask.shape)}"
                )
        if not torch.compiler.is_compiling():
            if bool(((centre_index < 0) | (centre_index >= length)).any()):
                raise ValueError(f"centre_index out of range [0, {length}): {centre_index}")
            if key_padding_mask is not None and bool(
                key_padding_mask[torch.arange(batch, device=x.device), centre_index].any()
            ):
                raise ValueError("centre_index points at a padded position")
        h = self.encode(x, key_padding_mask=key_padding_mask)  # (B, T, d_model)
        centre = h[torch.arange(batch, device=x.device), centre_index]  # (B, d_model)
        return self.out(centre)


class SequenceHead(nn.Module):
    """Classifier over named feature streams, concatenated in sorted name order.

    Parameters
    ----------
    stream_dims : dict[str, int]
        Width of each stream, e.g. ``{"c1": 8, "c2": 1280, "c3": 192}``. The concatenation
        order is ``sorted(stream_dims)``, whatever the insertion order of the dicts.
    num_classes : int
        Number of output classes ``K``.
    hidden : int, optional
        If given, a two-layer MLP (Linear, GELU, dropout, Linear); otherwise dropout + Linear.
    dropout : float
        Dropout rate.
    """

    def __init__(
        self,
        stream_dims: Mapping[str, int],
        num_classes: int,
        *,
        hidden: int | None = None,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if not stream_dims:
            raise ConfigError("SequenceHead needs at least one stream")
        bad = {k: v for k, v in stream_dims.items() if int(v) != v or v < 1}
        if bad:
            raise ConfigError(f"stream widths must be positive integers, got {bad}")
        if int(num_classes) != num_classes or num_classes < 2:
            raise ConfigError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        self.stream_order: tuple[str, ...] = tuple(sorted(stream_dims))
        self.stream_dims: dict[str, int] = {k: int(stream_dims[k]) for k in self.stream_order}
        self.in_dim = sum(self.stream_dims.values())
        self.num_classes = int(num_classes)
        if hidden is None:
            self.mlp = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.in_dim, self.num_classes))
        else:
            self.mlp = nn.Sequential(
                nn.Linear(self.in_dim, hidden),
                nn.GELU(),
                nn.Dropout(dropout),
                nn.Linear(hidden, self.num_classes),
            )

    def concat(self, streams: Mapping[str, Tensor]) -> Tensor:
        """Concatenate streams in ``stream_order``: -> (B, in_dim)."""
        if set(streams) != set(self.stream_order):
            raise ValueError(f"expected streams {list(self.stream_order)}, got {sorted(streams)}")
        parts = []
        for name in self.stream_order:
            t = streams[name]
            if t.ndim != 2 or t.shape[1] != self.stream_dims[name]:
                raise ValueError(
                    f"stream {name!r} must be (B, {self.stream_dims[name]}), got {tuple(t.shape)}"
                )
            parts.append(t)
        return torch.cat(parts, dim=1)

    def forward(self, streams: Mapping[str, Tensor]) -> Tensor:
        """Logits (B, K) from a mapping of stream name -> (B, width) tensors."""
        return self.mlp(self.concat(streams))
