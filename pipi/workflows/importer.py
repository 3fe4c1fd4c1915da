"""The ``import`` workflow: an outside checkpoint or prediction file as an MLflow run.

A released checkpoint (``kind=checkpoint``) is loaded into the cell's frame model
(:mod:`pipi.models.external`), scored on the staged val and test splits through the scoring
path of :mod:`pipi.runs.evaluate` and logged with the run contract of a trained run: params
(cell, seed, backbone, recipe), tags (entry point ``import``, dataset, data digest, code
version), per-frame predictions, metrics and a registered pyfunc version
(:mod:`pipi.tracking.logged_model`), so ``aggregate``, ``galar``, ``robustness`` and
``transplant`` take it like a trained run. A prediction file (``kind=predictions``,
:mod:`pipi.data.prediction_file`) becomes a run with predictions and metrics, no model.

Either way the run says where it came from (tags ``pipi.source=external``,
``pipi.source_sha256``, ``pipi.source_kind``, ``pipi.source_label``) and everything is
checked before the run starts: a bad file logs nothing. Importing the same file for the
same arm and data again reuses the FINISHED run (key: file hash, config, data, code).
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipi import tracking
from pipi.cells import CELLS, EXTERNAL_SOURCE, RELEASED, get_cell
from pipi.classes import class_set_of
from pipi.config import TrainConfig, make_config, resolve_profile, run_params
from pipi.data.cache import build_cache
from pipi.data.prediction_file import join_predictions, read_prediction_file
from pipi.errors import ConfigError, DataError
from pipi.models.external import (
    ExternalCheckpoint,
    file_settings,
    load_external_state,
    read_checkpoint,
)
from pipi.paths import pipi_home
from pipi.runs.choices import IMPORT_CELLS, IMPORT_KINDS
from pipi.runs.data import load_data
from pipi.runs.evaluate import EvalContext, device_for, log_scores, plain_scorer, score_splits
from pipi.tracking.logged_model import log_frame_model
from pipi.training.frames import build_frame_model, is_capsule_vision, tmpdir

__all__ = ["ENTRY_POINT", "IMPORT_CELLS", "KINDS", "SOURCE_EXTERNAL", "ImportResult",
           "import_file"]


log = logging.getLogger(__name__)

ENTRY_POINT = "import"
KINDS = IMPORT_KINDS
#: ``pipi.source`` of an imported run (``aggregate`` keeps such runs in their own arms).
SOURCE_EXTERNAL = EXTERNAL_SOURCE
#: Splits an import scores (a prediction file may cover test only).
SPLITS = ("val", "test")
#: The prior options of ``train`` that ``import`` takes (None: not set).
PRIOR_OPTIONS = ("alpha", "lambda_eff", "hb_index", "second_channel", "prior_mask")
#: What a setting left out (and not given by the file's ``args``) is.
DEFAULTS = {"cell": "pi", "backbone": "efficientnet_b0"}


@dataclass(frozen=True)
class ImportResult:
    run_id: str
    kind: str
    cell: str
    backbone: str
    seed: int
    test_macro_auc: float
    sha256: str
    reused: bool = False
    registered: str | None = None
    #: Settings taken from the checkpoint's ``args`` (``"backbone=resnet18"``, ...).
    from_file: tuple[str, ...] = ()


def _check_finite_state(path: Path, state) -> None:
    """Refuse, before a run starts, a checkpoint whose weights hold NaN or inf (its every score
    would be NaN), naming the file's own keys."""
    bad = [k for k, t in state.items()
           if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise DataError(f"{path}: the checkpoint's weights hold NaN or inf ({', '.join(bad[:3])}"
                        f"{', ...' if len(bad) > 3 else ''}); it cannot score frames: export it "
                        "again from a finite state")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_label(label: str) -> str:
    """The arm label of imported runs (``a (released)``): a short plain word or phrase."""
    label = (label or "").strip()
    if not label or any(c in label for c in "@()\"'`") or len(label) > 40:
        raise ConfigError(f"label={label!r}: give a short name for the source (e.g. released), "
                          "without @, quotes or parentheses")
    return label


def import_command(*, kind: str, file: Path, cfg: TrainConfig, data: str | None,
                   label: str) -> str:
    """The ``mlflow run`` command that makes this run again (tag ``pipi.recipe``)."""
    args = ["mlflow", "run", ".", "-e", ENTRY_POINT, "--env-manager", "local",
            "-P", f"kind={kind}", "-P", f"file={file}", "-P", f"cell={cfg.cell}",
            "-P", f"backbone={cfg.backbone}", "-P", f"seed={cfg.seed}",
            "-P", f"profile={cfg.profile}", "-P", f"label={label}"]
    if kind == "checkpoint":
        lam = "auto" if cfg.prior.lambda_eff is None else cfg.prior.lambda_eff
        args += ["-P", f"image_size={cfg.image_size}", "-P", f"alpha={cfg.prior.alpha}",
                 "-P", f"lambda_eff={lam}", "-P", f"hb_index={cfg.prior.hb_index}",
                 "-P", f"second_channel={cfg.prior.second_channel}",
                 "-P", f"prior_mask={cfg.prior.mask}"]
    if data:
        args += ["-P", f"data={data}"]
    return shlex.join(args)


def _settings(kind: str, path: Path, ckpt: ExternalCheckpoint | None,
              given: dict) -> tuple[dict, tuple[str, ...]]:
    """The import's settings: what the user gave, else the file's ``args``, else defaults.

    Returns the settings and the ``key=value`` strings taken from the file. A cell or
    backbone the user gave that the file's ``args`` contradict is refused in one line.
    """
    given = {k: v for k, v in given.items() if v is not None}
    if kind != "checkpoint":
        extra = sorted(k for k in given if k in PRIOR_OPTIONS)
        if extra:
            raise ConfigError(f"{', '.join(extra)}: a prediction file carries its "
                              "probabilities; these options apply to kind=checkpoint only")
        return {**DEFAULTS, **{k: v for k, v in given.items() if k != "image_size"}}, ()
    found = file_settings(ckpt, path) if ckpt is not None else {}
    for key in ("cell", "backbone"):
        if key in given and key in found and given[key] != found[key]:
            raise ConfigError(f"{key}={given[key]}: {path.name}'s args say {key} "
                              f"{found[key]}; leave {key} out or pass {found[key]}")
    taken = {k: v for k, v in found.items() if k not in given}
    shown = tuple(f"{k}={'auto' if v is None else v}" for k, v in taken.items())
    return {**DEFAULTS, **taken, **given}, shown


def import_file(*, kind: str, file: str | Path, cell: str | None = None,
                backbone: str | None = None, seed: int = 42,
                data: str | None = None, profile: str = "auto", image_size: int | None = None,
                label: str = RELEASED, experiment: str | None = None,
                register: bool = True, progress: bool = True, alpha: float | None = None,
                lambda_eff: float | None = None, hb_index: str | None = None,
                second_channel: str | None = None,
                prior_mask: str | None = None) -> ImportResult:
    """Import ``file`` as an evaluation run of (cell, backbone, seed); see the module docstring.

    ``cell``, ``backbone``, ``image_size`` and the prior options (``alpha``, ``lambda_eff``,
    ``hb_index``, ``second_channel``, ``prior_mask``, as ``train`` spells them) left as
    ``None`` are taken from a published checkpoint's ``args`` where it has them (listed in
    :attr:`ImportResult.from_file`), else the defaults (cell ``pi``, EfficientNet-B0, the
    profile's image size, the paper's prior).

    Raises
    ------
    ConfigError
        An unknown kind, a sequence cell, a bad label, a missing file, a cell or backbone
        that the file's ``args`` contradict, prior options for a prediction file.
    DataError
        A checkpoint whose keys or shapes do not fit the cell's model (one line naming
        them), unknown ``class_names``, ``args`` pipi cannot reproduce, a prediction file that
        is unreadable, lacks or adds frames or classes, or whose probabilities do not sum
        to 1. Nothing is logged then.
    """
    if kind not in KINDS:
        raise ConfigError(f"kind={kind!r}: use one of {list(KINDS)}")
    label = check_label(label)
    if cell is not None and cell in CELLS and get_cell(cell).is_sequence:
        raise ConfigError(f"cell={cell!r} is a sequence cell; import takes per-frame cells "
                          f"{list(IMPORT_CELLS)} (a sequence model is more than one state "
                          "dict)")
    if cell is not None and cell not in IMPORT_CELLS:
        raise ConfigError(f"cell={cell!r}: import takes the cells {list(IMPORT_CELLS)} "
                          "(docs/import.md); a linear probe is trained with `train`")
    path = Path(file).expanduser()
    if path.is_dir():
        raise ConfigError(f"file={str(file)!r}: is a folder; pass the checkpoint or prediction "
                          "file itself")
    if not path.is_file():
        raise ConfigError(f"file={str(file)!r}: no such file")
    path = path.resolve()
    ckpt = read_checkpoint(path) if kind == "checkpoint" else None
    prior = {"alpha": alpha, "lambda_eff": lambda_eff, "hb_index": hb_index,
             "second_channel": second_channel, "prior_mask": prior_mask}
    settings, from_file = _settings(kind, path, ckpt, {"cell": cell, "backbone": backbone,
                                                        "image_size": image_size, **prior})
    cell, backbone = settings.pop("cell"), settings.pop("backbone")
    if from_file:
        log.info("taken from %s's args: %s", path.name, ", ".join(from_file))
    staged = load_data(data)
    root, frames, manifest = staged.root, staged.frames, staged.manifest
    profile = resolve_profile(profile, manifest.get("dataset", ""))
    cfg = make_config(cell=cell, backbone=backbone, seed=seed, profile=profile, weights="none",
                      **settings)
    # the head predicts the staged data's classes (Kvasir's 14, or a staged image dataset's)
    cfg = cfg.with_classes(class_set_of(manifest))
    classes = cfg.class_set
    data_arg = None if data in (None, "", "synthetic") else str(root)
    if kind == "checkpoint":  # everything is checked before a run starts
        model = build_frame_model(cfg)
        facts = load_external_state(model, ckpt.state, arch=backbone, cell=cell,
                                    source=str(path), class_names=ckpt.class_names,
                                    classes=classes)
        if from_file:
            facts["from_args"] = ", ".join(from_file)
        _check_finite_state(path, ckpt.state)
    else:
        keys, probs = read_prediction_file(path, classes)
        joined = join_predictions(path, keys, probs, frames)
        facts = {"matched_by": joined.key, "splits": ",".join(joined.splits)}
    sha = file_sha256(path)
    digest = manifest["data_digest"]
    params = run_params(cfg) if kind == "checkpoint" else {
        k: v for k, v in run_params(cfg).items()
        if k in ("cell", "backbone", "seed", "profile", "streams", "input_channels", "classes",
                 "class_metric_keys")}
    tags = tracking.import_tags(
        manifest, kind=kind, cell=cell, backbone=backbone, seed=seed, params=params,
        sha256=sha, file_name=path.name, label=label, facts=facts,
        recipe=import_command(kind=kind, file=path, cfg=cfg, data=data_arg, label=label))
    found = tracking.find_finished_run(tags[tracking.tags.TAG_CONFIG_HASH],
                                       **{tracking.tags.TAG_ENTRY_POINT: ENTRY_POINT})
    if found is not None:
        log.info("file %s (sha256 %s) was imported already as run %s", path, sha[:12],
                 found.run_id)
        return ImportResult(found.run_id, kind, cell, backbone, seed,
                            found.metrics.get("test/macro_auc", float("nan")), sha,
                            reused=True, from_file=from_file)
    images = None
    cv2024 = is_capsule_vision(manifest)  # the challenge's metrics too, as train logs them
    if kind == "checkpoint":
        images = build_cache(root, frames, size=cfg.image_size, digest=digest,
                             cache_dir=pipi_home() / "cache", progress=progress)
    work = tmpdir()
    try:
        with tracking.pipi_run(entry_point=ENTRY_POINT, experiment=experiment, tags=tags,
                               run_name=f"{cell}-{backbone}-s{seed}-{label}") as run:
            run.log_params({**params, "data_dir": str(root), "import.kind": kind,
                                 "import.file": str(path), "import.sha256": sha,
                                 "import.label": label})
            run.log_dataset(frames, source=str(root), name=tags[tracking.tags.TAG_DATASET],
                                 digest=digest, context="evaluation")
            if kind == "checkpoint":
                run.log_dict(cfg.to_dict(), "config.json")
                dev = device_for()
                ctx = EvalContext(model.to(dev), cfg, frames, images, dev, "", work)
                split = frames["split"].astype(str).to_numpy()
                preds, metrics = score_splits(frames, split, SPLITS, frames,
                                              lambda rows, s: plain_scorer(ctx, rows, s),
                                              names=classes.names, cv2024=cv2024)
            else:
                preds, metrics = score_splits(frames, joined.split, joined.splits, frames,
                                              lambda rows, s: (joined.probs[rows], {}),
                                              names=classes.names, cv2024=cv2024)
            log_scores(run, preds, metrics, frames, work, names=classes.names)
            auc = float(metrics.get("test/macro_auc", float("nan")))
            registered = None
            if kind == "checkpoint":
                out = log_frame_model(run, cfg, model.cpu(), work, test_auc=auc, register=register,
                                      tags=tags,
                                      version_tags=tracking.import_version_tags(
                                          sha256=sha, label=label))
                registered = out.get("registered")
            return ImportResult(run.run_id, kind, cell, backbone, seed, auc, sha,
                                registered=registered, from_file=from_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)

