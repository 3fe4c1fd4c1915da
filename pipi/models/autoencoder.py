"""C3: the Normal-class autoencoder and its reconstruction-residual feature.

A UNet-shaped autoencoder *without* skip connections (so everything must pass the 7x7x64
bottleneck): five stride-2 encoder blocks 224 -> 112 -> 56 -> 28 -> 14 -> 7 with widths
16, 32, 64, 128, 64, and a mirrored decoder. 880,595 parameters (paper: ~9e5).
Inputs are RGB in [0, 1] (not ImageNet-normalised); the output is a sigmoid in [0, 1].
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from pipi.errors import ConfigError

__all__ = ["ENCODER_WIDTHS", "RESIDUAL_GRID", "NormalAutoencoder", "residual_features"]

ENCODER_WIDTHS: tuple[int, ...] = (16, 32, 64, 128, 64)  # paper, Section "training"
RESIDUAL_GRID = 8  # residual pooled to 8 x 8 -> 3 * 8 * 8 = 192 features


def _conv_bn_relu(cin: int, cout: int, *, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    ]


class _EncoderBlock(nn.Sequential):
    """Halve the resolution: 3x3 stride-2 conv cin -> cout, then 3x3 conv cout -> cout."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(*_conv_bn_relu(cin, cout, stride=2), *_conv_bn_relu(cout, cout))


class _DecoderBlock(nn.Sequential):
    """Double the resolution: 2x2 stride-2 transpose conv cin -> cin, then two 3x3 convs."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(
            nn.ConvTranspose2d(cin, cin, kernel_size=2, stride=2),
            *_conv_bn_relu(cin, cout),
            *_conv_bn_relu(cout, cout),
        )


class NormalAutoencoder(nn.Module):
    """Skip-free convolutional autoencoder trained (L1) on Normal-class frames.

    Parameters
    ----------
    in_channels : int
        Image channels (3, RGB in [0, 1]).

    Notes
    -----
    Encoder: ``in -> 16 -> 32 -> 64 -> 128 -> 64`` channels, each block halving the
    resolution (224 -> 7 for a 224 input; any size divisible by 32 works). Decoder mirrors it:
    ``64 -> 128 -> 64 -> 32 -> 16 -> 16`` channels, each block doubling the resolution, then a
    1x1 conv to ``in_channels`` and a sigmoid.
    """

    def __init__(self, in_channels: int = 3) -> None:
        super().__init__()
        if in_channels < 1:
            raise ConfigError(f"in_channels must be >= 1, got {in_channels}")
        self.in_channels = in_channels
        enc_in = (in_channels, *ENCODER_WIDTHS[:-1])
        self.encoder = nn.Sequential(
            *(_EncoderBlock(a, b) for a, b in zip(enc_in, ENCODER_WIDTHS, strict=True))
        )
        dec_widths = (*ENCODER_WIDTHS[::-1][1:], ENCODER_WIDTHS[0])  # 128, 64, 32, 16, 16
        dec_in = (ENCODER_WIDTHS[-1], *dec_widths[:-1])
        self.decoder = nn.Sequential(
            *(_DecoderBlock(a, b) for a, b in zip(dec_in, dec_widths, strict=True))
        )
        self.to_image = nn.Conv2d(dec_widths[-1], in_channels, kernel_size=1)
        self.downsampling = 2 ** len(ENCODER_WIDTHS)

    def encode(self, x: Tensor) -> Tensor:
        """Bottleneck code: (B, in, H, W) -> (B, 64, H/32, W/32)."""
        h, w = x.shape[-2:]
        if h % self.downsampling or w % self.downsampling:
            raise ValueError(
                f"input height and width must be divisible by {self.downsampling}, got {h}x{w}"
            )
        return self.encoder(x)

    def decode(self, z: Tensor) -> Tensor:
        """Reconstruction in [0, 1]: (B, 64, h, w) -> (B, in, 32h, 32w)."""
        return self.to_image(self.decoder(z)).sigmoid()

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruct ``x``: (B, in, H, W) -> (B, in, H, W)."""
        return self.decode(self.encode(x))


def residual_features(ae: NormalAutoencoder, x: Tensor, *, grid: int = RESIDUAL_GRID) -> Tensor:
    """C3 feature: ``|x - AE(x)|`` average-pooled to ``grid x grid`` and flattened.

    Parameters
    ----------
    ae : NormalAutoencoder
        The trained autoencoder; its mode (train/eval) and grad state are the caller's.
    x : Tensor
        (B, 3, H, W) RGB in [0, 1], H and W divisible by 32.
    grid : int
        Pooled resolution (8 in the paper).

    Returns
    -------
    Tensor
        (B, 3 * grid * grid) = (B, 192) for RGB and the default grid.
    """
    residual = (x - ae(x)).abs()  # (B, 3, H, W)
    return F.adaptive_avg_pool2d(residual, grid).flatten(1)  # (B, 3 * grid * grid)
