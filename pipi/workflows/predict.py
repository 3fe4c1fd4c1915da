"""The MLproject ``predict`` entry point: a registered per-frame model scores a whole exam (a
folder of frames) or a staged split, streamed (:mod:`pipi.serving.batch`), into one parquet
file in the run contract's predictions format, inside an MLflow run that names the model
version it used and logs the throughput and, where the frames carry labels, the metrics a
training run's test split gets; per video, a findings timeline and the surest frames per
class (:mod:`pipi.report.timeline`)."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipi import tracking
from pipi.data.progress import tqdm
from pipi.errors import ConfigError
from pipi.options.runtime import SWITCHES
from pipi.report.timeline import findings_timeline, top_frames
from pipi.runs.data import data_short_name, load_data
from pipi.runtime import keep_freed_memory, resolve_runtime
from pipi.serving.batch import (
    ScoreResult,
    TableLabels,
    folder_frames,
    score_frames,
    staged_frames,
    table_frames,
)
from pipi.serving.replicas import resolve_replicas
from pipi.training.frames import final_metrics

__all__ = ["MAX_TIMELINES", "ModelRef", "PredictResult", "model_ref", "run_predict"]

log = logging.getLogger(__name__)

#: Videos that get a timeline figure (the first ones in order); the top-frames table has all.
MAX_TIMELINES = 24


@dataclass(frozen=True)
class ModelRef:
    """What a model URI names: a registered version (``name``, ``version``) where it is one,
    and the run that logged the model."""

    uri: str
    name: str = ""
    version: str = ""
    run_id: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}" if self.name else self.uri


@dataclass(frozen=True)
class PredictResult:
    run_id: str
    out: Path
    model: ModelRef
    score: ScoreResult
    metrics: dict


def model_ref(uri: str) -> ModelRef:
    """The registered version behind ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` (read
    once: an alias that moves later does not change what this run used); other URIs as given."""
    mv = tracking.registry.model_uri_version(uri)
    if mv is not None:
        return ModelRef(uri, mv.name, str(mv.version), mv.run_id or "")
    if uri.startswith("runs:/"):
        return ModelRef(uri, run_id=uri.removeprefix("runs:/").split("/", 1)[0])
    return ModelRef(uri)


def _frames(images: str | None, data: str | None, split: str, labels: str | None,
            class_names: tuple[str, ...]):
    """(frames, the staged manifest or None, what they are in the run's name, how a label
    table's classes met the model's or None)."""
    if labels:
        flist, met = table_frames(Path(labels), class_names,
                                  root=Path(images) if images else None)
        return flist, None, Path(labels).name, met
    if images:
        flist = folder_frames(Path(images))
        return flist, None, flist.root.name, None
    staged = load_data(data)
    return (staged_frames(staged.root, staged.frames, split), staged.manifest,
            f"{data_short_name(staged.root)} {split}", None)


def run_predict(*, model: str, out: str, images: str | None = None, data: str | None = None,
                labels: str | None = None, split: str = "test", batch_size: int = 64,
                workers: int = 2, replicas: str | int = "auto", device: str = "auto",
                precision: str = "auto",
                channels_last: str = "auto", compile: str = "auto",
                experiment: str | None = None,
                progress: bool = True) -> PredictResult:
    """Score the frames with the model into ``out`` inside a ``predict`` run (module
    docstring). A broken run is continued by the same command: the parts it finished are
    kept (``<out>.parts/``)."""
    # the device, precision and memory format as train resolves them (auto: bf16 and
    # channels_last on a GPU that has them, fp32 on a CPU); torch.compile on a GPU (auto): on
    # a CPU its inductor build takes longer than most exams' forward passes gain
    if compile not in SWITCHES:
        raise ConfigError(f"compile={compile!r}; use one of {list(SWITCHES)}")
    rt = resolve_runtime(device=device, precision=precision, channels_last=channels_last,
                         profile="predict")
    dev = rt.device
    compiled = dev.type == "cuda" if compile == "auto" else compile == "true"
    n_replicas = resolve_replicas(replicas, dev)
    keep_freed_memory()   # each batch reuses the memory the last one freed (pipi.runtime)
    if bool(data) + bool(images or labels) != 1:   # before anything is loaded
        raise ConfigError("pass one of images=<folder of frames>, labels=<label table> "
                          "(images=: the folder its paths start from) or data=<staged folder>")
    ref = model_ref(model)
    module = tracking.scoring.load_module(model)
    flist, manifest, what, met = _frames(images, data, split, labels,
                                         tuple(module.class_names))
    params = {"model_uri": model, "model_name": ref.name, "model_version": ref.version,
              "images": images or "", "data": data or "", "labels": labels or "",
              "split": split if data else "",
              "batch_size": batch_size, "workers": workers, "replicas": str(replicas),
              "resolved_replicas": n_replicas, "device": dev.type,
              "precision": precision, "channels_last": channels_last, "compile": compile,
              **rt.params(),   # the resolved_* params, as a training run logs them
              "resolved_compile": str(compiled).lower(),
              "n_frames": len(flist), "out": str(Path(out).expanduser().resolve())}
    tags = {tracking.tags.TAG_SOURCE_RUN: ref.run_id} if ref.run_id else {}
    with tracking.pipi_run(entry_point="predict", experiment=experiment, tags=tags,
                           run_name=f"predict {what} ({len(flist)} frames) {ref.label}") as run:
        run.log_params(params)
        bar = tqdm(total=len(flist), unit="frame", desc="predict", disable=not progress)
        try:
            score = score_frames(module, flist, Path(out),
                                 model_key=f"{model}|{ref.label}|{rt.precision}",
                                 batch_size=batch_size, workers=workers, device=dev,
                                 progress=bar.update, amp_dtype=rt.amp_dtype,
                                 channels_last=rt.channels_last, compile=compiled,
                                 replicas=n_replicas)
        finally:
            bar.close()
        preds = pd.read_parquet(score.out)
        metrics = {"predict/frames": float(score.n_frames),
                   "predict/seconds": score.seconds, "predict/frames_per_s": score.frames_per_s,
                   "predict/resumed_frames": float(score.resumed_frames)}
        if met is not None:
            metrics.update(_table_counts(met))
        if flist.labelled:
            scored = preds[preds["label"] >= 0].reset_index(drop=True)
            classes = sorted({int(c) for c in scored["label"]})
            prefix = "test" if labels or split == "test" else split
            metrics.update(final_metrics(scored, classes, prefix, module.cfg, manifest))
        run.log_metrics(metrics)
        _log_outputs(run, score, preds, tuple(module.class_names))
        run.set_description(
            f"pipi predict: {ref.label} scored {score.n_frames} frames of {what} "
            f"({score.frames_per_s:.1f} frames/s on {dev.type}); predictions in "
            "predictions/predict.parquet, per-video timelines in figures/.")
    log.info("predict run %s: %d frames into %s", run.run_id, score.n_frames, score.out)
    return PredictResult(run.run_id, score.out, ref, score, metrics)


def _table_counts(met: TableLabels) -> dict[str, float]:
    """A label table's frames left out of the metrics, logged (and said once)."""
    if met.n_unknown:
        log.warning("%d frame(s) of the label table have a class the model does not have "
                    "(%s): scored, left out of the metrics", met.n_unknown,
                    ", ".join(met.unknown))
    if met.n_multi:
        log.warning("%d frame(s) of the label table have several classes: scored, left out "
                    "of the metrics", met.n_multi)
    return {"predict/frames_unknown_class": float(met.n_unknown),
            "predict/frames_several_classes": float(met.n_multi)}


def _log_outputs(run: tracking.Run, score: ScoreResult, preds: pd.DataFrame, names: tuple[str,
...]) -> None:
    """The predictions (as the run contract's folder: ``predict.parquet`` + ``schema.json``),
    the top-frames table and the first :data:`MAX_TIMELINES` videos' timelines (numbered
    files; the video ids, which come from data, are in ``tables/timelines.csv``)."""
    with tempfile.TemporaryDirectory(prefix="pipi-predict-") as tmp:
        folder = Path(tmp) / "predictions"
        folder.mkdir()
        (folder / "predict.parquet").symlink_to(score.out)
        (folder / "schema.json").symlink_to(score.out.with_name(score.out.stem + ".schema.json"))
        run.log_artifacts(folder, "predictions")
        tables = Path(tmp) / "tables"
        tables.mkdir()
        top_frames(preds, names).to_csv(tables / "top_frames.csv", index=False)
        videos = list(pd.unique(preds["video_id"].astype(str)))[:MAX_TIMELINES]
        figures = {f"timeline_{i:03d}": findings_timeline(preds, names, video=v)
                   for i, v in enumerate(videos)}
        pd.DataFrame({"figure": [f"figures/{k}.png" for k in figures], "video_id": videos}
                     ).to_csv(tables / "timelines.csv", index=False)
        run.log_artifacts(tables, "tables")
    run.log_figures(figures)
