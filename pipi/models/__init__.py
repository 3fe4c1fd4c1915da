"""Neural-network modules: backbones, per-frame heads, C2 temporal encoder, C3 autoencoder.

The face is light (issue 39): importing ``pipi.models`` or its torch-free
:mod:`pipi.models.specs` (architecture names, foundation towers, transplant subsets) loads no
torch; a name below is imported from its module on first use (PEP 562, as ``pipi.tracking``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipi import lazy_face

if TYPE_CHECKING:   # what each name is, for readers and type checkers; loaded on first use
    from pipi.models.autoencoder import NormalAutoencoder, residual_features
    from pipi.models.backbones import Backbone, build_backbone, widen_first_conv
    from pipi.models.heads import AuxDecoder, DistillClassifier, FrameClassifier, distill_loss
    from pipi.models.specs import ARCHS, FEATURE_DIMS, PRIOR_INITS
    from pipi.models.temporal import SequenceHead, TemporalEncoder, sinusoidal_encoding

#: The submodule each public name lives in.
_MODULES: dict[str, tuple[str, ...]] = {
    "autoencoder": ("NormalAutoencoder", "residual_features"),
    "backbones": ("Backbone", "build_backbone", "widen_first_conv"),
    "heads": ("AuxDecoder", "DistillClassifier", "FrameClassifier", "distill_loss"),
    "specs": ("ARCHS", "FEATURE_DIMS", "PRIOR_INITS"),
    "temporal": ("SequenceHead", "TemporalEncoder", "sinusoidal_encoding"),
}
_WHERE = {name: mod for mod, names in _MODULES.items() for name in names}


__getattr__, __dir__ = lazy_face(__name__, _WHERE)


__all__ = [
    "ARCHS", "FEATURE_DIMS", "PRIOR_INITS", "AuxDecoder", "Backbone", "DistillClassifier",
    "FrameClassifier", "NormalAutoencoder", "SequenceHead", "TemporalEncoder", "build_backbone",
    "distill_loss", "residual_features", "sinusoidal_encoding", "widen_first_conv",
]
