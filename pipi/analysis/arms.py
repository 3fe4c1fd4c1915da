"""The paper's arms: which cells form each table, their row labels, the headline backbone."""

from __future__ import annotations

from pipi.cells import CELLS

#: Backbone of the headline tables (the others appear in the cross-backbone table).
HEADLINE_BACKBONE = "efficientnet_b0"
#: Backbones of the cross-backbone table, in the paper's order.
BACKBONES = ("efficientnet_b0", "convnext_tiny", "resnet18")
#: Per-frame table rows (paper Table "per-frame").
PER_FRAME_CELLS = ("a", "pi", "distill")
#: The eight-cell ablation (paper Table "eight-cell"), with the distillation cell e-dagger.
ABLATION_CELLS = ("a", "b", "c", "c_prime", "c_dprime", "d", "e", "b_plus", "e_plus", "e_dagger")
#: Paired-test comparisons (reference, new) of the paper, plus the per-frame arms.
PAIRED_TESTS = (("a", "pi"), ("a", "distill"), ("b", "b_plus"), ("b", "e_plus"),
                ("e", "e_plus"), ("b_plus", "e_plus"), ("b", "c"), ("b", "c_dprime"),
                ("a", "e_plus"))
#: Per-class and per-patient breakdowns: the first pair present is the per-class table's.
BREAKDOWN_PAIRS = (("b", "e_plus"), ("a", "pi"))
#: Training-time channel ablation: arms compared with the full +PI cell.
CHANNEL_TRAIN_ARMS = ("a", "pblood_only", "phi_only")
#: Inference-time channel ablation variants of ``pi`` (``ablate -P study=channel_infer``).
CHANNEL_INFER_ARMS = ("pi@zero_phi", "pi@zero_pblood", "pi@zero_both")
#: Entry points whose tables are built only when such runs exist (none are built yet).
OTHER_STUDIES = {"transplant": "transplant", "robustness": "robustness",
                 "cross_vendor": "galar"}

CELL_LABELS: dict[str, str] = {
    "a": "(a) RGB-only per-frame baseline",
    "pi": "+PI input fusion (5-channel)",
    "distill": "+PI distillation (3-channel inference)",
    "pblood_only": "P_blood-only (Phi zeroed)",
    "phi_only": "Phi-only (P_blood zeroed)",
    "b": "(b) RGB + C2 (temporal only)",
    "c": "(c) RGB + C2 + C1_8 (train-norm)",
    "c_prime": "(c') RGB + C2 + C1_8 (per-patient z)",
    "c_dprime": "(c'') RGB + C2 + C1_13 (with topology)",
    "d": "(d) RGB + C2 + C1_8 + C3",
    "e": "(e) RGB + C2 + C3",
    "b_plus": "(b+) +PI 5-ch + C2",
    "e_plus": "(e+) +PI 5-ch + C2 + C3",
    "e_dagger": "(e-dagger) distill backbone + C2 + C3",
    "pi@zero_phi": "+PI, zero Phi at inference",
    "pi@zero_pblood": "+PI, zero P_blood at inference",
    "pi@zero_both": "+PI, both prior channels zeroed (strip-and-serve)",
}

STOUFFER_LABEL = "Stouffer (assumes independent seeds)"


def cell_label(cell: str) -> str:
    """The paper's row label of a cell (its description for cells the paper lacks)."""
    if cell in CELL_LABELS:
        return CELL_LABELS[cell]
    base = cell.split("@")[0]
    return f"{cell}: {CELLS[base].description}" if base in CELLS else cell

