"""Run configuration: the frozen ``TrainConfig`` (holding a ``PriorConfig``), profiles, recipes.

``make_config`` composes the paper recipe, the backbone's recipe, the sequence recipe, the
machine profile and explicit overrides, in that order. ``TrainConfig.from_dict`` is the one
way back from a logged ``config.json`` / checkpoint / model config (older flat documents
included). ``train_params`` is what ``mlflow run . -e train`` needs to rebuild a config, so
the SLURM executor, sweep children and the ``pipi.recipe`` tag all use it.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pipi.cells import get_cell
from pipi.classes import KVASIR, ClassSet
from pipi.errors import ConfigError
from pipi.models.specs import ARCHS, FOUNDATION, is_timm_arch
from pipi.paths import metric_keys
from pipi.options.prior import PriorConfig
from pipi.options.runtime import check_runtime

#: The paper's six seeds (46 dropped in the paper; see paper.tex "Dataset and split").
PAPER_SEEDS = (41, 42, 43, 44, 45, 47)
SELECT_METRICS = ("macro_auc", "macro_f1")
#: The distill cell's target: the prior of the frame before colour jitter, moved with the
#: flip/rotation (the paper's P_blood(x)), or of the augmented input (the published code).
DISTILL_TARGETS = ("frame", "augmented")
#: How the ``probe`` cell trains its head: on features extracted once and cached (the
#: published probe scripts), or through the frozen model every epoch (pipi's earlier recipe).
PROBE_RECIPES = ("cached", "end_to_end")
#: The learning-rate schedule of the epoch loop: cosine annealing over the epochs (the paper,
#: and dinov2_linear_probe.py) or constant (biomedclip_linear_probe.py).
LR_SCHEDULES = ("cosine", "constant")
#: How the probe's frozen backbone sees a frame: ``frame`` (pipi's frame cache: Resize((S, S))
#: bilinear), ``dinov2`` (dinov2_linear_probe.py: Resize(int(1.14 S)) bilinear, CenterCrop(S))
#: or ``biomedclip`` (open_clip's BiomedCLIP preprocess: Resize(S) bicubic, CenterCrop(S)).
PROBE_TRANSFORMS = ("frame", "dinov2", "biomedclip")
#: The published probe scripts' recipes (dinov2_linear_probe.py, biomedclip_linear_probe.py):
#: AdamW, a plain Linear head on the cached features (no dropout), best validation epoch of
#: all (no early stop), no augmentation. DINOv2: cosine, selected by val macro-AUC, its
#: Resize + CenterCrop, fp32 features. BiomedCLIP: constant lr, selected by val macro-F1
#: (over the classes present in val), open_clip's bicubic preprocess, features under fp16
#: autocast on a GPU (fp32 on a CPU, as the script).
PROBE_RECIPE = {
    "dinov2_vitb14": {"epochs": 40, "batch_size": 512, "lr": 1e-3, "weight_decay": 1e-4,
                      "class_weights": True, "augment": False, "patience": 40,
                      "probe_transform": "dinov2"},
    "biomedclip_vitb16": {"epochs": 80, "batch_size": 256, "lr": 5e-4, "weight_decay": 1e-3,
                          "class_weights": False, "augment": False, "patience": 80,
                          "select_metric": "macro_f1", "lr_schedule": "constant",
                          "probe_transform": "biomedclip", "probe_fp16": True},
}
#: Fields logged (run params, config hash) only where they differ from these defaults, so
#: runs that do not use them keep the params (and reuse keys) they had.
QUIET_DEFAULTS = {"lr_schedule": "cosine", "probe_transform": "frame", "probe_fp16": False,
                  "decoder": "pipi"}
#: The distill cell's auxiliary decoders (pipi.models.heads.DECODERS, named here without torch).
DECODERS = ("pipi", "code")
#: Prior fields exposed flat (run params, MLproject parameters) -> PriorConfig field.
PRIOR_PARAMS = {"alpha": "alpha", "lambda_eff": "lambda_eff", "hb_index": "hb_index",
                "second_channel": "second_channel", "prior_mask": "mask"}


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
    # the analytic prior (paper "Analytic prior"): alpha, lambda_eff, hb_index, ...
    prior: PriorConfig = field(default_factory=PriorConfig)
    prior_init: str = "kaiming"      # extra first-conv channels: kaiming (paper) | zeros (code)
    distill_lambda: float = 1.0      # weight of the auxiliary BCE (distill cell)
    decoder: str = "pipi"            # the distill cell's decoder (the paper: "a small decoder
                                     # head"): pipi (1x1 conv, BN, GELU, 3x3 conv) | code (the
                                     # published code's 3x3-GELU-3x3-GELU-1x1, 64 channels)
    distill_target: str = "frame"    # the distill cell's P_blood target: frame (the paper:
                                     # the frame's own colours, moved with flip/rotation) |
                                     # augmented (the published code: after colour jitter)
    class_weights: bool = True       # inverse-frequency class weights in the loss (paper)
    augment: bool = True             # flip, rotation and colour jitter in training (paper)
    probe_recipe: str = "cached"     # probe cell: head on features extracted once and cached
                                     # (the published probe scripts) | end_to_end (through
                                     # the frozen model each epoch)
    select_metric: str = "macro_auc"  # checkpoint selection + early stopping on val: macro_auc
                                      # (paper) | macro_f1 (the published code)
    lr_schedule: str = "cosine"      # cosine (paper) | constant (biomedclip_linear_probe.py)
    probe_transform: str = "frame"   # the cached probe's view of a frame (PROBE_TRANSFORMS)
    probe_fp16: bool = False         # the cached probe's features under fp16 autocast (GPU)
    # temporal / C3 (sequence cells)
    window: int = 16
    ae_epochs: int = 10
    # where and how the run computes (pipi.runtime); hashed as given ("auto" stays "auto",
    # the resolved values are logged as resolved_* params)
    device: str = "auto"             # auto (cuda if available) | cpu | cuda | cuda:N
    precision: str = "auto"          # auto (fp32 under profile=paper, the paper's recipe; bf16
                                     # on a GPU that has it under demo/smoke) | fp32 | bf16 | fp16
    channels_last: str = "auto"      # auto (on for CUDA) | true | false
    compile: bool = False            # torch.compile the model
    deterministic: bool = True       # deterministic algorithms, no cuDNN autotuning
    graph: str = "off"               # off | on: the training step as one CUDA graph (CUDA only)
    data_path: str = "host"          # host (memmap -> device per batch) | device (set resident)
    # the staged data's classes in index order (its manifest's ``classes``); empty: Kvasir's 14
    # (left out of config.json and the run params then, so Kvasir runs log what they did)
    classes: tuple[str, ...] = ()
    # leave-source-out (a staged dataset with a ``source`` column): train and select on the
    # frames of ``train_sources``, score the test frames of ``test_sources`` only (comma-
    # separated names; empty: every source). Left out of config.json and the params when empty.
    train_sources: str = ""
    test_sources: str = ""

    def __post_init__(self):
        get_cell(self.cell)
        if self.backbone not in ARCHS and not is_timm_arch(self.backbone):
            raise ConfigError(f"backbone={self.backbone!r} is unknown. Available: "
                              f"{[*ARCHS, *FOUNDATION]} or timm:<name>")
        cell = get_cell(self.cell)
        if is_timm_arch(self.backbone) and (cell.is_sequence or cell.distill):
            raise ConfigError(f"backbone={self.backbone}: timm backbones serve the per-frame "
                              f"cells without a decoder; cell {self.cell!r} needs a torchvision "
                              f"backbone ({list(ARCHS)})")
        if self.select_metric not in SELECT_METRICS:
            raise ConfigError(f"select_metric={self.select_metric!r}; use one of "
                              f"{list(SELECT_METRICS)}")
        for name, low in (("epochs", 1), ("batch_size", 1), ("image_size", 16), ("patience", 1),
                          ("window", 1), ("ae_epochs", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name}={value!r}: must be an integer >= {low}")
        for name in ("lr", "weight_decay", "distill_lambda"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value)
                    and (value > 0 if name == "lr" else value >= 0)):
                raise ConfigError(f"{name}={value!r}: must be a finite number "
                                  f"{'> 0' if name == 'lr' else '>= 0'}")
        for name, allowed in (("lr_schedule", LR_SCHEDULES),
                              ("probe_transform", PROBE_TRANSFORMS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r}; use one of {list(allowed)}")
        if self.probe_recipe not in PROBE_RECIPES:
            raise ConfigError(f"probe_recipe={self.probe_recipe!r}; use one of "
                              f"{list(PROBE_RECIPES)}")
        if self.decoder not in DECODERS:
            raise ConfigError(f"decoder={self.decoder!r}; use one of {list(DECODERS)}")
        if self.distill_target not in DISTILL_TARGETS:
            raise ConfigError(f"distill_target={self.distill_target!r}; use one of "
                              f"{list(DISTILL_TARGETS)}")
        if self.prior_init not in ("kaiming", "zeros"):
            raise ConfigError(f"prior_init={self.prior_init!r}; use kaiming (paper) or zeros")
        if not isinstance(self.prior, PriorConfig):
            raise ConfigError(f"prior must be a PriorConfig, got {type(self.prior).__name__}")
        check_runtime(device=self.device, precision=self.precision,
                      channels_last=self.channels_last, compile=self.compile,
                      deterministic=self.deterministic, graph=self.graph,
                      data_path=self.data_path)
        seq = get_cell(self.cell).is_sequence
        for name, value, default in (("graph", self.graph, "off"),
                                     ("data_path", self.data_path, "host")):
            if seq and value != default:
                raise ConfigError(f"{name}={value}: only per-frame cells have it; cell "
                                  f"{self.cell} is a sequence cell (use {name}={default})")
        if self.graph == "on" and self.prior.mask == "fov":
            raise ConfigError("graph=on with prior_mask=fov: the field-of-view quantiles are "
                              "not captured; use prior_mask=none (or graph=off)")
        for name in ("train_sources", "test_sources"):
            if getattr(self, name) and seq:
                raise ConfigError(f"{name}={getattr(self, name)}: only per-frame cells train "
                                  f"on chosen sources; cell {self.cell} is a sequence cell")
        if self.image_size % 32 and get_cell(self.cell).c3:
            raise ConfigError(f"image_size={self.image_size}: C3 needs a multiple of 32")

    @property
    def cell_config(self):
        return get_cell(self.cell)

    @property
    def class_set(self) -> ClassSet:
        """The classes the model predicts, in index order (Kvasir's 14 by default)."""
        return ClassSet(self.classes) if self.classes else KVASIR

    def with_classes(self, classes: ClassSet) -> TrainConfig:
        """This configuration for data with ``classes`` (empty for Kvasir's 14)."""
        return replace(self, classes=() if classes.is_kvasir else tuple(classes.names))

    def to_dict(self) -> dict:
        """JSON-ready nested document (``config.json``); inverse of :meth:`from_dict`."""
        doc = asdict(self)
        for name in ("train_sources", "test_sources"):
            if not doc[name]:
                doc.pop(name)
        for name, default in QUIET_DEFAULTS.items():
            if doc[name] == default:
                doc.pop(name)
        if not self.classes:
            doc.pop("classes")
        else:
            doc["classes"] = list(self.classes)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any], **changes) -> TrainConfig:
        """A config from a logged document: nested (``prior: {...}``) or the older flat form."""
        doc = {**dict(doc), **changes}
        doc.pop("num_workers", None)  # logged by older versions, never used
        prior = dict(doc.pop("prior", None) or {})
        for flat, key in PRIOR_PARAMS.items():
            if flat in doc:
                prior[key] = doc.pop(flat)
        if prior.get("lambda_eff") in (0, 0.0, "auto", ""):  # older sentinel for the default
            prior["lambda_eff"] = None
        if "clip" in prior:
            prior["clip"] = tuple(prior["clip"])
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; known: {sorted(known)}")
        if "jitter" in doc:
            doc["jitter"] = tuple(doc["jitter"])
        if "classes" in doc:
            doc["classes"] = tuple(doc["classes"] or ())
        return cls(**doc, prior=PriorConfig(**prior))


