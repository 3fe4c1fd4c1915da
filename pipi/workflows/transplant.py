"""The ``transplant`` workflow: where in the network the +PI lift lives (paper section
"Channel ablation": first-conv cosine, BN transplant, subset-block transplant) and, with
``study=gradcam``, the Grad-CAM / prior overlap (:mod:`pipi.runs.gradcam`).

RGB runs (``rgb``) and +PI runs (``pi``) are paired by (backbone, seed). One parent run
(entry point ``transplant``) and nested children, each reused when it exists for the same
runs, data and code:

* ``first_conv`` (one per seed pair, no ``pipi.cell`` tag): cosine of the RGB-channel weights
  of the two first convolutions, and the per-channel L2 norms of both first convs (metrics
  ``conv/cosine``, ``conv/norm_pi/<R|G|B|P_blood|Phi>``, ``conv/norm_rgb/<R|G|B>``);
  ``first_conv_within`` (one per pair of RGB runs of different seeds): the within-arm
  baseline;
* ``transplant_bn``: every BatchNorm (affine and running statistics; LayerNorm on ConvNeXt,
  which has no BatchNorm, tag ``pipi.transplant_kind``) copied from +PI into RGB, the RGB
  convolutions kept; ``transplant_B`` .. ``transplant_F``: the block subsets of
  :data:`pipi.models.surgery.SUBSETS` (the paper's for EfficientNet-B0, the documented stage
  analogues for ResNet-18 and ConvNeXt-Tiny). Both are ``evaluate_run`` children of the RGB
  run scored on test: arms ``a@transplant_bn``, ``a@transplant_D``, ... with the donor in the
  tag ``pipi.donor_run_id``;
* ``gradcam`` (``study=gradcam`` or ``all``): see :mod:`pipi.runs.gradcam`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from pipi import tracking
from pipi.classes import class_set_of_param
from pipi.data.progress import tqdm
from pipi.errors import ConfigError
from pipi.models.surgery import (
    SUBSETS,
    bn_transplant,
    channel_norms,
    first_conv_cosine,
    norm_kind,
    subset_transplant,
)
from pipi.runs.children import StudyChild, StudyResult, children_table, evaluate_children
from pipi.runs.choices import TRANSPLANT_STUDIES
from pipi.runs.evaluate import Evaluation, load_run_model
from pipi.runs.gradcam import gradcam_classes, log_gradcam
from pipi.runs.runsets import SourceRun, resolve_runs, staged_for

__all__ = ["ENTRY_POINT", "STUDIES", "pair_runs", "run_transplant", "transplant_evaluation"]

log = logging.getLogger(__name__)

ENTRY_POINT = "transplant"
STUDIES = TRANSPLANT_STUDIES


class Models:
    """Each run's logged model and config, loaded once per invocation."""

    def __init__(self):
        self._cache: dict = {}

    def __call__(self, run_id: str):
        if run_id not in self._cache:
            self._cache[run_id] = load_run_model(run_id)
        return self._cache[run_id]


def pair_runs(rgb: list[SourceRun], pi: list[SourceRun]) -> tuple[list, list[str]]:
    """([(rgb, pi)] paired by (backbone, seed), notes on runs left without a partner)."""
    for name, runs, want in (("rgb", rgb, 3), ("pi", pi, 5)):
        for r in runs:
            if r.input_channels != want or (want == 3 and r.cell == "distill"):
                kind = "3-channel RGB runs (cell a)" if want == 3 else "5-channel +PI runs"
                raise ConfigError(f"{name}: run {r.run_id} is a {r.cell} run; {name} needs {kind}")
        keys = [(r.backbone, r.seed) for r in runs]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ConfigError(f"{name}: several runs for (backbone, seed) {dup}; pass one run "
                              "per backbone and seed")
    by_pi = {(r.backbone, r.seed): r for r in pi}
    pairs = [(r, by_pi[(r.backbone, r.seed)]) for r in rgb if (r.backbone, r.seed) in by_pi]
    paired = {(a.backbone, a.seed) for a, _ in pairs}
    notes = [f"unpaired: {r.label}" for r in [*rgb, *pi] if (r.backbone, r.seed) not in paired]
    if not pairs:
        raise ConfigError("rgb and pi share no (backbone, seed): transplant pairs an RGB and a "
                          "+PI run of the same backbone and seed")
    return pairs, notes


