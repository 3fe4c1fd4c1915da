"""Transplant and Grad-CAM tables (paper section "Channel ablation" and Table
"subset-transplant"; "Quantitative Grad-CAM/prior overlap"), from ``mlflow run . -e
transplant`` runs:

* ``transplant_conv``: first-conv cosine RGB vs +PI per seed pair against the within-arm
  baseline (RGB vs RGB of different seeds), per-channel L2 norms of the +PI first conv;
* ``transplant``: BN (norm) transplant and subset-block transplants, each delta vs the RGB
  run it was applied to (paired by seed, from predictions), sign-positive seeds and the
  reconstruction share (mean delta / mean headline +PI lift of the same seeds);
* ``gradcam``: Dice of top-quintile Grad-CAM with top-quintile P_blood per focal class, RGB and
  +PI of the same seed, and the delta.

The cosine, norms and Dice come from the metrics of the ``first_conv*`` and ``gradcam``
children (weights and saliency, not predictions); every delta of the transplant table is
recomputed from the children's predictions.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from pipi.analysis import Analysis, compare_pairs
from pipi.models.specs import SUBSETS
from pipi.report.rows import base_run_notes, ci_cols, delta_cis, no_runs, run_map, seed_ci_note
from pipi.report.tables import Table, fmt_auc, fmt_delta, fmt_mean_sd
from pipi.tracking.tags import TAG_DONOR_RUN, TAG_SOURCE_RUN, TAG_TRANSPLANT_KIND

__all__ = ["gradcam_table", "study_runs", "transplant_conv_table", "transplant_table"]

WHATS = ("bn", "B", "C", "D", "E", "F")


def _json(v) -> dict:
    try:
        return json.loads(v) if isinstance(v, str) and v else {}
    except ValueError:
        return {}


def study_runs(an: Analysis, study: str, variants) -> pd.DataFrame:
    """FINISHED runs of a study's variants in this selection, newest per (source, donor),
    with their metrics and pipi tags parsed (columns ``m`` and ``t``)."""
    allr = an.evidence.all_runs
    if allr is None or allr.empty or "study" not in allr:
        return pd.DataFrame()
    df = allr[(allr["study"] == study) & allr["variant"].isin(list(variants))
              & (allr["status"] == "FINISHED")].copy()
    if an.evidence.data_digest:
        df = df[df["data_digest"] == an.evidence.data_digest]
    if df.empty:
        return df
    df["m"] = [_json(v) for v in df.get("metrics", pd.Series("", index=df.index))]
    df["t"] = [_json(v) for v in df.get("tags", pd.Series("", index=df.index))]
    df["source"] = [t.get(TAG_SOURCE_RUN, "") for t in df["t"]]
    df["donor"] = [t.get(TAG_DONOR_RUN, "") for t in df["t"]]
    df = df.sort_values("start_time").drop_duplicates(["variant", "source", "donor"], keep="last")
    return df.reset_index(drop=True)


def _ms(v: np.ndarray) -> tuple[float, float]:
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    return (float(v.mean()) if len(v) else float("nan"),
            float(v.std(ddof=1)) if len(v) > 1 else float("nan"))


def transplant_conv_table(an: Analysis) -> Table:
    """First-conv cosine (RGB vs +PI per seed) vs the within-arm RGB-RGB baseline; +PI norms."""
    title = "First-conv weight cosine: RGB vs +PI per seed, against the within-arm baseline"
    runs = study_runs(an, "transplant", ("first_conv", "first_conv_within"))
    if runs.empty:
        return no_runs("transplant_conv", title, "sec:channel-ablation",
                       "no first-conv runs; run `mlflow run . -e transplant -P rgb=... -P pi=...`")
    rows, disp, ids = [], [], []
    for b, grp in runs.groupby("backbone", sort=True):
        cross, within = grp[grp["variant"] == "first_conv"], grp[grp["variant"] == "first_conv_within"]
        cos_x = np.array([m.get("conv/cosine", np.nan) for m in cross["m"]])
        cos_w = np.array([m.get("conv/cosine", np.nan) for m in within["m"]])
        norms = {ch: _ms([m.get(f"conv/norm_pi/{ch}", np.nan) for m in cross["m"]])[0]
                 for ch in ("R", "G", "B", "P_blood", "Phi")}
        rgb_norm = float(np.sqrt(sum(norms[c] ** 2 for c in ("R", "G", "B"))))
        (mx, sx), (mw, sw) = _ms(cos_x), _ms(cos_w)
        rows.append({"backbone": b, "cosine_mean": mx, "cosine_sd": sx, "n_pairs": len(cos_x),
                     "within_mean": mw, "within_sd": sw, "n_within_pairs": len(cos_w),
                     **{f"norm_pi_{k}": v for k, v in norms.items()}, "norm_pi_RGB": rgb_norm,
                     "rgb_over_pblood": rgb_norm / norms["P_blood"] if norms["P_blood"] else
                     float("nan"),
                     "rgb_over_phi": rgb_norm / norms["Phi"] if norms["Phi"] else float("nan")})
        disp.append({"backbone": b,
                     "cosine RGB vs +PI (seed pairs)": f"{fmt_mean_sd(mx, sx, 5)} ({len(cos_x)})",
                     "within-arm RGB vs RGB (pairs)": f"{fmt_mean_sd(mw, sw, 5)} ({len(cos_w)})",
                     "+PI first-conv L2 norm R, G, B | RGB | P_blood, Phi": (
                         ", ".join(f"{norms[c]:.3g}" for c in ("R", "G", "B"))
                         + f" | {rgb_norm:.3g} | {norms['P_blood']:.3g}, {norms['Phi']:.3g}")})
        ids.append({"first_conv": {int(s): r for s, r in zip(cross["seed"], cross["run_id"])},
                    "first_conv_within": {int(s): r for s, r in
                                          zip(within["seed"], within["run_id"])}})
    notes = ("Cosine of the RGB input slices of the two first convolutions (flattened, float64), "
             "per seed pair; the within-arm baseline compares RGB runs of different seeds (one "
             "run id per pair shown, keyed by the first run's seed; full ids in the runs' "
             "tags). Norms: L2 norm of the +PI first conv's weights per input channel, mean "
             "over seeds; RGB = sqrt(R^2 + G^2 + B^2).",)
    return Table("transplant_conv", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 notes, paper="sec:channel-ablation")


def transplant_table(an: Analysis) -> Table:
    """BN and subset-block transplant: delta vs the RGB run, k/n positive, reconstruction."""
    title = "BN and subset-block transplant: +PI parameters moved into the RGB run of each seed"
    ev = an.evidence
    backbones = [b for b in ev.backbones()
                 if any(ev.arm(b, f"a@transplant_{w}") for w in WHATS)]
    if not backbones:
        return no_runs("transplant", title, "tab:subset-transplant",
                       "no transplant runs; run `mlflow run . -e transplant -P rgb=... -P pi=...`")
    kinds = study_runs(an, "transplant", [f"transplant_{w}" for w in WHATS])
    kind_of = {(r.backbone, r.variant): r.t.get(TAG_TRANSPLANT_KIND, "")
               for r in kinds.itertuples()} if not kinds.empty else {}
    rows, disp, ids, notes = [], [], [], []
    for b in backbones:
        arms = [f"a@transplant_{w}" for w in WHATS if ev.arm(b, f"a@transplant_{w}")]
        comps = {c.new: c for c in compare_pairs(an, [("a", x) for x in arms],
                                                 family=f"transplant_{b}", backbone=b,
                                                 notes=notes)}
        head = {c.new: c for c in compare_pairs(an, [("a", "pi")], family=f"transplant_lift_{b}",
                                                backbone=b, notes=notes)} \
            if ev.arm(b, "a") and ev.arm(b, "pi") else {}
        lift = head.get("pi")
        for w in WHATS:
            arm = ev.arm(b, f"a@transplant_{w}")
            if arm is None:
                continue
            c = comps.get(arm.cell)
            ok = c is not None and c.available
            d = c.deltas if ok else np.zeros(0)
            # the headline lift of the same seeds
            seeds = [s for s in (c.seeds if ok else ()) if lift is not None and s in lift.seeds]
            hl = (float(np.mean([lift.deltas[lift.seeds.index(s)] for s in seeds]))
                  if seeds else float("nan"))
            # a share of a lift only where there is a lift: with pi - a <= 0 the ratio's sign
            # and size mean nothing (as retention is undefined for Δ_Kvasir <= 0)
            share = float(d.mean()) / hl if ok and np.isfinite(hl) and hl > 0 else float("nan")
            kind = kind_of.get((b, f"transplant_{w}"), "")
            blocks = ("every " + ("LayerNorm (no BatchNorm in this backbone)"
                                  if kind == "layernorm" else "BatchNorm") + " layer"
                      if w == "bn" else SUBSETS[b][w].description)
            label = "BN (norm layers)" if w == "bn" else f"{w} ({SUBSETS[b][w].label})"
            rows.append({"backbone": b, "transplant": w, "blocks": blocks, "norm_kind": kind,
                         "n_seeds": len(d), "macro_auc_mean": float(arm.macro.mean()),
                         "delta_mean": float(d.mean()) if ok else float("nan"),
                         "delta_sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                         "n_positive": c.n_positive if ok else None,
                         "headline_lift": hl, "reconstruction": share,
                         **ci_cols(c if ok else None)})
            disp.append({"backbone": b, "transplant": label, "blocks": blocks,
                         "macro-AUC": fmt_auc(arm.macro.mean()),
                         "mean Δ vs RGB (k/n +)": (f"{fmt_mean_sd(d.mean(), rows[-1]['delta_sd'])}"
                                                   f" ({c.sign_text})" if ok else "n/a"),
                         **delta_cis(an, c if ok else None, digits=4),
                         "headline lift (pi - a)": fmt_delta(hl),
                         "reconstruction": f"{share:+.0%}" if np.isfinite(share) else
                         "n/a (no lift: pi - a <= 0)" if np.isfinite(hl) else "n/a"})
            ids.append({arm.cell: run_map(arm)} | ({"a": dict(c.ref_runs)} if ok else {})
                       | ({"pi": dict(lift.new_runs)} if lift is not None else {}))
        notes.extend(base_run_notes(ev, b, "a", arms))
    notes = [("Δ = transplanted - RGB (a) run of the same seed, test macro-AUC from "
              "predictions; reconstruction = mean Δ / mean headline lift (pi - a) over the same "
              "seeds, undefined where that lift is <= 0 (nothing to reconstruct). The stem is never moved (its input channels differ). ConvNeXt-Tiny has no "
              "BatchNorm: its norm transplant moves every LayerNorm (column norm_kind)."),
             seed_ci_note(an), *notes]
    return Table("transplant", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids),
                 tuple(notes), paper="tab:subset-transplant")


def gradcam_table(an: Analysis) -> Table:
    """Per focal class: Dice(top-quintile Grad-CAM, top-quintile P_blood), RGB, +PI, delta."""
    title = "Grad-CAM / P_blood overlap (Dice of top quintiles) per focal class"
    runs = study_runs(an, "gradcam", ("gradcam",))
    if runs.empty:
        return no_runs("gradcam", title, "sec:gradcam",
                       "no Grad-CAM runs; run `mlflow run . -e transplant -P study=gradcam "
                       "-P rgb=... -P pi=...`")
    rows, disp, ids = [], [], []
    for b, grp in runs.groupby("backbone", sort=True):
        classes = sorted({k.split("/", 2)[2] for m in grp["m"] for k in m
                          if k.startswith("gradcam/dice_rgb/")})
        for cls in classes:
            rgb = np.array([m.get(f"gradcam/dice_rgb/{cls}", np.nan) for m in grp["m"]])
            pi = np.array([m.get(f"gradcam/dice_pi/{cls}", np.nan) for m in grp["m"]])
            n = [int(m.get(f"gradcam/n/{cls}", 0)) for m in grp["m"]]
            (mr, sr), (mp, sp), (md, sd) = _ms(rgb), _ms(pi), _ms(pi - rgb)
            rows.append({"backbone": b, "class": cls, "n_seeds": int(np.isfinite(pi - rgb).sum()),
                         "frames_per_seed": max(n) if n else 0, "dice_rgb": mr, "dice_rgb_sd": sr,
                         "dice_pi": mp, "dice_pi_sd": sp, "delta": md, "delta_sd": sd})
            disp.append({"backbone": b, "class": cls, "frames/seed": max(n) if n else 0,
                         "seeds": rows[-1]["n_seeds"], "Dice RGB": fmt_mean_sd(mr, sr),
                         "Dice +PI": fmt_mean_sd(mp, sp), "Δ (+PI - RGB)": fmt_mean_sd(md, sd)})
            ids.append({"gradcam": {int(s): r for s, r in zip(grp["seed"], grp["run_id"])}})
    notes = ("Grad-CAM (Captum LayerGradCam) of the last convolutional stage for each frame's "
             "true class; Dice between the pixels above the 80th percentile of the Grad-CAM map "
             "and of P_blood (+PI run's prior parameters), mean over the sampled test frames of "
             "the class, then mean ± sd over seed pairs. Overlay and prior figures: artifacts "
             "gradcam/overlay.png and gradcam/prior.png of each run.",)
    return Table("gradcam", title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids), notes,
                 paper="sec:gradcam")
