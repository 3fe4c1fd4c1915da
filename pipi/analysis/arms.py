"""The paper's arms: which cells form each table, their row labels, the headline backbone."""

from __future__ import annotations

from pipi.cells import CELLS, Arm

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
#: Per-class, per-patient and operating-point breakdowns (reference, new): the paper's
#: sequence-cell pair and its per-frame pair; each gets its own per-class table.
BREAKDOWN_PAIRS = (("b", "e_plus"), ("a", "pi"))
#: Table key of each per-class table (the breakdown pairs', then distillation vs RGB: the
#: paper's "uniquely improves Reduced Mucosal View (+0.069 vs. RGB, p_Bonf < 0.001)").
PER_CLASS_TABLES = {("b", "e_plus"): "per_class", ("a", "pi"): "per_class_per_frame",
                    ("a", "distill"): "per_class_distill"}
#: The paper's reference (label) and per-class claim of each per-class table.
PER_CLASS_PAPER = {
    ("b", "e_plus"): ("tab:perclass", ""),
    ("a", "pi"): ("tab:perclass", ""),
    ("a", "distill"): ("sec:distill-results",
                       ("The paper (sec:distill-results): distillation uniquely improves "
                        "Reduced Mucosal View (+0.069 vs. RGB, p_Bonf < 0.001) and does not "
                        "regress on Erythema where input fusion does (compare table "
                        "per_class_per_frame).")),
}
#: The paper's four clinically prioritised classes of the operating-point table.
FOCAL_CLASSES = ("Lymphangiectasia", "Angiectasia", "Blood - fresh", "Ulcer")
#: The four focal classes of the paper's PR-curve figure (fig:pr-curves), in its order.
PR_FOCAL_CLASSES = ("Lymphangiectasia", "Blood - fresh", "Angiectasia", "Erosion")
#: Per-frame pair of the focal PR curves and the confusion matrices (paper figures).
FIGURE_PAIR = ("a", "pi")
#: Training-time channel ablation: arms compared with the full +PI cell.
CHANNEL_TRAIN_ARMS = ("a", "pblood_only", "phi_only")
#: The training-time channel ablation's BH family beyond the comparisons with +PI: the
#: single-channel arms against RGB. With them the family is the paper's "five paired tests in
#: the table" (full - RGB, P_blood-only - RGB, Phi-only - RGB, full - P_blood-only,
#: full - Phi-only); the authors' channel_ablation_summary lists the same five.
CHANNEL_TRAIN_VS_RGB = (("a", "pblood_only"), ("a", "phi_only"))
#: BH families of the training-time channel ablation (``aggregate -P channel_family=``):
#: "paper" = the five paired tests, "vs_pi" = only the three comparisons with full +PI.
CHANNEL_FAMILIES = ("paper", "vs_pi")
#: Inference-time channel ablation variants of ``pi`` (``ablate -P study=channel_infer``).
CHANNEL_INFER_ARMS = ("pi@zero_phi", "pi@zero_pblood", "pi@zero_both")
#: PI-TTA probes of ``ablate -P study=pi_tta`` (evaluations of the ``a`` runs): the paper's
#: three (frozen backbone and classifier: null by construction), then the non-paper bn_tent.
PI_TTA_PAPER = ("a@tta_aux_sgd", "a@tta_embed_mlp", "a@tta_fmap_align")
PI_TTA_ARMS = (*PI_TTA_PAPER, "a@tta_bn_tent")
#: Entry points whose tables are built only when such runs exist (none are built yet).
OTHER_STUDIES: dict[str, str] = {}  # cross_vendor: pipi.report.retention
#: Arm suffixes of the mechanism studies' evaluation children (``robustness``: perturbed test
#: images; ``transplant``: weights moved from +PI into RGB): own tables, not headline arms.
MECHANISM_VARIANTS = ("@perturb_", "@transplant_")


def is_mechanism_arm(cell: str) -> bool:
    """Whether an arm is a robustness or transplant evaluation child (``a@perturb_jpeg25``)."""
    return any(v in cell for v in MECHANISM_VARIANTS)

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
    "a@tta_aux_sgd": "PI-TTA 1: per-image SGD on the auxiliary head",
    "a@tta_embed_mlp": "PI-TTA 2: embedding-level distillation",
    "a@tta_fmap_align": "PI-TTA 3: spatial feature-map alignment",
    "a@tta_bn_tent": "BN-TENT (non-paper): BatchNorm affine adapted per image",
}

STOUFFER_LABEL = "Stouffer (assumes independent seeds)"
#: The published code's macro z (compute_paired_tests.py): per-class DeLong z, Stouffer over
#: seeds, then over classes (no covariance between classes).
CLASS_STOUFFER_LABEL = ("macro z, published code's form (per-class z, Stouffer over seeds, "
                        "then classes)")


def cell_label(cell: str) -> str:
    """The paper's row label of an arm (its cell's description for cells the paper lacks;
    ``[<source>: imported]`` after an imported model's)."""
    if cell in CELL_LABELS:
        return CELL_LABELS[cell]
    arm = Arm.parse(cell)
    if arm.source and not arm.variant:
        return f"{cell_label(arm.cell)} [{arm.source}: imported]"
    base = str(arm.base)
    return f"{cell}: {CELLS[base].description}" if base in CELLS else cell

