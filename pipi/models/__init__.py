"""Neural-network modules: backbones, per-frame heads, C2 temporal encoder, C3 autoencoder."""

from pipi.models.autoencoder import NormalAutoencoder, residual_features
from pipi.models.backbones import (
    ARCHS,
    FEATURE_DIMS,
    PRIOR_INITS,
    Backbone,
    build_backbone,
    widen_first_conv,
)
from pipi.models.heads import AuxDecoder, DistillClassifier, FrameClassifier, distill_loss
from pipi.models.temporal import SequenceHead, TemporalEncoder, sinusoidal_encoding

__all__ = [
    "ARCHS",
    "FEATURE_DIMS",
    "PRIOR_INITS",
    "AuxDecoder",
    "Backbone",
    "DistillClassifier",
    "FrameClassifier",
    "NormalAutoencoder",
    "SequenceHead",
    "TemporalEncoder",
    "build_backbone",
    "distill_loss",
    "residual_features",
    "sinusoidal_encoding",
    "widen_first_conv",
]
