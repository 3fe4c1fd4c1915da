"""The cell table: every experiment arm of the paper as data, plus recipes and profiles.

A cell names which feature streams reach the classifier (paper, "Three feature streams"):
C1 as a 5-channel input (``input_channels=5``) or as head-level summaries (``c1``), C2 the
temporal Transformer, C3 the autoencoder residual. ``base_cell`` is the per-frame cell whose
backbone a sequence cell builds on.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from pipi.errors import ConfigError, UnknownCellError

@dataclass(frozen=True)
class CellConfig:
    name: str
    description: str
    # per-frame part
    input_channels: int = 3          # 5 = RGB + P_blood + Phi at the first conv (C1 5-ch)
    zero_channels: tuple[int, ...] = ()  # input channels zeroed in training and inference
    distill: bool = False            # auxiliary P_blood decoder, dropped at deploy
    frozen: bool = False             # backbone frozen (feature extractor), only the head trains
    # sequence part (empty for per-frame cells)
    base_cell: str | None = None     # per-frame cell providing the backbone embeddings
    temporal: bool = False           # C2
    c1: str | None = None            # None | "c8" | "c8_patient" | "c13" (head-level C1)
    c3: bool = False                 # C3 autoencoder residual

    def __post_init__(self):
        if self.input_channels not in (3, 5):
            raise ConfigError(f"cell {self.name}: input_channels must be 3 or 5")
        if self.c1 not in (None, "c8", "c8_patient", "c13"):
            raise ConfigError(f"cell {self.name}: c1 must be c8, c8_patient or c13, got {self.c1}")
        if self.frozen and (self.distill or self.input_channels != 3):
            raise ConfigError(f"cell {self.name}: a frozen backbone takes RGB only, no decoder")
        if any(c not in (3, 4) for c in self.zero_channels):
            raise ConfigError(f"cell {self.name}: only prior channels 3 and 4 can be zeroed")

    @property
    def is_sequence(self) -> bool:
        return self.base_cell is not None

    @property
    def takes_prior_params(self) -> bool:
        """Whether a calibrated prior (``-P prior_params=``) applies: the 5-channel cells,
        distill and the sequence cells (whose C1 summaries and bases use the prior)."""
        return self.is_sequence or self.input_channels == 5 or self.distill

    @property
    def streams(self) -> tuple[str, ...]:
        s = []
        if self.input_channels == 5:
            s.append("C1_5ch")
        if self.c1:
            s.append({"c8": "C1_8", "c8_patient": "C1_8_patz", "c13": "C1_13"}[self.c1])
        if self.temporal:
            s.append("C2")
        if self.c3:
            s.append("C3")
        return tuple(s)


CELLS: dict[str, CellConfig] = {}


def register_cell(cfg: CellConfig) -> CellConfig:
    if cfg.name in CELLS:
        raise ConfigError(f"cell {cfg.name!r} registered twice")
    CELLS[cfg.name] = cfg
    return cfg


for _c in (
    # ---- per-frame cells
    CellConfig("a", "RGB baseline (3-channel backbone)"),
    CellConfig("pi", "5-channel input fusion: RGB + P_blood + Phi", input_channels=5),
    CellConfig("pblood_only", "5-channel, Phi zeroed throughout", input_channels=5,
               zero_channels=(4,)),
    CellConfig("phi_only", "5-channel, P_blood zeroed throughout", input_channels=5,
               zero_channels=(3,)),
    CellConfig("distill", "RGB backbone + auxiliary P_blood decoder (dropped at deploy)",
               distill=True),
    CellConfig("probe", "frozen backbone + linear probe (foundation-model baselines)",
               frozen=True),
    # ---- sequence cells (paper's eight-cell ablation)
    CellConfig("b", "C2 only", base_cell="a", temporal=True),
    CellConfig("c", "C1_8 (train-norm) + C2", base_cell="a", temporal=True, c1="c8"),
    CellConfig("c_prime", "C1_8 (per-patient z) + C2", base_cell="a", temporal=True,
               c1="c8_patient"),
    CellConfig("c_dprime", "C1_13 + C2", base_cell="a", temporal=True, c1="c13"),
    CellConfig("d", "C1_8 + C2 + C3", base_cell="a", temporal=True, c1="c8", c3=True),
    CellConfig("e", "C2 + C3", base_cell="a", temporal=True, c3=True),
    CellConfig("b_plus", "C1_5ch + C2", base_cell="pi", temporal=True),
    CellConfig("e_plus", "C1_5ch + C2 + C3 (headline)", base_cell="pi", temporal=True, c3=True),
    CellConfig("e_dagger", "distill backbone + C2 + C3", base_cell="distill", temporal=True,
               c3=True),
    # ---- the paper's limitation experiment: the C1 summaries on a backbone that saw no
    # capsule frame (an ImageNet-only model, frozen: its probe run's backbone)
    CellConfig("b_frozen", "C2 on a frozen ImageNet backbone (no capsule fine-tuning)",
               base_cell="probe", temporal=True),
    CellConfig("c1_frozen", "C1_8 (train-norm) + C2 on a frozen ImageNet backbone (no capsule "
               "fine-tuning; the paper's limitation experiment)", base_cell="probe",
               temporal=True, c1="c8"),
):
    register_cell(_c)

PER_FRAME_CELLS = tuple(n for n, c in CELLS.items() if not c.is_sequence)
SEQUENCE_CELLS = tuple(n for n, c in CELLS.items() if c.is_sequence)


def get_cell(name: str) -> CellConfig:
    try:
        return CELLS[name]
    except KeyError:
        raise UnknownCellError(f"Unknown cell {name!r}. Available: {list(CELLS)}") from None


def list_cells(pattern: str = "*") -> list[str]:
    return [n for n in CELLS if fnmatch.fnmatch(n, pattern)]


#: ``pipi.source`` tag of a run made by the ``import`` entry point from outside files.
EXTERNAL_SOURCE = "external"
#: Source label of an imported run without ``pipi.source_label`` (``import --label``).
RELEASED = "released"


@dataclass(frozen=True)
class Arm:
    """An arm of a comparison: a cell, the source label of imported runs ("" when trained
    here) and the evaluation variant of a child run ("" for the trained model itself).

    Written ``cell[ (source)][@variant]``: ``str(Arm("a", "released", "perturb_jpeg25"))`` is
    ``"a (released)@perturb_jpeg25"`` (the ``pipi.cell`` tag of a child run, a table row);
    :meth:`parse` reads it back.
    """

    cell: str
    source: str = ""
    variant: str = ""

    def __str__(self) -> str:
        text = f"{self.cell} ({self.source})" if self.source else self.cell
        return f"{text}@{self.variant}" if self.variant else text

    @classmethod
    def parse(cls, text: str) -> Arm:
        """The arm an arm name writes (any text: the part before the first ``@`` is the cell
        and its source label, ``"a (released)"``; the rest is the variant)."""
        head, _, variant = str(text).partition("@")
        if head.endswith(")") and " (" in head:
            cell, _, source = head[:-1].partition(" (")
            return cls(cell, source, variant)
        return cls(head, "", variant)

    @property
    def base(self) -> Arm:
        """The arm without its variant: the model an evaluation child scored."""
        return Arm(self.cell, self.source)


__all__ = ["CELLS", "EXTERNAL_SOURCE", "PER_FRAME_CELLS", "RELEASED", "SEQUENCE_CELLS", "Arm",
           "CellConfig", "get_cell", "list_cells", "register_cell"]
