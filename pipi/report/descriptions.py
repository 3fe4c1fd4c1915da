"""The Markdown the MLflow UI shows as descriptions: of a run, of a registered model (its model
card) and of a registered version (its evidence). Pure text from a configuration and numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pipi.cells import get_cell
from pipi.classes import CLASSES

__all__ = ["EVIDENCE_HEADING", "aggregate_description", "model_card", "run_description", "training_evidence",
           "version_description"]

#: First line of a version's training evidence; ``promote`` keeps the text from here on.
EVIDENCE_HEADING = "Training evidence:"


def _auc(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.4f}"


def _classes(classes: Sequence[int], class_names: Sequence[str] = CLASSES) -> str:
    names = [class_names[int(k)] for k in classes]
    return f"{len(names)} classes: " + ", ".join(names) if names else "no evaluable class"


def run_description(*, cell: str, backbone: str, seed: int, recipe: str, test_macro_auc: float,
                    test_classes: Sequence[int], data_digest: str = "",
                    base_run_id: str | None = None, base_run_url: str | None = None,
                    registered: str | None = None, class_names: Sequence[str] = CLASSES) -> str:
    """A training run's Description: the cell, the recipe, the headline metric and its class
    set, the base run of a sequence cell and the registered version."""
    c = get_cell(cell)
    streams = " + ".join(c.streams) or "RGB only"
    lines = [f"**Cell `{cell}`** on `{backbone}`, seed {seed}: {c.description} "
             f"(streams: {streams}).", "",
             f"**Test macro-AUC {_auc(test_macro_auc)}** over the {_classes(test_classes, class_names)}.", ""]
    if c.is_sequence:
        base = f"[{base_run_id}]({base_run_url})" if base_run_url else f"`{base_run_id}`"
        lines += [f"Sequence cell on the per-frame `{c.base_cell}` backbone of base run {base}.",
                  ""]
    if data_digest:
        lines += [f"Data digest `{data_digest[:16]}`.", ""]
    lines += ["Reproduce:", "", "```", recipe, "```"]
    if registered:
        lines += ["", f"Registered as `{registered}`."]
    lines += ["", "Figures: Artifacts > `figures/`; predictions: `predictions/` (docs/mlflow-ui.md)."]
    return "\n".join(lines)


def _outputs(class_names: Sequence[str] | None) -> str:
    if class_names is None or tuple(class_names) == CLASSES:
        return "a probability per Kvasir-Capsule class"
    return (f"a probability per class of the data it was trained on ({len(class_names)}: "
            + ", ".join(class_names) + ")")


def model_card(*, cell: str, backbone: str, name: str | None = None,
               alias: str = "candidate", class_names: Sequence[str] | None = None) -> str:
    """The registered model's description: what the family is, what it accepts, what it
    outputs (``class_names``: the classes of the version at ``alias``; Kvasir-Capsule's 14 by
    default), how to serve it (as ``name``, default ``pipi-<backbone>-<cell>``, at
    ``alias``: ``candidate`` after train, ``champion`` once promoted, so that the command
    names an alias that exists), and the strip-and-serve switch where it applies."""
    c = get_cell(cell)
    name = name or f"pipi-{backbone}-{cell}"
    lines = [f"pipi cell **`{cell}`** ({c.description}) on the **{backbone}** backbone, one "
             "version per trained run (seed, data, code); the version's description holds "
             "its evidence, aliases `candidate` (newest) and `champion` (promoted by "
             "`mlflow run . -e promote`).", "", "## Inputs", ""]
    if c.is_sequence:
        lines += ["Clips of consecutive RGB frames of one video (`T x H x W x 3` uint8, "
                  "1 <= T <= 16), one per row of the `pixels` column (clips of different "
                  "lengths may share a request), or the base64 JPEG/PNG frames of one clip "
                  "under an `image` column, a row per frame. "
                  f"Output: one row per frame with {_outputs(class_names)} and "
                  "`predicted_class`.", ""]
    else:
        lines += ["RGB frames: a `B x H x W x 3` uint8 batch, one `H x W x 3` image, images of "
                  "different sizes as a list, floats in [0, 1], or base64 JPEG/PNG strings "
                  "under an `image` column. Each is resized to the training size; "
                  + ("the analytic prior (P_blood, Phi) is computed inside the model. "
                     if c.input_channels == 5 else "")
                  + f"Output: {_outputs(class_names)} and `predicted_class`.", ""]
    lines += ["## Serve", "", "```", f"pipi serve -m models:/{name}@{alias} --port 5001",
              "```", "", "behind pipi's request limits (`--max-request-mb`, default 64). "
              "MLflow's own server, without them:", "", "```",
              f"mlflow models serve -m models:/{name}@{alias} --env-manager local -p 5001",
              "```", ""]
    if c.input_channels == 5:
        lines += ["**Strip-and-serve**: send `params={\"strip_prior\": true}` (with "
                  "`dataframe_records`) to feed zeros for the prior channels, the paper's "
                  "strip-and-serve recipe.", ""]
    if c.distill:
        lines += ["The auxiliary P_blood head is dropped at deploy; `params={\"heatmap\": "
                  "true}` adds its P_blood estimate as `p_blood_heatmap`.", ""]
    lines += ["Requests are checked: a wrong shape, dtype or image size is refused with HTTP "
              "400 and a one-line reason."]
    return "\n".join(lines)


def version_description(*, run_id: str, test_macro_auc: float, test_classes: Sequence[int],
                        data_digest: str, recipe: str, seed: int,
                        gate: Mapping[str, str] | None = None,
                        class_names: Sequence[str] = CLASSES) -> str:
    """A registered version's evidence: its run, test macro-AUC, data digest, the recipe;
    after ``promote``, the gate's numbers (``gate``: name -> value as text)."""
    lines = [f"{EVIDENCE_HEADING} run `{run_id}` (seed {seed}), **test macro-AUC {_auc(test_macro_auc)}** over "
             f"the {_classes(test_classes, class_names)}.", "",
             f"Data digest `{data_digest}`.", "", "```", recipe, "```"]
    if gate:
        lines += ["", "## Promotion gate", ""] + [f"- {k}: {v}" for k, v in gate.items()]
    return "\n".join(lines)


def training_evidence(description: str | None) -> str:
    """The training-evidence part of a version description ("" when it has none)."""
    text = description or ""
    at = text.find(EVIDENCE_HEADING)
    return text[at:] if at >= 0 else ""


def aggregate_description(report, *, n_runs: int, dashboard_url: str) -> str:
    """The aggregate run's Description: where the dashboard is, the tables, the summary."""
    tables = ", ".join(f"`{t.key}`" for t in report.tables)
    return "\n".join([
        f"**pipi aggregate** of {n_runs} runs: [open the dashboard]({dashboard_url}) "
        "(Artifacts > `dashboard.html`; `report.md` has every table and figure).", "",
        f"Tables (`tables/*.md`, `.csv`, `.json`): {tables}.", "",
        "```", report.summary, "```"])
