"""`pipi predict`'s library part (pipi.serving.batch, pipi.report.timeline) without a server:
the frames a folder or a staged split gives, the parts of a broken run, the merged file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from pipi.errors import ConfigError, DataError
from pipi.report.timeline import findings_timeline, top_frames
from pipi.serving import batch
from pipi.serving.batch import folder_frames, score_frames, staged_frames

pytestmark = pytest.mark.timeout(120)


def _jpeg(path, seed: int, size: int = 40) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rgb = (np.random.default_rng(seed).random((size, size, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(path, quality=95)


class _Mean(torch.nn.Module):
    """A stand-in model whose answers depend on the frame: two classes from its mean red."""

    image_size, class_names = 32, ("low", "high")

    def __init__(self, fail_after: int | None = None):
        super().__init__()
        self.calls, self.fail_after = 0, fail_after

    def forward(self, x01):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("broken")
        r = x01[:, 0].mean((1, 2))
        return torch.stack([1 - r, r], 1)


def test_a_folder_gives_one_video_per_subfolder_in_natural_order(tmp_path):
    for name in ("f10.jpg", "f2.jpg", "f1.JPG"):
        _jpeg(tmp_path / "exam" / "v1" / name, 1)
    _jpeg(tmp_path / "exam" / "v2" / "a.png", 2)
    (tmp_path / "exam" / "notes.txt").write_text("not a frame")
    fl = folder_frames(tmp_path / "exam")
    assert fl.frames["path"].tolist() == ["v1/f1.JPG", "v1/f2.jpg", "v1/f10.jpg", "v2/a.png"]
    assert fl.frames["video_id"].tolist() == ["v1", "v1", "v1", "v2"]
    assert fl.frames["frame_number"].tolist() == [0, 1, 2, 0] and not fl.labelled
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no JPEG or PNG"):
        folder_frames(tmp_path / "empty")
    with pytest.raises(ConfigError, match="not a folder"):
        folder_frames(tmp_path / "nowhere")


def test_a_staged_split_keeps_its_labels_and_refuses_an_unknown_split(tmp_path):
    frames = pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg"], "video_id": ["v", "v", "w"],
                           "frame_number": [0, 1, 0], "class_index": [1, 0, 1],
                           "class": ["x", "y", "x"], "split": ["test", "val", "test"]})
    fl = staged_frames(tmp_path, frames, "test")
    assert fl.frames["path"].tolist() == ["a.jpg", "c.jpg"] and fl.labelled
    assert len(staged_frames(tmp_path, frames, "all")) == 3
    with pytest.raises(ConfigError, match="split='train'"):
        staged_frames(tmp_path, frames, "train")


def test_a_broken_run_resumes_from_its_parts_to_the_same_file(tmp_path, monkeypatch):
    monkeypatch.setattr(batch, "CHUNK", 4)
    for v in range(2):
        for i in range(5):
            _jpeg(tmp_path / "exam" / f"v{v}" / f"{i}.jpg", 10 * v + i)
    fl = folder_frames(tmp_path / "exam")
    whole = score_frames(_Mean(), fl, tmp_path / "whole.parquet", model_key="m", batch_size=2)
    want = pd.read_parquet(whole.out)
    assert len(want) == 10 and want["prob_01"].std() > 1e-3      # frames told apart
    assert (want["predicted_class"] == np.where(want["prob_01"] > want["prob_00"], "high",
                                                "low")).all()
    out = tmp_path / "broken.parquet"
    with pytest.raises(RuntimeError, match="broken"):   # after 2 batches: one part of 4 frames
        score_frames(_Mean(fail_after=2), fl, out, model_key="m", batch_size=2)
    parts = sorted(p.name for p in (tmp_path / "broken.parquet.parts").glob("part-*"))
    assert parts == ["part-00000.parquet"] and not out.exists()
    with pytest.raises(ConfigError, match="another request"):   # another model's parts
        score_frames(_Mean(), fl, out, model_key="other", batch_size=2)
    again = score_frames(_Mean(), fl, out, model_key="m", batch_size=2)
    assert again.resumed_frames == 4 and again.n_frames == 10
    pd.testing.assert_frame_equal(pd.read_parquet(out), want)
    assert not (tmp_path / "broken.parquet.parts").exists()
    schema = (tmp_path / "broken.schema.json").read_text()
    assert '"low"' in schema and "predicted_class" in schema


def test_the_timeline_and_the_surest_frames(tmp_path):
    df = pd.DataFrame({"path": [f"{i}.jpg" for i in range(6)], "video_id": ["v"] * 6,
                       "frame_number": range(6), "prob_00": [0.9, 0.2, 0.8, 0.1, 0.6, 0.3]})
    df["prob_01"] = 1 - df["prob_00"]
    top = top_frames(df, ("low", "high"), k=2)
    low = top[top["class"] == "low"]
    assert low["frame_number"].tolist() == [0, 2] and low["rank"].tolist() == [1, 2]
    assert top[top["class"] == "high"]["probability"].tolist() == pytest.approx([0.9, 0.8])
    png = findings_timeline(df, ("low", "high"), video="v")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000


class _Conv(torch.nn.Module):
    """A small convolutional stand-in: autocast and the memory format reach its convolution."""

    image_size, class_names = 32, ("a", "b", "c")

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 3, 5, padding=2)

    def forward(self, x01):
        return torch.softmax(self.conv(x01 * 4 - 2).mean((2, 3)) * 8, 1)


def test_bf16_and_channels_last_score_the_frames_close_to_fp32(tmp_path):
    """`predict -P precision=bf16` runs the forward pass under autocast (a GPU's auto), and
    channels_last in NHWC: the same frames, bf16's rounding (to about 1e-2), the same fp32
    answers in either memory format."""
    for i in range(6):
        _jpeg(tmp_path / "exam" / f"f{i}.jpg", seed=40 + i)
    fl = folder_frames(tmp_path / "exam")
    cols = ["prob_00", "prob_01", "prob_02"]
    fp32 = pd.read_parquet(score_frames(_Conv(), fl, tmp_path / "a.parquet", model_key="m",
                                        batch_size=4).out)[cols].to_numpy()
    nhwc = pd.read_parquet(score_frames(_Conv(), fl, tmp_path / "b.parquet", model_key="m",
                                        batch_size=4, channels_last=True).out)[cols].to_numpy()
    bf16 = pd.read_parquet(score_frames(_Conv(), fl, tmp_path / "c.parquet", model_key="m",
                                        batch_size=4, amp_dtype=torch.bfloat16).out
                           )[cols].to_numpy()
    assert fp32.std(0).max() > 1e-2                      # the answers depend on the frame
    np.testing.assert_allclose(nhwc, fp32, atol=1e-6)
    np.testing.assert_allclose(bf16, fp32, atol=3e-2)
    assert np.abs(bf16 - fp32).max() > 1e-5              # the convolution ran in bf16


def test_a_one_hot_label_table_labels_single_class_frames_and_counts_the_rest(tmp_path):
    """`predict --labels` on a one-hot table (the form Galar's and many releases' sheets take:
    one 0/1 column per class, a frame_number column): a frame with one class gets the model's
    index of it, one with two classes or a class the model lacks is kept unlabelled and
    counted."""
    for i in range(4):
        _jpeg(tmp_path / "rel" / "frames" / f"{i}.jpg", seed=60 + i)
    (tmp_path / "rel" / "labels.csv").write_text(
        "filename,frame_number,video_id,HIGH,Low,Polyp\n"
        "frames/0.jpg,10,A,1,0,0\n"
        "frames/1.jpg,11,A,0,1,0\n"
        "frames/2.jpg,12,A,1,1,0\n"
        "frames/3.jpg,13,B,0,0,1\n")
    fl, met = batch.table_frames(tmp_path / "rel" / "labels.csv", ("low", "high"))
    assert fl.labelled and fl.root == (tmp_path / "rel" / "frames").resolve()
    assert fl.frames["path"].tolist() == ["0.jpg", "1.jpg", "2.jpg", "3.jpg"]
    assert fl.frames["class_index"].tolist() == [1, 0, -1, -1]
    assert fl.frames["class"].tolist() == ["high", "low", "", ""]
    assert fl.frames["frame_number"].tolist() == [10, 11, 12, 13]
    assert fl.frames["video_id"].tolist() == ["A", "A", "A", "B"]
    assert (met.n_multi, met.n_unknown, met.unknown) == (1, 1, ("Polyp",))
    with pytest.raises(DataError, match="none of its classes is one of the model's"):
        batch.table_frames(tmp_path / "rel" / "labels.csv", ("cat", "dog"))


def test_compile_scores_through_torch_compile_with_the_eager_answers(tmp_path, monkeypatch):
    """`predict --compile true` (a GPU's auto): the forward pass goes through
    ``torch.compile(module)``, traced here by Dynamo with its eager backend (inductor's C++
    build is a GPU's business), and gives the eager answers, the short last batch included."""
    for i in range(6):
        _jpeg(tmp_path / "exam" / f"f{i}.jpg", seed=60 + i)
    fl = folder_frames(tmp_path / "exam")
    cols = ["prob_00", "prob_01", "prob_02"]
    compiled, real = [], torch.compile

    def spy(module, **kw):
        compiled.append(module)
        return real(module, backend="eager", **kw)

    monkeypatch.setattr(torch, "compile", spy)
    model = _Conv()
    eager = pd.read_parquet(score_frames(model, fl, tmp_path / "a.parquet", model_key="m",
                                         batch_size=4).out)[cols].to_numpy()
    assert compiled == []
    torch._dynamo.reset()
    got = pd.read_parquet(score_frames(model, fl, tmp_path / "b.parquet", model_key="m",
                                       batch_size=4, compile=True).out)[cols].to_numpy()
    assert compiled == [model]
    assert eager.std(0).max() > 1e-2                      # the answers depend on the frame
    np.testing.assert_allclose(got, eager, atol=1e-6)


def test_replicas_write_the_file_one_process_writes_and_resume_its_parts(tmp_path, monkeypatch):
    """`predict --replicas 2` (a CPU's auto on 2-4 cores): two forked processes score the
    batches, in whatever order they finish; the file is the one process's, row for row, and a
    run broken before the end continues from its parts with replicas."""
    monkeypatch.setattr(batch, "CHUNK", 4)          # inherited by the forked replicas
    for v in range(2):
        for i in range(5):
            _jpeg(tmp_path / "exam" / f"v{v}" / f"{i}.jpg", 20 * v + i)
    fl = folder_frames(tmp_path / "exam")
    one = pd.read_parquet(score_frames(_Conv(), fl, tmp_path / "one.parquet", model_key="m",
                                       batch_size=3).out)
    two = score_frames(_Conv(), fl, tmp_path / "two.parquet", model_key="m", batch_size=3,
                       replicas=2, channels_last=True)
    got = pd.read_parquet(two.out)
    assert one[["prob_00", "prob_01", "prob_02"]].std().max() > 1e-2   # frames told apart
    pd.testing.assert_frame_equal(got, one, atol=1e-6)
    assert not (tmp_path / "two.parquet.parts").exists()
    out = tmp_path / "broken.parquet"
    with pytest.raises(RuntimeError, match="broken"):
        score_frames(_Mean(fail_after=2), fl, out, model_key="m", batch_size=2)
    again = score_frames(_Mean(), fl, out, model_key="m", batch_size=2, replicas=2)
    assert again.resumed_frames == 4
    pd.testing.assert_frame_equal(
        pd.read_parquet(out),
        pd.read_parquet(score_frames(_Mean(), fl, tmp_path / "m.parquet", model_key="m",
                                     batch_size=2).out))


def test_a_bad_frame_in_a_replica_is_one_error_naming_it_and_no_file(tmp_path):
    for i in range(4):
        _jpeg(tmp_path / "exam" / f"{i}.jpg", seed=i)
    (tmp_path / "exam" / "3.jpg").write_bytes(b"not a jpeg at all")
    fl = folder_frames(tmp_path / "exam")
    out = tmp_path / "out.parquet"
    with pytest.raises(DataError, match=r"3\.jpg: not a JPEG or PNG"):
        score_frames(_Mean(), fl, out, model_key="m", batch_size=1, replicas=2)
    assert not out.exists()
    with pytest.raises(ConfigError, match="replicas score on a CPU"):
        score_frames(_Mean(), fl, out, model_key="m", replicas=2, device=torch.device("meta"))
