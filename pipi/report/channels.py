"""Channel ablations: prior channels removed in training (single-channel arms) and zeroed at
inference (``pi@zero_*`` variants), each against the full +PI cell; one table per backbone
that has the runs (the headline backbone's keyed ``channel_train`` / ``channel_infer``, the
others ``channel_train_<backbone>``, as the paper's ConvNeXt-Tiny replication).

The training-time table's BH family is by default the paper's five paired tests (the three
against +PI and the two single-channel arms against RGB; ``channel_family="vs_pi"`` keeps only
the three), listed in a note under the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from pipi.analysis import (
    CHANNEL_INFER_ARMS,
    CHANNEL_TRAIN_ARMS,
    CHANNEL_TRAIN_VS_RGB,
    Analysis,
    cell_label,
    compare_pairs,
    missing_notes,
)
from pipi.report.rows import (
    arm_summary,
    base_run_notes,
    ci_cols,
    delta_cis,
    no_runs,
    run_map,
    seed_ci_note,
)
from pipi.report.tables import Table, fmt_delta, fmt_mean_sd, fmt_p

__all__ = ["channel_infer_table", "channel_tables", "channel_train_table", "family_note"]


def _channel_table(an: Analysis, *, key: str, title: str, paper: str, reference: str,
                   arms: Sequence[str], extra: Sequence[tuple[str, str]] = (),
                   backbone: str | None = None) -> Table:
    ev, b = an.evidence, backbone or an.headline
    notes = missing_notes(ev, b, [reference, *arms])
    pairs = [(reference, a) for a in arms if ev.arm(b, a)] + \
            [(r, n) for r, n in extra if ev.arm(b, r) and ev.arm(b, n)]
    comps = compare_pairs(an, pairs, family=key, backbone=b, notes=notes) \
        if ev.arm(b, reference) else []
    by = {(c.reference, c.new): c for c in comps}
    rows, disp, ids = [], [], []
    for r, n in [(None, reference), *[(reference, a) for a in arms], *extra]:
        arm = ev.arm(b, n)
        c = by.get((r, n)) if r else None
        ok = c is not None and c.available
        s = arm_summary(arm)
        label = cell_label(n) if r in (None, reference) else f"{cell_label(n)} vs {cell_label(r)}"
        rows.append({"reference": r or "", "arm": n, **s,
                     "delta": c.mean_delta if ok else float("nan"),
                     "n_positive": c.n_positive if ok else None,
                     "n_paired": len(c.seeds) if ok else 0,
                     "wilcoxon_p": c.wilcoxon_p if ok else float("nan"),
                     "wilcoxon_p_bh": c.adjusted.get("wilcoxon_bh", float("nan"))
                     if ok else float("nan"),
                     "sign_flip_p": c.sign_flip_p if ok else float("nan"),
                     **ci_cols(c if ok else None)})
        disp.append({"arm": label, "seeds": s["seeds"] or "no runs",
                     "macro-AUC": fmt_mean_sd(s["mean"], s["sd"]) if arm else "no runs",
                     "Δ vs reference (k/n +)": (f"{fmt_delta(c.mean_delta, 4)} ({c.sign_text})"
                                                if ok else ("—" if r is None else "n/a")),
                     "Wilcoxon p (BH)": (f"{fmt_p(c.wilcoxon_p)} "
                                         f"({fmt_p(c.adjusted.get('wilcoxon_bh'))})" if ok else ""),
                     "sign-flip p": fmt_p(c.sign_flip_p) if ok else "",
                     **delta_cis(an, c if ok else None, digits=4)})
        ids.append({n: run_map(arm)} | ({r: dict(c.ref_runs)} if ok else {}))
    notes.append(f"Δ = arm - reference, paired by seed; the reference is ({reference}) unless "
                 "the row names another ('X vs Y': X - Y). BH over the comparisons of this table.")
    notes.append(family_note(comps))
    notes.append(seed_ci_note(an, comps))
    return Table(key, title, pd.DataFrame(rows), pd.DataFrame(disp), tuple(ids), tuple(notes),
                 paper=paper)


def family_note(comps) -> str:
    """The BH family of a channel table, printed under it: each paired test with its raw and
    BH-adjusted Wilcoxon p."""
    tested = [c for c in comps if c.available]
    if not tested:
        return "BH family: no comparison could be tested."
    parts = [f"{cell_label(c.new)} - {cell_label(c.reference)}: Wilcoxon p "
             f"{fmt_p(c.wilcoxon_p)} -> BH {fmt_p(c.adjusted.get('wilcoxon_bh'))}"
             for c in tested]
    return (f"BH family ({len(tested)} paired tests, Benjamini-Hochberg over these alone): "
            + "; ".join(parts) + ".")


def _key(base: str, an: Analysis, b: str) -> str:
    return base if b == an.headline else f"{base}_{b}"


def channel_train_table(an: Analysis, backbone: str | None = None) -> Table:
    """Paper Table channel-ablation-train: single-prior-channel arms vs full +PI."""
    ev, b = an.evidence, backbone or an.headline
    title = f"Training-time channel ablation ({b})"
    key = _key("channel_train", an, b)
    if not any(ev.arm(b, c) for c in CHANNEL_TRAIN_ARMS[1:]):
        return no_runs(key, title, "tab:channel-ablation-train",
                        "no pblood_only / phi_only runs; run `mlflow run . -e ablate -P "
                        "study=channel_train`")
    extra = CHANNEL_TRAIN_VS_RGB if an.options.channel_family == "paper" else ()
    return _channel_table(an, key=key, title=title,
                          paper="tab:channel-ablation-train", reference="pi",
                          arms=CHANNEL_TRAIN_ARMS, extra=extra, backbone=b)


def channel_infer_table(an: Analysis, backbone: str | None = None) -> Table:
    """Paper Table channel-ablation-infer: prior channels zeroed at inference vs +PI."""
    ev, b = an.evidence, backbone or an.headline
    title = f"Inference-time channel ablation ({b})"
    key = _key("channel_infer", an, b)
    if not any(ev.arm(b, c) for c in CHANNEL_INFER_ARMS):
        return no_runs(key, title, "tab:channel-ablation-infer",
                        "no pi@zero_* runs; run `mlflow run . -e ablate -P study=channel_infer`")
    t = _channel_table(an, key=key, title=title,
                       paper="tab:channel-ablation-infer", reference="pi",
                       arms=CHANNEL_INFER_ARMS, extra=[("a", "pi@zero_both")], backbone=b)
    return replace(t, notes=t.notes + tuple(base_run_notes(ev, b, "pi", CHANNEL_INFER_ARMS)))


def channel_tables(an: Analysis) -> list[Table]:
    """Both channel-ablation tables of the headline backbone (a "no runs" table when it has
    none), then those of every other backbone that has the runs."""
    ev = an.evidence
    out = [channel_train_table(an), channel_infer_table(an)]
    for b in ev.backbones():
        if b == an.headline:
            continue
        if any(ev.arm(b, c) for c in CHANNEL_TRAIN_ARMS[1:]):
            out.append(channel_train_table(an, b))
        if any(ev.arm(b, c) for c in CHANNEL_INFER_ARMS):
            out.append(channel_infer_table(an, b))
    return out
