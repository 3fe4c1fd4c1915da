"""scripts/smoke_records.py's comparison: what it reports and what it leaves out."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("smoke_records",
                                                  ROOT / "scripts" / "smoke_records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _doc(**change) -> dict:
    run = {"params": {"lr": "0.001"}, "metrics": {"val/macro_auc": [[0, 0.5], [1, 0.75]]},
           "tags": {"pipi.base_code_version": "<sha>", "mlflow.pipi.heartbeat": "vm:1 17"},
           "artifacts": ["history.json"]}
    run.update(change)
    return {"pi-41": run, "registered versions": [{"name": "pipi-resnet18-pi", "tags": {}}]}


def test_a_changed_value_is_reported_and_the_volatile_ones_are_not(tmp_path):
    mod = _script()
    same = _doc(tags={"pipi.base_code_version": "<sha>-dirty", "mlflow.pipi.heartbeat": "x"})
    assert mod.differences(_doc(), same) == []
    moved = _doc(metrics={"val/macro_auc": [[0, 0.5], [1, 0.8]]}, artifacts=[])
    assert mod.differences(_doc(), moved) == [
        "/pi-41/artifacts: [\"history.json\"] != []",
        "/pi-41/metrics/val/macro_auc: [[0, 0.5], [1, 0.75]] != [[0, 0.5], [1, 0.8]]"]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(_doc()))
    second.write_text(json.dumps({**_doc(), "pi-42": {}}))
    assert mod.main(["diff", str(first), str(second)]) == 1
    assert mod.main(["diff", str(first), str(first)]) == 0
