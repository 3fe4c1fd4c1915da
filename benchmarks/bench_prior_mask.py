"""How much the training rotation's zero fill shifts P_blood, with ``prior_mask=none|fov``.

Run: ``.venv/bin/python benchmarks/bench_prior_mask.py [--frames 256] [--size 224] [--data DIR]``

Training rotates each frame (uniform in +-10 degrees, nearest neighbour, zero fill) before the
prior is computed. With ``prior_mask=none`` (the published behaviour) the black corners enter
the per-image 1st/99th percentiles of the hemoglobin index, so ``P_blood`` of a rotated frame
differs from ``P_blood`` of the same pixels un-rotated (as at evaluation time). With
``prior_mask=fov`` the percentiles are taken over the field of view only.

For each frame the script compares, on the pixels of the field of view, ``P_blood`` of the
rotated frame against the reference: the un-rotated frame's logistic term, moved by the very
same rotation (same random numbers, nearest neighbour, so pixels correspond exactly), times
``Phi`` at the output position. It prints the mean absolute shift for both masks, their ratio,
the share of rotated frames with > 1% fill pixels and the mean 1st-percentile shift. Frames are
the demo synthetic release's (``--data`` takes a Kvasir-format release or a staged folder).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipi.data.cache import AugmentConfig, augment, load_frame
from pipi.data.synth import synthesize_kvasir
from pipi.prior import PriorConfig, fluence_map, prior_channels


def _frames(data: Path | None, n: int, size: int, seed: int) -> torch.Tensor:
    if data is None:
        data = Path(tempfile.mkdtemp(prefix="pipi-prior-mask-")) / "release"
        synthesize_kvasir(data, preset="demo", seed=0, progress=False)
    files = sorted(p for p in Path(data).rglob("*") if p.suffix.lower() in (".jpg", ".png"))
    if not files:
        raise SystemExit(f"{data}: no .jpg/.png frames found")
    pick = np.random.default_rng(seed).choice(len(files), size=min(n, len(files)), replace=False)
    imgs = np.stack([load_frame(files[i], size) for i in sorted(pick)])
    return torch.from_numpy(imgs).double() / 255.0


def _hnorm_term(x: torch.Tensor, cfg: PriorConfig, **kw) -> torch.Tensor:
    """``sigmoid(alpha (H_norm - 0.5))``: P_blood divided by Phi."""
    h, w = x.shape[-2:]
    phi = fluence_map(h, w, lambda_eff=cfg.resolved_lambda(h, w), dtype=x.dtype)
    p = prior_channels(x, alpha=cfg.alpha, **kw)[:, 0]
    return p / phi


def measure(x: torch.Tensor, *, seed: int = 0) -> dict[str, float]:
    rot_only = AugmentConfig(hflip=0.0, brightness=0.0, contrast=0.0, saturation=0.0)
    rotated, valid = augment(x, rot_only, torch.Generator().manual_seed(seed), return_valid=True)
    h, w = x.shape[-2:]
    cfg = PriorConfig()
    phi = fluence_map(h, w, lambda_eff=cfg.resolved_lambda(h, w), dtype=x.dtype)
    # the reference: the un-rotated logistic term, moved by the same rotation
    term = _hnorm_term(x, cfg)[:, None].expand(-1, 3, -1, -1).contiguous()
    ref, _ = augment(term, rot_only, torch.Generator().manual_seed(seed), return_valid=True)
    ref = ref[:, 0] * phi
    out = {}
    for mask in ("none", "fov"):
        p = prior_channels(rotated, mask=mask, valid=valid)[:, 0]
        out[f"shift_{mask}"] = float((p - ref).abs()[valid].mean())
        hb = rotated[:, 0] / rotated.sum(1).clamp(min=1e-6)
        if mask == "none":
            lo = torch.quantile(hb.flatten(1), 0.01, dim=1)
        else:
            lo = torch.stack([torch.quantile(hb[i][valid[i]], 0.01) for i in range(len(hb))])
        hb0 = x[:, 0] / x.sum(1).clamp(min=1e-6)
        lo0 = torch.quantile(hb0.flatten(1), 0.01, dim=1)
        out[f"p1_shift_{mask}"] = float((lo - lo0).abs().mean())
    fill = 1.0 - valid.double().mean(dim=(1, 2))
    out["frames_over_1pct_fill"] = float((fill > 0.01).double().mean())
    out["ratio"] = (out["shift_none"] / out["shift_fov"] if out["shift_fov"] > 1e-9
                    else float("nan"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=None)
    a = ap.parse_args(argv)
    x = _frames(a.data, a.frames, a.size, a.seed)
    for label, frames in (("whole frames", x), ("central crops (no black border)", _crop(x))):
        _report(label, measure(frames, seed=a.seed), len(frames), a.size)
    return 0


def _crop(x: torch.Tensor) -> torch.Tensor:
    """The central square inside the circular field of view, resized back to the frame size."""
    s = x.shape[-1]
    c = int(round(s * 0.6))
    o = (s - c) // 2
    return torch.nn.functional.interpolate(x[..., o:o + c, o:o + c], size=(s, s),
                                           mode="bilinear", align_corners=False)


def _report(label: str, r: dict, n: int, size: int) -> None:
    print(f"[{label}] {n} frames at {size} px, rotation +-{AugmentConfig().rotation_deg:g} deg "
          f"(nearest, zero fill): {100 * r['frames_over_1pct_fill']:.0f}% have > 1% fill pixels")
    print(f"  mean |P_blood shift| on the field of view: prior_mask=none {r['shift_none']:.4f}, "
          f"prior_mask=fov {r['shift_fov']:.4f} (ratio none/fov "
          f"{'n/a' if r['ratio'] != r['ratio'] else format(r['ratio'], '.1f') + 'x'})")
    print(f"  mean |1st-percentile shift| of the hemoglobin index: none {r['p1_shift_none']:.4f}, "
          f"fov {r['p1_shift_fov']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
