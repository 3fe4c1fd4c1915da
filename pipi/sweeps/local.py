"""The local executor: children one after the other in this process, reused when done."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pipi.sweeps.plan import Child, ChildResult, find_or_run

log = logging.getLogger(__name__)


def run_local(children: Sequence[Child], *, train_child: Callable[[Child], str],
              retries: int = 1) -> list[ChildResult]:
    """Train each child not yet FINISHED (same config hash) with ``train_child`` -> run id."""
    results = []
    for child in children:
        results.append(find_or_run(child, lambda c=child: train_child(c), entry_point="train",
                                   retries=retries))
    return results
