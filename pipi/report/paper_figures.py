"""The paper's mechanism and example figures from runs:

* ``mechanism_localization`` (fig:mechanism-localization): mean Δ macro-AUC vs the RGB run
  per transplanted subset, error bars = sd over seeds, the headline +PI lift to reconstruct as
  a red dashed line; one panel per backbone;
* ``transplant_reconstruction``: bar chart of the reconstruction (mean Δ / headline lift) per
  subset, the transplant table's last column;
* ``prior_examples`` (fig:blood-kvasir): RGB, H_norm, P_blood and Phi of one test frame per
  focal class, and ``gradcam_examples`` (fig:gradcam): frame, P_blood, Grad-CAM of the RGB and
  +PI runs with the Dice of each, both from the newest Grad-CAM run of the headline backbone
  (its ``gradcam/prior.png`` and ``gradcam/overlay.png`` artifacts, read by the workflow).
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipi.analysis import Analysis
from pipi.report.tables import Table
from pipi.report.transplant import study_runs

__all__ = ["example_figures", "mechanism_figures"]

#: artifact path of each example figure in a Grad-CAM run.
EXAMPLES = {"prior_examples": "gradcam/prior.png", "gradcam_examples": "gradcam/overlay.png"}


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _panels(n: int, width: float = 5.2):
    fig = Figure(figsize=(width * n, 4.2))
    return fig, [fig.add_subplot(1, n, i + 1) for i in range(n)]


def mechanism_figures(table: Table) -> tuple[dict, dict, dict]:
    """(figures, captions, run ids) of the transplant table (module docstring)."""
    if not table.ok or table.data.empty:
        return {}, {}, {}
    data = table.data
    backbones = list(dict.fromkeys(data["backbone"]))
    figs, caps = {}, {}
    fig, axes = _panels(len(backbones))
    for ax, b in zip(axes, backbones, strict=True):
        d = data[data["backbone"] == b]
        x = np.arange(len(d))
        ax.bar(x, d["delta_mean"], yerr=d["delta_sd"].fillna(0.0), capsize=3,
               color="#4c72b0", edgecolor="black", linewidth=0.5)
        lift = d["headline_lift"].dropna()
        if len(lift):
            ax.axhline(float(lift.iloc[0]), color="red", linestyle="--",
                       label=f"headline +PI lift {float(lift.iloc[0]):+.3f}")
            ax.legend(fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(x, list(d["transplant"]))
        ax.set_xlabel("transplanted subset (+PI -> RGB run)")
        ax.set_ylabel("Δ test macro-AUC vs the RGB run")
        ax.set_title(b)
    figs["mechanism_localization"] = _png(fig)
    caps["mechanism_localization"] = (
        "Network localisation of the training-time effect: for each subset, the parameters of "
        "each +PI run are transplanted into the RGB run of the same seed and the test set is "
        "re-scored; bars: mean Δ macro-AUC vs the RGB run, error bars: sd over seeds; red "
        "dashed line: the headline +PI lift (pi - a) to reconstruct. From table transplant.")
    fig, axes = _panels(len(backbones))
    for ax, b in zip(axes, backbones, strict=True):
        d = data[data["backbone"] == b]
        share = 100 * d["reconstruction"].to_numpy(float)
        x = np.arange(len(d))
        ok = np.isfinite(share)
        ax.bar(x[ok], share[ok], color=["#55a868" if v > 0 else "#c44e52" for v in share[ok]],
               edgecolor="black", linewidth=0.5)
        for xi in x[~ok]:
            ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.axhline(100.0, color="red", linestyle="--", linewidth=0.8)
        ax.set_xticks(x, list(d["transplant"]))
        ax.set_ylabel("reconstruction of the headline lift (%)")
        ax.set_title(b)
    figs["transplant_reconstruction"] = _png(fig)
    caps["transplant_reconstruction"] = (
        "Transplant bar chart: reconstruction = mean Δ / headline lift (pi - a) over the same "
        "seeds, per transplanted subset (n/a where there is no lift to reconstruct); dashed "
        "line: 100 %. From table transplant.")
    runs: dict = {}
    for row in table.run_ids:
        for arm, seeds in row.items():
            runs.setdefault(arm, {}).update(seeds)
    return figs, caps, {k: runs for k in figs}


def example_figures(an: Analysis) -> tuple[dict, dict, dict]:
    """The prior and Grad-CAM example figures of the newest Grad-CAM run with both images
    (headline backbone first); empty without such a run."""
    images = an.evidence.images
    runs = study_runs(an, "gradcam", ("gradcam",))
    if runs.empty or not images:
        return {}, {}, {}
    runs = runs.assign(head=runs["backbone"] == an.headline)
    runs = runs.sort_values(["head", "start_time"], ascending=False)
    for r in runs.itertuples():
        got = images.get(r.run_id, {})
        if all(p in got for p in EXAMPLES.values()):
            break
    else:
        return {}, {}, {}
    figs = {name: bytes(got[path]) for name, path in EXAMPLES.items()}
    src = f"Grad-CAM run {r.run_id} ({r.backbone}, seed {r.seed}; artifact {{}})"
    caps = {
        "prior_examples": (
            "The analytic prior on test frames, one per focal class (rows): RGB frame, "
            "H_norm, P_blood and the radial fluence Phi, with the +PI run's prior parameters "
            "(paper fig:blood-kvasir). " + src.format(EXAMPLES["prior_examples"])),
        "gradcam_examples": (
            "Grad-CAM examples per focal class (rows): frame, P_blood, Grad-CAM of the RGB and "
            "the +PI run for the true class, with the Dice of each map's top quintile against "
            "P_blood's (paper fig:gradcam; per-class overlap in table gradcam). "
            + src.format(EXAMPLES["gradcam_examples"]))}
    ids = {"gradcam": {int(r.seed) if r.seed == r.seed else 0: r.run_id}}
    return figs, caps, {k: ids for k in figs}
