"""Physics-informed test-time adaptation (PI-TTA): the paper's null-result probes.

Each probe holds an RGB-only per-frame model (cell ``a``) fixed except for a small adapted
module and, for every evaluated frame, takes ``K`` plain gradient steps (SGD, ``TTAConfig``:
``K = 5``, ``lr = 1e-3`` as in the paper) on a self-supervised loss whose target is the
analytic prior ``P_blood`` of that frame, starting again from the fitted module for every
frame (a per-image copy), before the frame is classified.

Paper variants (paper, "Test-time adaptation variants"):

* ``aux_sgd`` (variant 1): an ``AuxDecoder`` on the frozen backbone's pre-pool feature map,
  loss BCE-with-logits against ``P_blood`` average-pooled to the map size (the target of the
  ``distill`` cell's auxiliary head).
* ``embed_mlp`` (variant 2): ``EmbedProbe``, a two-layer MLP from the pooled embedding to a
  64-d "prior summary" and a linear read-out to the 8 C1 scalars
  (``pipi.prior.c1_features(..., form=8)`` of the full-resolution ``P_blood``), loss MSE; the
  whole probe (MLP and read-out) is adapted.
* ``fmap_align`` (variant 3): a 1x1 convolution from the pre-pool map to one channel, loss
  mean squared error (L2) against ``P_blood`` average-pooled to the map size.

The paper does not say how these modules are initialised before test time; here each is
first fitted offline on (a seeded subset of at most ``fit_max_frames``) train frames, with
the backbone frozen in eval mode and no augmentation: Adam at ``fit_lr`` for ``fit_epochs``
epochs on the same loss. Backbone and classifier stay frozen, so the adapted module is not
on the classifier's path and **the class predictions equal the un-adapted baseline by
construction**: that is the paper's null result (macro-AUC delta 0). What adaptation does
is visible only in the probe's own loss before and after the ``K`` steps.

Non-paper variant ``bn_tent`` (TENT-like; tagged ``pipi.paper_variant=false``): the affine
weight and bias of every BatchNorm layer of the backbone are adapted per image (``K`` SGD
steps at ``lr``, reset per image) on the ``aux_sgd`` loss through the fitted, frozen
``AuxDecoder``. BatchNorm stays in eval mode (running statistics frozen: batch statistics of
a single image are meaningless); only the affine parameters move. They are on the
classifier's path, so predictions can change. Backbones without BatchNorm (ConvNeXt) have no
``bn_tent`` (``variants_for``).

Batched per-image adaptation: the head probes adapt one copy of their parameters per image,
all images of a batch at once, with ``torch.func.vmap(grad(...))`` over
``torch.func.functional_call``; ``bn_tent`` gives each BatchNorm layer one (weight, bias)
row per image (``_SampleAffineBN``) and differentiates the sum of the per-image losses, whose
gradient with respect to row ``i`` is image ``i``'s own gradient (eval-mode layers do not
mix images).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from pipi.config import TrainConfig
from pipi.data.cache import batches, to_float
from pipi.errors import ConfigError
from pipi.models import AuxDecoder
from pipi.prior import c1_features, prior_channels
from pipi.training.frames import FrameInputs

log = logging.getLogger(__name__)

PAPER_VARIANTS: tuple[str, ...] = ("aux_sgd", "embed_mlp", "fmap_align")
#: Every variant; ``bn_tent`` is not in the paper.
VARIANTS: tuple[str, ...] = (*PAPER_VARIANTS, "bn_tent")
#: Backbones with BatchNorm layers (``bn_tent`` needs them).
BN_ARCHS: tuple[str, ...] = ("efficientnet_b0", "resnet18", "resnet50")

NULL_NOTE = ("paper PI-TTA probe: backbone and classifier frozen, the adapted module is not on "
             "the classifier's path, so class predictions equal the un-adapted baseline by "
             "construction (test macro-AUC delta 0, the paper's null result); "
             "tta/loss_before and tta/loss_after show what adaptation did to the module")
BN_TENT_NOTE = ("non-paper variant: BatchNorm affine weight/bias of the backbone adapted per "
                "image (running statistics frozen, eval mode) on the aux_sgd BCE through the "
                "fitted decoder; on the classifier's path, so predictions can change")


@dataclass(frozen=True)
class TTAConfig:
    """Test-time adaptation recipe (``K``, ``lr`` from the paper; the rest documented here)."""

    steps: int = 5                 # K gradient steps per test image (paper)
    lr: float = 1e-3               # per-image plain SGD step size (paper)
    fit_epochs: int = 5            # offline fit of the probe on train frames ("a few epochs")
    fit_lr: float = 1e-3           # Adam step size of the offline fit
    fit_batch_size: int = 64       # offline fit batch
    fit_max_frames: int = 2048     # seeded subset of train frames for the fit (bounds memory)
    batch_size: int = 64           # images adapted at once, each with its own copy
    aux_width: int = 64            # AuxDecoder width (as the distill cell's head)
    mlp_hidden: int = 256          # embed_mlp hidden width
    summary_dim: int = 64          # embed_mlp "prior summary" width (paper: 64)
    seed: int = 0                  # probe initialisation and fit subset / order

    def __post_init__(self) -> None:
        for name in ("fit_epochs", "fit_batch_size", "fit_max_frames", "batch_size",
                     "aux_width", "mlp_hidden", "summary_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise ConfigError(f"steps must be an integer >= 0, got {self.steps!r}")
        for name in ("lr", "fit_lr"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")


@dataclass(frozen=True)
class FittedProbe:
    """A probe module fitted offline on train frames (eval mode)."""

    variant: str
    module: nn.Module
    fit_losses: tuple[float, ...]  # mean loss per fit epoch
    fit_frames: int


@dataclass(frozen=True)
class TTAOutput:
    """Per-frame result of one probe over a set of frames, in input order."""

    variant: str
    probs: np.ndarray = field(repr=False)          # (N, 14) softmax after adaptation
    loss_before: np.ndarray = field(repr=False)    # (N,) probe loss before the K steps
    loss_after: np.ndarray = field(repr=False)     # (N,) ... after them
    param_change: np.ndarray = field(repr=False)   # (N,) ||theta_K - theta_0|| / ||theta_0||

    @property
    def on_classifier_path(self) -> bool:
        return self.variant not in PAPER_VARIANTS


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ConfigError(f"Unknown TTA variant {variant!r}. Available: {list(VARIANTS)}")
    return variant


def variants_for(backbone: str) -> tuple[str, ...]:
    """The variants a backbone supports: ``bn_tent`` needs BatchNorm layers."""
    return VARIANTS if backbone in BN_ARCHS else PAPER_VARIANTS


# --------------------------------------------------------------------------- probes
class EmbedProbe(nn.Module):
    """Variant 2: embedding (B, D) -> MLP -> prior summary (B, S) -> linear -> (B, 8)."""

    def __init__(self, in_features: int, *, hidden: int = 256, summary_dim: int = 64,
                 out_features: int = 8) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_features, hidden), nn.GELU(),
                                 nn.Linear(hidden, summary_dim))
        self.readout = nn.Linear(summary_dim, out_features)

    def forward(self, emb: Tensor) -> Tensor:
        return self.readout(self.mlp(emb))


def build_probe(variant: str, *, feature_dim: int, tta: TTAConfig = TTAConfig()) -> nn.Module:
    """The (un-fitted) module a variant adapts; ``bn_tent`` fits an ``AuxDecoder`` as its loss."""
    check_variant(variant)
    if variant in ("aux_sgd", "bn_tent"):
        return AuxDecoder(feature_dim, width=tta.aux_width)
    if variant == "fmap_align":
        return nn.Conv2d(feature_dim, 1, kernel_size=1)
    return EmbedProbe(feature_dim, hidden=tta.mlp_hidden, summary_dim=tta.summary_dim)


def per_sample_loss(variant: str, out: Tensor, target: Tensor) -> Tensor:
    """(B,) loss of each sample: BCE-with-logits (aux_sgd, bn_tent) or squared error (mean)."""
    if variant in ("aux_sgd", "bn_tent"):
        loss = F.binary_cross_entropy_with_logits(out, target, reduction="none")
    else:
        loss = F.mse_loss(out, target, reduction="none")
    return loss.flatten(1).mean(1)


@dataclass(frozen=True)
class _Batch:
    """Frozen-model quantities of a batch of frames."""

    x: Tensor          # (B, 3, H, W) normalised model input
    fmap: Tensor       # (B, C, h, w) pre-pool map
    logits: Tensor     # (B, 14) classifier logits of the frozen model
    probe_in: Tensor   # fmap, or the pooled embedding (B, C) for embed_mlp
    target: Tensor     # pooled P_blood (B, 1, h, w), or the 8 C1 scalars (B, 8)


def _p_blood(x01: Tensor, cfg: TrainConfig) -> Tensor:
    """(B, 1, H, W) analytic P_blood with the run's prior parameters."""
    return prior_channels(x01, **asdict(cfg.prior))[:, :1]