#: Machine profiles: what each sets (logged; nothing else changes silently).
PROFILES: dict[str, dict] = {
    # the paper's recipe (224 px, 30 epochs; cross-backbone 15 epochs at lr 1e-4)
    "paper": {},
    # a few minutes per cell on 2 CPU cores with the synthetic demo release (`make demo`, the
    # quick start): two epochs already rank the demo classes well (docs/benchmarks.md)
    "demo": {"image_size": 64, "epochs": 2, "patience": 2, "ae_epochs": 2},
    # seconds, for tests: tiny images, one epoch, two batches
    "smoke": {"image_size": 32, "epochs": 1, "batch_size": 16, "max_batches": 2,
              "patience": 1, "ae_epochs": 1, "window": 4},
}
#: ``profile=auto``: paper on real staged data, demo on a synthetic release (resolve_profile).
PROFILE_CHOICES = ("auto", *PROFILES)

#: Options of the per-frame training step that a sequence cell does not have.
PER_FRAME_ONLY = ("graph", "data_path")
#: The cross-backbone recipe (paper "Cross-backbone replication"): default for these archs.
CROSS_BACKBONE = {"resnet18": {"lr": 1e-4, "epochs": 15}, "convnext_tiny": {"lr": 1e-4, "epochs": 15}}
#: The temporal head's recipe (paper "Temporal Transformer").
SEQUENCE_RECIPE = {"lr": 1e-4, "batch_size": 64}


