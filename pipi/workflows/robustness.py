"""The ``robustness`` workflow: finished per-frame runs scored on perturbed test images
(paper section "Robustness to test-image perturbations").

One parent run (entry point ``robustness``) and, per (source run, perturbation), one
``evaluate_run`` child on the test split: tags ``pipi.study = robustness``,
``pipi.variant = perturb_<name>``, ``pipi.perturbation = <name>``, ``pipi.source_run_id``;
the arm is ``<cell>@perturb_<name>`` (``a@perturb_jpeg25``), so the Kvasir headline arms are
untouched and ``aggregate`` pairs RGB and +PI per perturbation and seed. The unperturbed
baseline (``perturb_none``) is scored through the same path.

Each perturbation (:mod:`pipi.probes.perturb`) is applied to the uint8 test frame at the run's
evaluation size (the frame cache's resolution) as the last step before normalisation, and
the prior of a 5-channel run is recomputed on the perturbed pixels (:class:`FrameInputs`).
Gaussian noise is seeded by (``seed``, perturbation, frame key): every run sees the same noise
on a frame, and a child is reused when it exists for the same source run, perturbation,
seed, data and code (``find_evaluation``), so a second invocation scores nothing new.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from pipi import tracking
from pipi.probes.perturb import apply_perturbation, get_perturbation, parse_perturbations
from pipi.runs.children import StudyResult, children_table, evaluate_children
from pipi.runs.evaluate import EvalContext, Evaluation
from pipi.runs.runsets import resolve_runs, staged_for
from pipi.training.frames import FrameInputs, predict_probs

__all__ = ["ENTRY_POINT", "STUDY", "frame_keys",
           "perturbed_images", "robustness_evaluation", "run_robustness", "variant_of"]

log = logging.getLogger(__name__)

ENTRY_POINT = "robustness"
STUDY = "robustness"


def variant_of(perturbation: str) -> str:
    """The evaluation variant (and arm suffix) of a perturbation: ``perturb_jpeg25``."""
    return f"perturb_{perturbation}"


def frame_keys(frames: pd.DataFrame) -> list[str]:
    """Per row, the key that seeds its noise: ``<video_id>/<frame_number>``.

    Stable across staging folders and machines, and the same for the two rows of a
    multilabel frame (one image, one noise draw).
    """
    return (frames["video_id"].astype(str) + "/" + frames["frame_number"].astype(str)).tolist()


def perturbed_images(images: np.ndarray, frames: pd.DataFrame, perturbation: str, *,
                     seed: int) -> np.ndarray:
    """Rows of the uint8 cache ``(N, 3, S, S)`` perturbed, in the same layout."""
    hwc = np.ascontiguousarray(np.asarray(images).transpose(0, 2, 3, 1))  # (N, S, S, 3)
    out = apply_perturbation(hwc, perturbation, keys=frame_keys(frames), seed=seed)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def robustness_evaluation(perturbation: str, *, seed: int = 0) -> Evaluation:
    """Test-split scoring of a run under one perturbation (the one place it is built)."""
    spec = get_perturbation(perturbation)

    def scorer(ctx: EvalContext, rows: np.ndarray, split: str):
        imgs = perturbed_images(np.asarray(ctx.images[rows]), ctx.frames.iloc[rows],
                                spec.name, seed=seed)  # rows: ascending (flatnonzero)
        probs = predict_probs(ctx.model, imgs, FrameInputs(ctx.cfg), device=ctx.device)
        return probs, {}

    options = {"perturbation": spec.name, "kind": spec.kind, "level": spec.level,
               "noise_seed": int(seed)}
    return Evaluation(study=STUDY, variant=variant_of(spec.name), scorer=scorer,
                      splits=("test",), options=options,
                      tags={tracking.tags.TAG_PERTURBATION: spec.name,
                            tracking.tags.TAG_PERTURBATION_KIND: spec.kind,
                            tracking.tags.TAG_PERTURBATION_LEVEL: spec.level})


def run_robustness(*, runs: str, perturbations: str = "all", seed: int = 0, data: str = "",
                   experiment: str | None = None, progress: bool = True) -> StudyResult:
    """Score each run on the test split under each perturbation (see the module docstring)."""
    names = parse_perturbations(perturbations)
    if "none" not in names:
        names = ["none", *names]  # the unperturbed baseline is always scored
    sources = resolve_runs(runs, name="runs", experiment=experiment)
    root, digest = staged_for(data, sources)
    evs = [robustness_evaluation(n, seed=seed) for n in names]
    with tracking.pipi_run(entry_point=ENTRY_POINT, experiment=experiment,
                           run_name="robustness",
                           tags={tracking.tags.TAG_STUDY: STUDY,
                           tracking.tags.TAG_DATA_DIGEST: digest}
                           ) as parent:
        pid = parent.run_id
        parent.log_params({"runs": runs, "perturbations": ",".join(names), "seed": seed,
                             "data": data, "data_dir": str(root),
                             "source_run_ids": ",".join(s.run_id for s in sources)})
        children = evaluate_children(sources, lambda s: evs, data=root, digest=digest,
                                     parent_run_id=pid, entry_point=ENTRY_POINT,
                                     progress=progress)
        table = children_table("robustness: test-image perturbations", children)
        parent.log_text(table, "summary/summary.md")
        parent.log_metrics({f"children_{k}": sum(c.status == k for c in children)
                              for k in ("scored", "reused")})
    return StudyResult(pid, tuple(children), table)