def _model_input(x01: Tensor, cfg: TrainConfig) -> Tensor:
    """The RGB model's evaluation input (as ``predict_probs`` builds it)."""
    return FrameInputs(cfg)(x01, train=False)[0]


def _check_model(model: nn.Module) -> None:
    bb = getattr(model, "backbone", None)
    if bb is None or not hasattr(model, "head") or getattr(bb, "in_channels", None) != 3:
        raise ConfigError("PI-TTA adapts an RGB-only per-frame model (cell a): a 3-channel "
                          "backbone with a linear head")


@torch.no_grad()
def _encode(model: nn.Module, images: np.ndarray, idx: np.ndarray, variant: str,
            cfg: TrainConfig, device: torch.device) -> _Batch:
    x01 = to_float(images, idx, device)
    x = _model_input(x01, cfg)
    fmap = model.backbone.forward_features(x)
    emb = model.backbone.pool(fmap)
    logits = model.head(model.dropout(emb))
    p = _p_blood(x01, cfg)
    if variant == "embed_mlp":
        return _Batch(x, fmap, logits, emb, c1_features(p, form=8))
    return _Batch(x, fmap, logits, fmap, F.adaptive_avg_pool2d(p, fmap.shape[-2:]))


def _device(device) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def fit_probe(model: nn.Module, variant: str, images: np.ndarray, *, cfg: TrainConfig,
              rows: np.ndarray | None = None, tta: TTAConfig = TTAConfig(),
              device=None) -> FittedProbe:
    """Fit a variant's module offline on frames (the train split) of a frozen model.

    Parameters
    ----------
    model : nn.Module
        RGB-only ``FrameClassifier`` (frozen, eval mode).
    variant : str
        One of ``VARIANTS``.
    images : ndarray
        uint8 ``(N, 3, S, S)`` frames (e.g. the staged cache memmap).
    cfg : TrainConfig
        The run's configuration (prior parameters).
    rows : ndarray, optional
        Rows of ``images`` to fit on (the train split); default all. At most
        ``tta.fit_max_frames`` of them, drawn with ``tta.seed``, are used.

    Returns
    -------
    FittedProbe
        The fitted module in eval mode, on ``device``.
    """
    check_variant(variant)
    _check_model(model)
    dev = _device(device)
    model = model.to(dev).eval()
    rows = np.arange(len(images)) if rows is None else np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        raise ConfigError("no train frames to fit the PI-TTA probe on")
    if len(rows) > tta.fit_max_frames:
        rng = np.random.default_rng(tta.seed)
        rows = np.sort(rng.choice(rows, tta.fit_max_frames, replace=False))
    feats, targets = [], []
    for b in batches(len(rows), tta.batch_size):
        enc = _encode(model, images, rows[b], variant, cfg, dev)
        feats.append(enc.probe_in)
        targets.append(enc.target)
    feats_t, targets_t = torch.cat(feats), torch.cat(targets)
    with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
        torch.manual_seed(tta.seed)
        probe = build_probe(variant, feature_dim=model.backbone.feature_dim, tta=tta).to(dev)
    opt = torch.optim.Adam(probe.parameters(), lr=tta.fit_lr)
    gen = torch.Generator().manual_seed(tta.seed)
    history = []
    for epoch in range(tta.fit_epochs):
        probe.train()
        total, seen = 0.0, 0
        for b in batches(len(rows), tta.fit_batch_size, gen=gen):
            if len(b) < 2:          # BatchNorm (AuxDecoder) needs two samples in train mode
                continue
            bt = torch.from_numpy(np.asarray(b)).to(dev)
            loss = per_sample_loss(variant, probe(feats_t[bt]), targets_t[bt]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
            seen += len(b)
        history.append(total / max(seen, 1))
        log.info("PI-TTA %s: fit epoch %d loss %.5f", variant, epoch, history[-1])
    probe.eval()
    for p in probe.parameters():
        p.requires_grad_(False)
    return FittedProbe(variant, probe, tuple(history), len(rows))


# --------------------------------------------------------------------------- adaptation
def adapt_head(probe: nn.Module, variant: str, inputs: Tensor, targets: Tensor, *,
               steps: int, lr: float) -> tuple[Tensor, Tensor, Tensor]:
    """K SGD steps of one copy of ``probe`` per sample, all samples at once.

    Returns ``(loss_before, loss_after, param_change)``, each ``(B,)``. ``probe`` itself is
    not modified (its buffers, e.g. BatchNorm statistics, are used frozen).
    """
    probe.eval()
    params = {k: v.detach() for k, v in probe.named_parameters()}
    buffers = {k: v.detach() for k, v in probe.named_buffers()}

    def loss_one(p, x, t):
        out = functional_call(probe, (p, buffers), (x.unsqueeze(0),))
        return per_sample_loss(variant, out, t.unsqueeze(0))[0]

    n = len(inputs)
    cur = {k: v.unsqueeze(0).expand(n, *v.shape).clone() for k, v in params.items()}
    step = vmap(grad_and_value(loss_one))
    before = None
    for k in range(steps):
        grads, loss = step(cur, inputs, targets)
        if k == 0:
            before = loss.detach()
        cur = {name: cur[name] - lr * grads[name] for name in cur}
    with torch.no_grad():
        after = vmap(loss_one)(cur, inputs, targets)
    change = _relative_change(cur, params)
    return (after if before is None else before), after, change


def _relative_change(cur: dict[str, Tensor], start: dict[str, Tensor]) -> Tensor:
    with torch.no_grad():
        num = sum((cur[k] - start[k].unsqueeze(0)).flatten(1).pow(2).sum(1) for k in cur)
        den = sum(start[k].pow(2).sum() for k in cur)
        return num.sqrt() / den.sqrt().clamp_min(1e-12)


class _SampleAffineBN(nn.Module):
    """Eval-mode BatchNorm2d with frozen statistics and one (weight, bias) row per sample."""

    def __init__(self, bn: nn.BatchNorm2d) -> None:
        super().__init__()
        if bn.running_mean is None or bn.running_var is None:
            raise ConfigError("bn_tent needs BatchNorm layers with running statistics")
        c = bn.num_features
        w = bn.weight.detach().clone() if bn.weight is not None else torch.ones(c)
        b = bn.bias.detach().clone() if bn.bias is not None else torch.zeros(c)
        self.register_buffer("running_mean", bn.running_mean.detach().clone())
        self.register_buffer("running_var", bn.running_var.detach().clone())
        self.register_buffer("weight0", w)
        self.register_buffer("bias0", b)
        self.eps = bn.eps
        self.sample_weight: Tensor | None = None   # (B, C), set by adapt_bn
        self.sample_bias: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        # (B, C) per-sample scale and shift of the frozen normalisation, then one fused op
        scale = self.sample_weight * torch.rsqrt(self.running_var + self.eps)
        shift = self.sample_bias - self.running_mean * scale
        return torch.addcmul(shift[:, :, None, None], x, scale[:, :, None, None])


def per_sample_bn_backbone(backbone: nn.Module) -> tuple[nn.Module, list[_SampleAffineBN]]:
    """A frozen copy of ``backbone`` whose BatchNorm2d layers take per-sample affines."""
    bb = copy.deepcopy(backbone).eval()
    layers = []
    for name, module in list(bb.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                new = _SampleAffineBN(child)
                setattr(module, child_name, new)
                layers.append(new)
    if not layers:
        raise ConfigError("bn_tent: the backbone has no BatchNorm2d layer (e.g. ConvNeXt uses "
                          "LayerNorm); use one of " + ", ".join(BN_ARCHS))
    for p in bb.parameters():
        p.requires_grad_(False)
    return bb, layers


def adapt_bn(model: nn.Module, bb: nn.Module, layers: list[_SampleAffineBN],
             decoder: nn.Module, x: Tensor, target_full: Tensor, *, steps: int, lr: float
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``bn_tent`` on one batch: K SGD steps of each image's own BN affines.

    ``bb``/``layers`` come from ``per_sample_bn_backbone(model.backbone)``; ``target_full``
    is ``(B, 1, H, W)`` P_blood. Returns ``(logits, loss_before, loss_after, param_change)``
    with the logits of the adapted backbone through the frozen classifier head.
    """
    n = len(x)
    for layer in layers:
        layer.sample_weight = layer.weight0.unsqueeze(0).expand(n, -1).clone().requires_grad_()
        layer.sample_bias = layer.bias0.unsqueeze(0).expand(n, -1).clone().requires_grad_()
    params = [t for layer in layers for t in (layer.sample_weight, layer.sample_bias)]
    start = {str(i): t.detach()[0].clone() for i, t in enumerate(params)}

    def loss_of(fmap):
        target = F.adaptive_avg_pool2d(target_full, fmap.shape[-2:])
        return per_sample_loss("bn_tent", decoder(fmap), target)

    before = None
    try:
        for k in range(steps):
            with torch.enable_grad():
                loss = loss_of(bb.forward_features(x))
                grads = torch.autograd.grad(loss.sum(), params)
            if k == 0:
                before = loss.detach()
            with torch.no_grad():
                for t, g in zip(params, grads):
                    t.sub_(lr * g)
        with torch.no_grad():
            fmap = bb.forward_features(x)
            after = loss_of(fmap)
            logits = model.head(model.dropout(bb.pool(fmap)))
            change = _relative_change({str(i): t for i, t in enumerate(params)}, start)
    finally:
        for layer in layers:
            layer.sample_weight = layer.sample_bias = None
    return logits, (after if before is None else before), after, change


def adapt_predict(model: nn.Module, fitted: FittedProbe, images: np.ndarray, *,
                  cfg: TrainConfig, rows: np.ndarray | None = None,
                  tta: TTAConfig = TTAConfig(), device=None) -> TTAOutput:
    """Adapt per image and classify frames: ``rows`` (default all) of uint8 ``(N, 3, S, S)``.

    Paper variants: the class probabilities are those of the frozen model (the adapted module
    is not on the classifier's path); ``bn_tent``: those of the per-image adapted backbone.
    """
    _check_model(model)
    variant = fitted.variant
    dev = _device(device)
    model = model.to(dev).eval()
    probe = fitted.module.to(dev).eval()
    bn = per_sample_bn_backbone(model.backbone) if variant == "bn_tent" else None
    rows = np.arange(len(images)) if rows is None else np.asarray(rows, dtype=np.int64)
    probs, before, after, change = [], [], [], []
    for b in batches(len(rows), tta.batch_size):
        if variant == "bn_tent":
            x01 = to_float(images, rows[b], dev)
            logits, lb, la, ch = adapt_bn(model, *bn, probe, _model_input(x01, cfg),
                                          _p_blood(x01, cfg),
                                          steps=tta.steps, lr=tta.lr)
        else:
            enc = _encode(model, images, rows[b], variant, cfg, dev)
            lb, la, ch = adapt_head(probe, variant, enc.probe_in, enc.target, steps=tta.steps,
                                    lr=tta.lr)
            logits = enc.logits    # the frozen classifier: the adapted module is off its path
        probs.append(torch.softmax(logits.float(), dim=1).cpu().numpy())
        for acc, v in ((before, lb), (after, la), (change, ch)):
            acc.append(v.detach().float().cpu().numpy())

    def cat(parts, width=None):
        if parts:
            return np.concatenate(parts)
        return np.zeros((0, width) if width else (0,), np.float32)

    return TTAOutput(variant, cat(probs, model.num_classes), cat(before), cat(after), cat(change))


__all__ = ["BN_ARCHS", "PAPER_VARIANTS", "VARIANTS", "EmbedProbe", "FittedProbe", "TTAConfig",
           "TTAOutput", "adapt_bn", "adapt_head", "adapt_predict", "build_probe",
           "fit_probe", "per_sample_bn_backbone", "per_sample_loss",
           "variants_for"]
