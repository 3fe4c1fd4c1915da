"""Checkpoints hold tensors and plain data only; resume never unpickles code (issue 31)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from fakes import experiment
import torch
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.classes import CLASSES
from pipi.config import make_config
from pipi.errors import PipiError
from pipi.tracking.tags import TAG_HEARTBEAT

PIPI = Path(__file__).resolve().parents[3] / "pipi"


def test_every_torch_load_in_pipi_is_weights_only():
    bad = []
    for path in PIPI.rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(", text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            call = text[m.start():i]
            if not re.search(r"weights_only\s*=\s*True", call):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(PIPI.parent)}:{line}: {' '.join(call.split())}")
    assert not bad, "torch.load without weights_only=True:\n" + "\n".join(bad)


class _Tracker:
    def __init__(self):
        self.saved = []

    def log_metrics(self, metrics, *, step=None, model=None):
        pass

    def log_checkpoint(self, state):
        buf = io.BytesIO()
        torch.save(state, buf)
        self.saved.append(buf.getvalue())


def test_the_training_checkpoint_loads_with_weights_only():
    from pipi.training.frames import fit_epochs

    val = pd.DataFrame({"path": [f"v/{i}.jpg" for i in range(4)], "video_id": ["v"] * 4,
                        "frame_number": range(4), "class_index": [0, 0, 1, 1],
                        "class": [CLASSES[0]] * 2 + [CLASSES[1]] * 2})
    probs = np.random.default_rng(0).random((4, len(CLASSES)))
    cfg = make_config(cell="a", profile="smoke", weights="none", epochs=2, patience=5)
    model = torch.nn.Linear(3, 2)

    def epoch(_, opt):
        opt.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        return np.float64(0.5)  # a numpy number in the history is made a plain float

    tracker = _Tracker()
    fit_epochs(model, cfg=cfg, gen=torch.Generator().manual_seed(0), train_epoch=epoch,
               predict_val=lambda: probs, val_frames=val, classes=[0, 1], tracker=tracker,
               extra_state={"norm": np.zeros(3, np.float32)})
    state = torch.load(io.BytesIO(tracker.saved[-1]), weights_only=True)
    assert state["epoch"] == 1 and state["config"]["cell"] == "a"
    assert isinstance(state["torch_rng"], torch.Tensor)
    assert isinstance(state["history"][0]["loss"], float)


class Payload:
    """What an attacker plants: unpickling it writes a file."""

    target = ""

    def __reduce__(self):
        return (Path.write_text, (Path(self.target), "pwned"))


def _failed_run_with_checkpoint(tmp_path: Path, obj) -> str:
    exp = experiment("resume-safety")
    with mlflow.start_run(experiment_id=exp) as run:
        ck = tmp_path / "ck" / "last.pt"
        ck.parent.mkdir()
        if isinstance(obj, bytes):
            ck.write_bytes(obj)
        else:
            torch.save(obj, ck)
        mlflow.log_artifact(str(ck), "checkpoints")
    MlflowClient().set_terminated(run.info.run_id, "FAILED")
    return run.info.run_id


@pytest.fixture()
def fast_claim(monkeypatch):
    monkeypatch.setenv("PIPI_HEARTBEAT_S", "0.5")


def test_resume_refuses_a_pickle_payload_in_one_line_without_running_it(
        sqlite_tracking, tmp_path, fast_claim):
    from pipi.runs.training import load_resume

    marker = tmp_path / "pwned.txt"
    Payload.target = str(marker)
    cfg = make_config(cell="a", profile="smoke", weights="none")
    rid = _failed_run_with_checkpoint(tmp_path, {"config": cfg.to_dict(), "evil": Payload()})
    with pytest.raises(PipiError) as exc:
        load_resume(tracking.get_run(rid))
    msg = str(exc.value)
    assert "\n" not in msg and "checkpoints/last.pt" in msg and rid in msg, msg
    assert "refused without loading" in msg, msg
    assert not marker.exists()  # the payload never ran
    # the failed resumer leaves no heartbeat: the run does not look trained by it
    assert TAG_HEARTBEAT not in MlflowClient().get_run(rid).data.tags


def test_a_truncated_checkpoint_is_named_in_one_whole_sentence(sqlite_tracking, tmp_path,
                                                                fast_claim):
    from pipi.runs.training import load_resume

    buf = io.BytesIO()
    torch.save({"a": torch.zeros(1000)}, buf)
    rid = _failed_run_with_checkpoint(tmp_path, buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(PipiError) as exc:
        load_resume(tracking.get_run(rid))
    msg = str(exc.value)
    assert "\n" not in msg and "truncated or corrupt" in msg, msg
    # torch's reason is quoted up to the end of its sentence, never cut inside one
    assert "failed finding central directory." in msg, msg
    assert TAG_HEARTBEAT not in MlflowClient().get_run(rid).data.tags