def transplant_evaluation(what: str, *, donor: SourceRun, models: Callable) -> Evaluation:
    """Test scoring of an RGB run with the +PI run's norms (``bn``) or a block subset moved in."""

    def transform(model, cfg):
        donor_model, _ = models(donor.run_id)
        moved = (bn_transplant(model, donor_model) if what == "bn"
                 else subset_transplant(model, donor_model, what))
        log.info("transplant %s: %d tensors from %s", what, len(moved.tensors), donor.run_id)
        return moved.model

    if what == "bn":
        kind, blocks = norm_kind(models(donor.run_id)[0]), "every norm layer"
    else:
        kind, blocks = "subset", SUBSETS[donor.backbone][what].description
    return Evaluation(study="transplant", variant=f"transplant_{what}", splits=("test",),
                      options={"donor_run_id": donor.run_id, "what": what},
                      model_transform=transform,
                      tags={tracking.tags.TAG_DONOR_RUN: donor.run_id,
                      tracking.tags.TAG_TRANSPLANT: what,
                            tracking.tags.TAG_TRANSPLANT_KIND: kind,
                            tracking.tags.TAG_TRANSPLANT_BLOCKS: blocks})


def _conv_child(a: SourceRun, b: SourceRun, *, variant: str, models: Models, digest: str,
                parent_run_id: str) -> StudyChild:
    """First-conv cosine of runs a and b (a: the RGB run), norms of both first convs."""
    key = tracking.evaluation_key(study="transplant", variant=variant, source_run_id=a.run_id,
                                  data_digest=digest, options={"other_run_id": b.run_id})
    found = tracking.find_finished_run(key, **{tracking.tags.TAG_ENTRY_POINT: ENTRY_POINT})
    if found is not None:
        cos = found.metrics.get("conv/cosine", float("nan"))
        return StudyChild(a, variant, found.run_id, "reused", cos)
    (ma, _), (mb, _) = models(a.run_id), models(b.run_id)
    cos = first_conv_cosine(ma, mb)
    metrics = {"conv/cosine": cos,
               **{f"conv/norm_rgb/{k}": v for k, v in channel_norms(ma).items()},
               **{f"conv/norm_{'pi' if b.input_channels == 5 else 'other'}/{k}": v
                  for k, v in channel_norms(mb).items()}}
    tags = {tracking.tags.TAG_CONFIG_HASH: key, tracking.tags.TAG_STUDY: "transplant",
            tracking.tags.TAG_VARIANT: variant, tracking.tags.TAG_SOURCE_RUN: a.run_id,
            tracking.tags.TAG_DONOR_RUN: b.run_id, tracking.tags.TAG_BACKBONE: a.backbone,
            tracking.tags.TAG_SEED: a.seed, tracking.tags.TAG_OTHER_SEED: b.seed,
            tracking.tags.TAG_DATA_DIGEST: digest,
            tracking.tags.TAG_PARENT_RUN: parent_run_id}
    with tracking.pipi_run(entry_point=ENTRY_POINT, nested=True, tags=tags,
                           run_name=f"{variant}-{a.backbone}-s{a.seed}-s{b.seed}") as run:
        run.log_params({"run_a": a.run_id, "run_b": b.run_id, "cell_a": a.cell,
                             "cell_b": b.cell})
        run.log_metrics(metrics)
        return StudyChild(a, variant, run.run_id, "scored", cos)