def synthetic_preset(profile: str) -> str:
    """The synthetic release a profile trains on when no data is given: ``tiny`` for smoke."""
    return "tiny" if profile == "smoke" else "demo"


def resolve_profile(profile: str, dataset: str) -> str:
    """``auto`` -> ``demo`` on a synthetic release, ``paper`` on real data."""
    if profile != "auto":
        if profile not in PROFILES:
            raise ConfigError(f"profile={profile!r} is unknown. Available: {list(PROFILE_CHOICES)}")
        return profile
    return "demo" if "synthetic" in (dataset or "") else "paper"


def make_config(*, cell: str, backbone: str = "efficientnet_b0", seed: int = 42,
                profile: str = "paper", **overrides) -> TrainConfig:
    """Compose recipe defaults: paper -> backbone recipe -> sequence recipe -> profile -> overrides.

    ``graph`` and ``data_path`` apply to per-frame cells only; a sequence cell drops them.
    Overrides use the flat names of the run params (``alpha``, ``lambda_eff``, ``hb_index``,
    ``second_channel``, ``prior_mask`` go into the ``PriorConfig``); ``None`` means "not set".
    """
    if profile not in PROFILES:
        raise ConfigError(f"profile={profile!r} is unknown. Available: {list(PROFILES)}")
    values: dict = {}
    values.update(CROSS_BACKBONE.get(backbone, {}))
    if get_cell(cell).frozen and overrides.get("probe_recipe") in (None, "cached"):
        values.update(PROBE_RECIPE.get(backbone, {}))  # the published probe scripts
    if get_cell(cell).is_sequence:
        values.update(SEQUENCE_RECIPE)
        # the per-frame step's options: a sweep passes them to every child, and a sequence
        # head trains eagerly from its streams (its resolved_graph/_data_path say off/host)
        overrides = {k: v for k, v in overrides.items() if k not in PER_FRAME_ONLY}
    prof = dict(PROFILES[profile])
    if "epochs" in prof and "epochs" in values:
        values.pop("epochs")
        values.pop("patience", None)  # a profile's epochs come with its patience
    values.update(prof)
    values.update({k: v for k, v in overrides.items() if v is not None})
    prior = {PRIOR_PARAMS[k]: values.pop(k) for k in list(values) if k in PRIOR_PARAMS}
    if isinstance(values.get("prior"), PriorConfig):
        prior = {**asdict(values.pop("prior")), **prior}
    return TrainConfig(cell=cell, backbone=backbone, seed=seed, profile=profile,
                       prior=PriorConfig(**prior), **values)


