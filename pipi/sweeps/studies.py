"""The named sweeps and the executors, without torch: what ``pipi ablate --help`` lists and
what a plan starts from (:mod:`pipi.sweeps.plan` plans the children and re-exports these)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipi.errors import ConfigError
from pipi.models.specs import FOUNDATION, PAPER_ARCHS

EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class Study:
    """A named sweep: which cells (and, for cross_backbone, which backbones) it trains."""

    name: str
    description: str
    cells: tuple[str, ...] = ()
    backbones: tuple[str, ...] | None = None   # None: the user's backbones
    kind: str = "train"                        # train | channel_infer | pi_tta


STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("eight_cell", "per-frame baseline a and the nine sequence cells (paper Table 8-cell)",
          ("a", "b", "c", "c_prime", "c_dprime", "d", "e", "b_plus", "e_plus", "e_dagger")),
    Study("per_frame", "the per-frame arms: RGB, +PI input fusion, distillation",
          ("a", "pi", "distill")),
    Study("cross_backbone", "a and pi on EfficientNet-B0, ResNet-18 and ConvNeXt-Tiny",
          ("a", "pi"), backbones=PAPER_ARCHS),
    Study("channel_train", "training-time channel ablation: both, P_blood only, Phi only",
          ("pi", "pblood_only", "phi_only")),
    Study("probe", "frozen foundation backbone + linear probe (DINOv2, BiomedCLIP); pass "
          "weights=<published checkpoint> and one backbone per sweep", ("probe",),
          backbones=tuple(FOUNDATION)),
    Study("limitation", "the paper's limitation experiment: C2 with and without the C1 "
          "summaries on a frozen ImageNet ResNet-50 (no capsule fine-tuning)",
          ("b_frozen", "c1_frozen"), backbones=("resnet50",)),
    Study("channel_infer", "inference-time channel ablation of finished pi runs",
          ("pi",), kind="channel_infer"),
    Study("pi_tta", "PI test-time adaptation probes (paper null result) of finished a runs",
          ("a",), kind="pi_tta"),
)}


def get_study(name: str) -> Study:
    try:
        return STUDIES[name]
    except KeyError:
        raise ConfigError(f"study={name!r} is unknown. Available: {list(STUDIES)}") from None


def parse_list(text: str | Sequence | None, *, cast=str, name: str = "value") -> tuple:
    """'41,42' -> (41, 42); empty -> (); a bad item is a ConfigError naming ``name``."""
    if text is None:
        return ()
    if isinstance(text, str):
        text = [t for t in (s.strip() for s in text.split(",")) if t]
    out = []
    for t in text:
        try:
            out.append(cast(t))
        except (TypeError, ValueError):
            raise ConfigError(f"{name}={t!r} is not a valid {getattr(cast, '__name__', 'value')}; "
                              f"pass a comma-separated list such as {name}=41,42") from None
    return tuple(out)
