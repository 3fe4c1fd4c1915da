"""The workflows' own choices, without torch or mlflow: what ``pipi galar --help``,
``pipi transplant --help`` and ``pipi import --help`` list (the workflows import them from
here)."""

from __future__ import annotations

from pipi.cells import PER_FRAME_CELLS, get_cell

#: ``galar``: ``all`` is every staged frame (the paper's zero-shot protocol); ``evaluation``
#: the vendor folds' evaluation videos only (the calibration videos left out).
GALAR_FOLDS = ("all", "evaluation")
#: The ``fold`` parameter: ``auto`` is ``all``, or ``evaluation`` with ``prior_params``.
FOLD_CHOICES = ("auto", *GALAR_FOLDS)
#: What ``transplant -P study=`` runs: the weight-surgery experiments, the Grad-CAM overlap,
#: or both.
TRANSPLANT_STUDIES = ("transplant", "gradcam", "all")

#: The cells ``import`` takes (docs/import.md): per-frame cells trained end to end; not a
#: sequence cell (more than one state dict) nor the frozen linear probe.
IMPORT_CELLS = tuple(c for c in PER_FRAME_CELLS if not get_cell(c).frozen)
#: What ``import --kind`` brings in: a checkpoint, or a file of per-frame predictions.
IMPORT_KINDS = ("checkpoint", "predictions")