# --------------------------------------------------------------------------- params, recipe
def run_params(cfg: TrainConfig) -> dict:
    """The flat run params of the run contract (also the basis of the config hash)."""
    p = {k: v for k, v in asdict(cfg).items() if k not in ("prior", "classes")
         and not (k in ("train_sources", "test_sources") and not v)
         and not (k in QUIET_DEFAULTS and v == QUIET_DEFAULTS[k])}
    if cfg.classes:
        p["classes"] = json.dumps(list(cfg.classes))
        keys = metric_keys(cfg.classes)
        if keys:   # the metric key of a class whose name MLflow refuses in a key
            p["class_metric_keys"] = json.dumps(keys, ensure_ascii=False)
    p["jitter"] = ",".join(str(j) for j in cfg.jitter)
    for flat, key in PRIOR_PARAMS.items():
        p[flat] = getattr(cfg.prior, key)
    p["lambda_eff"] = "auto" if cfg.prior.lambda_eff is None else cfg.prior.lambda_eff
    p["prior_clip"] = ",".join(str(c) for c in cfg.prior.clip)
    p["streams"] = ",".join(cfg.cell_config.streams) or "RGB"
    p["input_channels"] = cfg.cell_config.input_channels
    return p


#: Options of ``mlflow run . -e train`` beyond cell/seed/backbone/profile/weights/data.
TRAIN_OVERRIDES = ("epochs", "image_size", "lr", "batch_size", "patience", "alpha",
                   "lambda_eff", "hb_index", "second_channel", "prior_mask", "prior_init",
                   "distill_lambda", "distill_target", "decoder", "weight_decay", "class_weights",
                   "augment", "probe_recipe", "select_metric", "device", "precision", "channels_last",
                   "compile", "deterministic", "graph", "data_path", "train_sources",
                   "test_sources")


