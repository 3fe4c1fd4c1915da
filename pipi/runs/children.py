"""Children of a mechanism study (robustness, transplant): one ``evaluate_run`` per (source
run, evaluation), a FINISHED child with the same key reused, and the table of what happened."""

from __future__ import annotations

from dataclasses import dataclass

from pipi import tracking
from pipi.data.progress import tqdm
from pipi.runs.evaluate import evaluate_run, find_evaluation
from pipi.runs.runsets import SourceRun

__all__ = ["StudyChild", "StudyResult", "children_table", "evaluate_children"]


@dataclass(frozen=True)
class StudyChild:
    """One child of a mechanism study: which run, which variant, its run and what happened."""

    source: SourceRun
    variant: str
    run_id: str
    status: str                # scored | reused
    test_macro_auc: float


@dataclass(frozen=True)
class StudyResult:
    parent_run_id: str
    children: tuple[StudyChild, ...]
    table: str


def evaluate_children(sources, evaluations, *, data, digest: str, parent_run_id: str,
                      entry_point: str, progress: bool) -> list[StudyChild]:
    """``evaluate_run`` per (source, evaluation), reusing a FINISHED child with the same key."""
    todo = [(s, ev) for s in sources for ev in evaluations(s)]
    out = []
    for src, ev in tqdm(todo, desc=entry_point, unit="child", disable=not progress):
        found = find_evaluation(src.run_id, ev, data_digest=digest, entry_point=entry_point)
        if found is not None:
            rid, status = found.run_id, "reused"
        else:
            rid = evaluate_run(src.run_id, ev, data=data, parent_run_id=parent_run_id,
                               entry_point=entry_point, progress=progress)
            status = "scored"
        auc = tracking.get_run(rid).metrics.get("test/macro_auc", float("nan"))
        out.append(StudyChild(src, ev.variant, rid, status, float(auc)))
    return out


def children_table(title: str, children) -> str:
    lines = [f"# {title}", "", "| source run | cell | backbone | seed | variant | test macro-AUC "
             "| child run | status |", "|---|---|---|---|---|---|---|---|"]
    for c in children:
        s = c.source
        lines.append(f"| {s.run_id} | {s.cell} | {s.backbone} | {s.seed} | {c.variant} | "
                     f"{c.test_macro_auc:.4f} | {c.run_id} | {c.status} |")
    n = {k: sum(c.status == k for c in children) for k in ("scored", "reused")}
    lines += ["", f"{len(children)} children: {n['scored']} scored, {n['reused']} reused"]
    return "\n".join(lines)
