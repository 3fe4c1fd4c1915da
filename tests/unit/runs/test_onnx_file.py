"""``train -P onnx=true``'s last step on an in-memory run (issue 40 item 4; the export itself
is tested in tests/unit/serving/test_onnx_export.py, the whole step in
tests/integration/test_predict.py)."""

from __future__ import annotations

import logging

import pytest

from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.runs import onnx_file
from pipi.serving.onnx_export import OnnxExport
from pipi.tracking import scoring
from pipi.tracking.handle import MemoryRun
from pipi.tracking.tags import TAG_ONNX


def test_an_export_that_fails_keeps_the_run_and_says_how_to_export_later(monkeypatch, tmp_path,
                                                                         caplog):
    monkeypatch.setattr(scoring, "load_module", lambda uri: object())

    def boom(*a, **k):
        raise RuntimeError("torch.export could not trace\nsecond line")
    monkeypatch.setattr(onnx_file, "export_onnx", boom)
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    with MemoryRun() as run, caplog.at_level(logging.WARNING):
        kept = onnx_file.keep_onnx(run, cfg, model_uri="models:/m-1", work=tmp_path,
                                   registered=("pipi-resnet18-pi", "3"))
        assert kept is None
        assert run.tags[TAG_ONNX] == "failed: RuntimeError: torch.export could not trace"
        assert run.artifacts() == [] and not run.history
    assert ("pipi onnx -m models:/pipi-resnet18-pi/3 --out FILE.onnx --register"
            in caplog.text)


def test_an_unregistered_model_s_graph_is_an_artifact_of_its_run(monkeypatch, tmp_path):
    monkeypatch.setattr(scoring, "load_module", lambda uri: ("module of", uri))
    seen = {}

    def export(module, out, *, metadata):
        seen.update(module=module, metadata=metadata)
        out.parent.mkdir(parents=True)
        out.write_bytes(b"graph")
        return OnnxExport(out, 32, ("a", "b"), 2e-7)
    monkeypatch.setattr(onnx_file, "export_onnx", export)
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    with MemoryRun() as run:
        kept = onnx_file.keep_onnx(run, cfg, model_uri="models:/m-1", work=tmp_path)
        assert kept == f"runs:/{run.run_id}/onnx/model.onnx" == run.tags[TAG_ONNX]
        assert run.artifacts() == ["onnx/model.onnx"]
        assert (run.artifact_dir / "onnx/model.onnx").read_bytes() == b"graph"
        assert run.history == {"onnx/max_abs_diff": [(0, 2e-7)]}
    assert seen["module"] == ("module of", "models:/m-1")
    assert seen["metadata"]["source_run"] == run.run_id


def test_a_sequence_cell_is_refused_before_anything_starts():
    onnx_file.check_onnx("pi")
    with pytest.raises(ConfigError, match="cell b_plus is a sequence cell"):
        onnx_file.check_onnx("b_plus")