@functools.lru_cache(maxsize=64)
def _profile_config(cell: str, backbone: str, seed: int, profile: str) -> TrainConfig:
    """What the recipe defaults and the profile alone give (frozen: built once per arm)."""
    return make_config(cell=cell, backbone=backbone, seed=seed, profile=profile)


def overrides_of(cfg: TrainConfig) -> dict:
    """The ``TRAIN_OVERRIDES`` whose value differs from what the profile alone would give."""
    base = run_params(_profile_config(cfg.cell, cfg.backbone, cfg.seed, cfg.profile))
    mine = run_params(cfg)
    return {k: mine[k] for k in TRAIN_OVERRIDES if k in mine and mine[k] != base.get(k)}


def train_params(cfg: TrainConfig, *, data: str | None = None) -> dict:
    """``-P`` parameters of ``mlflow run . -e train`` that rebuild exactly ``cfg``."""
    out = {"cell": cfg.cell, "seed": cfg.seed, "backbone": cfg.backbone, "profile": cfg.profile,
           "weights": cfg.weights}
    if data:
        out["data"] = str(data)
    out.update(overrides_of(cfg))
    if cfg.max_batches != PROFILES[cfg.profile].get("max_batches", 0):
        raise ConfigError("max_batches is set only by the smoke profile; it cannot be passed "
                          "to mlflow run")
    return out


#: The ``--env-manager`` values of ``mlflow run`` a recipe may name.
ENV_MANAGERS = ("local", "virtualenv", "uv", "conda")


def recipe_command(cfg: TrainConfig, *, data: str | None = None,
                   precision: str | None = None, env_manager: str = "local") -> str:
    """The command that reproduces a run (tag ``pipi.recipe`` and the registry's ``recipe``).

    ``precision``: what ``precision=auto`` resolved to on the machine that ran it; mixed
    precision (bf16/fp16) is then named in the command, so the recipe says how the run computed
    and reproduces it on any machine (fp32, the paper's, needs no mention). ``env_manager``:
    the environment the run was computed in (``mlflow run``'s ``--env-manager``; ``local`` for
    ``pipi train`` and ``--env-manager local``)."""
    if cfg.precision == "auto" and precision not in (None, "auto", "fp32"):
        cfg = replace(cfg, precision=precision)
    if env_manager not in ENV_MANAGERS:
        raise ConfigError(f"env_manager={env_manager!r}: one of {', '.join(ENV_MANAGERS)}")
    args = ["mlflow", "run", ".", "-e", "train", "--env-manager", env_manager]
    for k, v in train_params(cfg, data=data).items():
        args += ["-P", f"{k}={v}"]
    return shlex.join(args)


def recipe_key(cfg: TrainConfig, data_digest: str) -> dict:
    """What makes two runs the same recipe on the same data (code version excluded)."""
    return {"config": run_params(cfg), "data_digest": data_digest}


__all__ = ["CROSS_BACKBONE", "DECODERS", "ENV_MANAGERS", "PAPER_SEEDS", "PROFILES", "PROFILE_CHOICES", "SEQUENCE_RECIPE",
           "TRAIN_OVERRIDES", "TrainConfig", "make_config", "overrides_of", "recipe_command",
           "recipe_key", "replace", "resolve_profile", "run_params", "train_params"]
