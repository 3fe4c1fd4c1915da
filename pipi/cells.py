"""The cell table: every experiment arm of the paper as data, plus recipes and profiles.

A cell names which feature streams reach the classifier (paper, "Three feature streams"):
C1 as a 5-channel input (``input_channels=5``) or as head-level summaries (``c1``), C2 the
temporal Transformer, C3 the autoencoder residual. ``base_cell`` is the per-frame cell whose
backbone a sequence cell builds on.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace

from pipi.errors import ConfigError, UnknownCellError

#: The paper's six seeds (46 dropped in the paper; see paper.tex "Dataset and split").
PAPER_SEEDS = (41, 42, 43, 44, 45, 47)


@dataclass(frozen=True)
class CellConfig:
    name: str
    description: str
    # per-frame part
    input_channels: int = 3          # 5 = RGB + P_blood + Phi at the first conv (C1 5-ch)
    zero_channels: tuple[int, ...] = ()  # input channels zeroed in training and inference
    distill: bool = False            # auxiliary P_blood decoder, dropped at deploy
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
        if any(c not in (3, 4) for c in self.zero_channels):
            raise ConfigError(f"cell {self.name}: only prior channels 3 and 4 can be zeroed")

    @property
    def is_sequence(self) -> bool:
        return self.base_cell is not None

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


# --------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (logged as params; hashed for reuse)."""

    cell: str = "a"
    backbone: str = "efficientnet_b0"
    seed: int = 42
    profile: str = "paper"
    weights: str = "imagenet"        # imagenet | none | path to a state_dict
    image_size: int = 224            # paper: 224 x 224
    epochs: int = 30                 # paper: 30 (cross-backbone recipe: 15)
    batch_size: int = 32             # paper: 32 (temporal head: 64)
    lr: float = 1e-3                 # paper: AdamW 1e-3 (cross-backbone: 1e-4; temporal 1e-4)
    weight_decay: float = 1e-4       # paper
    patience: int = 5                # early stopping on val macro-AUC (paper)
    max_batches: int = 0             # >0 caps batches per epoch (smoke profile only)
    # augmentation (identical in every arm; paper)
    hflip: float = 0.5
    rotation_deg: float = 10.0
    jitter: tuple[float, float, float] = (0.15, 0.15, 0.1)  # brightness, contrast, saturation
    # prior (paper "Analytic prior")
    alpha: float = 4.0
    lambda_eff: float = 0.0          # 0 = 0.25 x image diagonal
    hb_index: str = "paper"          # paper: R/(R+G+B); "code": R/(G+B)
    second_channel: str = "phi"      # paper: Phi; "log_gb_phi": the published code's variant
    prior_init: str = "kaiming"      # extra first-conv channels: kaiming (paper) | zeros (code)
    distill_lambda: float = 1.0      # weight of the auxiliary BCE (distill cell)
    select_metric: str = "macro_auc"  # checkpoint selection + early stopping on val: macro_auc
                                      # (paper) | macro_f1 (the published code)
    # temporal / C3 (sequence cells)
    window: int = 16
    ae_epochs: int = 10
    num_workers: int = 0

    def __post_init__(self):
        from pipi.models import ARCHS

        get_cell(self.cell)
        if self.backbone not in ARCHS:
            raise ConfigError(f"Unknown backbone {self.backbone!r}. Available: {list(ARCHS)}")
        if self.select_metric not in ("macro_auc", "macro_f1"):
            raise ConfigError(f"select_metric must be macro_auc or macro_f1, got {self.select_metric!r}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.epochs < 1 or self.batch_size < 1 or self.image_size < 16:
            raise ConfigError("epochs and batch_size must be >= 1 and image_size >= 16")
        if self.image_size % 32 and get_cell(self.cell).c3:
            raise ConfigError(f"C3 needs image_size divisible by 32, got {self.image_size}")

    @property
    def cell_config(self) -> CellConfig:
        return get_cell(self.cell)


#: Machine profiles: what each sets (logged; nothing else changes silently).
PROFILES: dict[str, dict] = {
    # the paper's recipe (224 px, 30 epochs; cross-backbone 15 epochs at lr 1e-4)
    "paper": {},
    # a few minutes per cell on 2 CPU cores with the synthetic demo release
    "demo": {"image_size": 64, "epochs": 4, "patience": 2, "ae_epochs": 2},
    # seconds, for tests: tiny images, one epoch, two batches
    "smoke": {"image_size": 32, "epochs": 1, "batch_size": 16, "max_batches": 2,
              "patience": 1, "ae_epochs": 1, "window": 4},
}

#: The cross-backbone recipe (paper "Cross-backbone replication"): default for these archs.
CROSS_BACKBONE = {"resnet18": {"lr": 1e-4, "epochs": 15}, "convnext_tiny": {"lr": 1e-4, "epochs": 15}}
#: The temporal head's recipe (paper "Temporal Transformer").
SEQUENCE_RECIPE = {"lr": 1e-4, "batch_size": 64}


def make_config(*, cell: str, backbone: str = "efficientnet_b0", seed: int = 42,
                profile: str = "paper", **overrides) -> TrainConfig:
    """Compose recipe defaults: paper -> backbone recipe -> sequence recipe -> profile -> overrides."""
    if profile not in PROFILES:
        raise ConfigError(f"Unknown profile {profile!r}. Available: {list(PROFILES)}")
    values: dict = {}
    values.update(CROSS_BACKBONE.get(backbone, {}))
    if get_cell(cell).is_sequence:
        values.update(SEQUENCE_RECIPE)
    prof = dict(PROFILES[profile])
    if "epochs" in prof and "epochs" in values:
        values.pop("epochs")
    values.update(prof)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig(cell=cell, backbone=backbone, seed=seed, profile=profile, **values)


def with_(cfg: TrainConfig, **changes) -> TrainConfig:
    return replace(cfg, **changes)


__all__ = [
    "CELLS", "PER_FRAME_CELLS", "SEQUENCE_CELLS", "PAPER_SEEDS", "PROFILES", "CellConfig",
    "TrainConfig", "get_cell", "list_cells", "make_config", "register_cell", "field",
]
