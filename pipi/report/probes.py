"""The foundation-model linear-probe rows of the per-frame table (paper: "DINOv2-base + linear
probe", "BiomedCLIP + linear probe"): runs of cell ``probe`` on ``dinov2_vitb14`` and
``biomedclip_vitb16``, paired by seed with the headline backbone's (a) and +PI runs on the same
test frames (delta = probe - reference; both bootstrap intervals, the sign-flip p)."""

from __future__ import annotations

from pipi.analysis import Analysis
from pipi.models.specs import FOUNDATION
from pipi.report.rows import ci_header, seed_ci_header
from pipi.report.tables import fmt_ci, fmt_delta, fmt_mean_sd, fmt_p
from pipi.stats import sign_flip_test

__all__ = ["PROBE_CELL", "PROBE_LABELS", "probe_rows"]

PROBE_CELL = "probe"
PROBE_LABELS = {"dinov2_vitb14": "DINOv2-base (ViT-B/14), frozen + linear probe",
                "biomedclip_vitb16": "BiomedCLIP (ViT-B/16), frozen + linear probe"}


def _paired(an: Analysis, ref: tuple[str, str], new: tuple[str, str]) -> dict | None:
    """Cross-backbone paired delta of two arms over their common seeds."""
    ev, o = an.evidence, an.options
    ra, na = ev.arm(*ref), ev.arm(*new)
    if ra is None or na is None:
        return None
    seeds = sorted(set(ra.seeds) & set(na.seeds))
    if not seeds:
        return None
    d = na.macro[[na.index(s) for s in seeds]] - ra.macro[[ra.index(s) for s in seeds]]
    boot = an.bootstrap.delta([(*ref, s) for s in seeds], [(*new, s) for s in seeds])
    sb = an.seed_bca(d)
    sf = sign_flip_test(d, n_resamples=o.n_permutations, rng=o.seed)
    return {"seeds": seeds, "deltas": d, "boot": boot, "seed_bca": sb, "sign_flip": sf,
            "ref_runs": {s: ra.run_ids[ra.index(s)] for s in seeds}}


def _seed_text(sb) -> str:
    if sb is None:
        return "n/a (< 2 seeds)"
    text = fmt_ci(*sb.confidence_interval)
    return f"{text} (unstable)" if sb.unstable else text


def probe_rows(an: Analysis) -> tuple[list[dict], list[dict], list[dict], list[str]]:
    """(data rows, display rows, run ids, notes) of the probe rows, one per foundation
    backbone with ``probe`` runs; empty lists without such runs."""
    ev, b = an.evidence, an.headline
    rows, disp, ids, notes = [], [], [], []
    for fb, label in PROBE_LABELS.items():
        arm = ev.arm(fb, PROBE_CELL)
        if arm is None:
            continue
        m = arm.macro
        sd = float(m.std(ddof=1)) if len(m) > 1 else float("nan")
        va = _paired(an, (b, "a"), (fb, PROBE_CELL))
        vp = _paired(an, (b, "pi"), (fb, PROBE_CELL))
        row = {"cell": PROBE_CELL, "backbone": fb, "configuration": label,
               "n_seeds": len(m), "seeds": ",".join(map(str, arm.seeds)),
               "mean": float(m.mean()), "sd": sd,
               "embedding_dim": FOUNDATION[fb].embed_dim}
        for tag, v in (("a", va), ("pi", vp)):
            row |= {f"delta_vs_{tag}": float(v["deltas"].mean()) if v else float("nan"),
                    f"n_positive_vs_{tag}": int((v["deltas"] > 0).sum()) if v else None,
                    f"n_paired_vs_{tag}": len(v["seeds"]) if v else 0,
                    f"sign_flip_p_vs_{tag}": v["sign_flip"].pvalue if v else float("nan"),
                    f"vs_{tag}_ci_bca_low": v["boot"].bca_interval.low if v else float("nan"),
                    f"vs_{tag}_ci_bca_high": v["boot"].bca_interval.high if v else float("nan"),
                    f"vs_{tag}_bootstrap_unit": v["boot"].unit if v else "",
                    f"vs_{tag}_seed_ci_bca_low": (v["seed_bca"].confidence_interval.low
                                                  if v and v["seed_bca"] else float("nan")),
                    f"vs_{tag}_seed_ci_bca_high": (v["seed_bca"].confidence_interval.high
                                                   if v and v["seed_bca"] else float("nan")),
                    f"vs_{tag}_seed_ci_percentile_low": (
                        v["seed_bca"].percentile_interval.low
                        if v and v["seed_bca"] else float("nan")),
                    f"vs_{tag}_seed_ci_percentile_high": (
                        v["seed_bca"].percentile_interval.high
                        if v and v["seed_bca"] else float("nan"))}
        rows.append(row)

        def delta_text(v) -> str:
            if v is None:
                return "n/a"
            k = int((v["deltas"] > 0).sum())
            return f"{fmt_delta(float(v['deltas'].mean()))} ({k}/{len(v['seeds'])} +)"

        disp.append({"Configuration": label, "seeds": row["seeds"],
                     "Macro-AUC": fmt_mean_sd(row["mean"], sd),
                     "paired Δ vs (a)": delta_text(va),
                     "sign-flip p": fmt_p(va["sign_flip"].pvalue) if va else "",
                     ci_header(an): fmt_ci(*va["boot"].bca_interval) if va else "",
                     seed_ci_header(an): _seed_text(va["seed_bca"]) if va else "",
                     seed_ci_header(an, "percentile"): (
                         fmt_ci(*va["seed_bca"].percentile_interval)
                         if va and va["seed_bca"] else ("n/a (< 2 seeds)" if va else "")),
                     "paired Δ vs +PI [videos; seeds]": (
                         f"{delta_text(vp)} {fmt_ci(*vp['boot'].bca_interval)}; "
                         f"{_seed_text(vp['seed_bca'])}" if vp else "n/a")})
        ids.append({f"{fb}/probe": arm.runs()}
                   | ({"a": va["ref_runs"]} if va else {}) | ({"pi": vp["ref_runs"]} if vp else {}))
    if rows:
        notes.append(f"Frozen + linear probe rows: cell probe on the timm towers (backbone "
                     f"frozen, only the {'/'.join(str(FOUNDATION[f].embed_dim) for f in FOUNDATION)}"
                     f" -> {len(ev.names)} linear head trains), paired by seed with the {b} runs "
                     "of (a) and +PI on the same test frames; Δ = probe - reference.")
    return rows, disp, ids, notes