def _gradcam_child(a: SourceRun, b: SourceRun, *, models: Models, data, digest: str,
                   n_frames: int, seed: int, parent_run_id: str) -> StudyChild:
    opts = {"donor_run_id": b.run_id, "n_frames": n_frames, "frame_seed": seed,
            "classes": list(gradcam_classes(class_set_of_param(
                tracking.get_run(a.run_id).params.get("classes")).names))}
    key = tracking.evaluation_key(study="gradcam", variant="gradcam", source_run_id=a.run_id,
                                  data_digest=digest, options=opts)
    found = tracking.find_finished_run(key, **{tracking.tags.TAG_ENTRY_POINT: ENTRY_POINT})
    if found is not None:
        return StudyChild(a, "gradcam", found.run_id, "reused", float("nan"))
    tags = {tracking.tags.TAG_CONFIG_HASH: key, tracking.tags.TAG_STUDY: "gradcam",
            tracking.tags.TAG_VARIANT: "gradcam", tracking.tags.TAG_SOURCE_RUN: a.run_id,
            tracking.tags.TAG_DONOR_RUN: b.run_id, tracking.tags.TAG_BACKBONE: a.backbone,
            tracking.tags.TAG_SEED: a.seed, tracking.tags.TAG_DATA_DIGEST: digest,
            tracking.tags.TAG_PARENT_RUN: parent_run_id}
    rid = log_gradcam(a.run_id, b.run_id, models=models, data=data, digest=digest, tags=tags,
                      n_frames=n_frames, seed=seed, entry_point=ENTRY_POINT,
                      run_name=f"gradcam-{a.backbone}-s{a.seed}")
    return StudyChild(a, "gradcam", rid, "scored", float("nan"))


def run_transplant(*, rgb: str, pi: str, study: str = "transplant", data: str = "",
                   n_frames: int = 50, seed: int = 0, experiment: str | None = None,
                   progress: bool = True) -> StudyResult:
    """Run the transplant experiments and/or the Grad-CAM overlap (module docstring)."""
    if study not in STUDIES:
        raise ConfigError(f"study={study!r}; use one of {list(STUDIES)}")
    if n_frames < 1:
        raise ConfigError(f"n_frames={n_frames}: must be >= 1")
    rgb_runs = resolve_runs(rgb, name="rgb", experiment=experiment)
    pi_runs = resolve_runs(pi, name="pi", experiment=experiment)
    pairs, notes = pair_runs(rgb_runs, pi_runs)
    root, digest = staged_for(data, [a for p in pairs for a in p])
    models = Models()
    with tracking.pipi_run(entry_point=ENTRY_POINT, experiment=experiment,
                           run_name=f"transplant-{study}",
                           tags={tracking.tags.TAG_STUDY: study,
                           tracking.tags.TAG_DATA_DIGEST: digest}
                           ) as parent:
        pid = parent.run_id
        parent.log_params({"rgb": rgb, "pi": pi, "study": study, "data": data,
                             "data_dir": str(root), "n_frames": n_frames, "seed": seed,
                             "pairs": ";".join(f"{a.run_id},{b.run_id}" for a, b in pairs)})
        children: list[StudyChild] = []
        if study in ("transplant", "all"):
            within = [(x, y) for x, y in itertools.combinations([a for a, _ in pairs], 2)
                      if x.backbone == y.backbone]
            jobs = [(a, b, "first_conv") for a, b in pairs] + \
                   [(x, y, "first_conv_within") for x, y in within]
            for a, b, variant in tqdm(jobs, desc="first conv", disable=not progress):
                children.append(_conv_child(a, b, variant=variant, models=models, digest=digest,
                                            parent_run_id=pid))
            donors = {a.run_id: b for a, b in pairs}
            children += evaluate_children(
                [a for a, _ in pairs],
                lambda a: [transplant_evaluation(w, donor=donors[a.run_id], models=models)
                           for w in ("bn", *SUBSETS[a.backbone])],
                data=root, digest=digest, parent_run_id=pid, entry_point=ENTRY_POINT,
                progress=progress)
        if study in ("gradcam", "all"):
            for a, b in tqdm(pairs, desc="gradcam", disable=not progress):
                children.append(_gradcam_child(a, b, models=models, data=root, digest=digest,
                                               n_frames=n_frames, seed=seed, parent_run_id=pid))
        table = children_table(f"transplant: study {study}", children)
        if notes:
            table += "\n\n" + "\n".join(notes)
        parent.log_text(table, "summary/summary.md")
        parent.log_metrics({f"children_{k}": sum(c.status == k for c in children)
                              for k in ("scored", "reused")})
    return StudyResult(pid, tuple(children), table)
