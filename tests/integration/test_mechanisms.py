"""`robustness` and `transplant` (+ Grad-CAM) on smoke runs of cells a and pi, two seeds, and
their aggregate tables (issue 13)."""

from __future__ import annotations

import itertools
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from pipi.cli import ENTRY_POINTS
from pipi.predictions import PROB_COLUMNS

SMOKE = {"profile": "smoke", "weights": "none"}


@pytest.mark.parametrize("args,needle", [
    (["robustness", "--runs", ""], "runs is empty"),
    (["robustness", "--runs", "abc", "--perturbations", "jpeg10"], "jpeg10"),
    (["transplant", "--rgb", "", "--pi", "x"], "rgb is empty"),
    (["transplant", "--study", "nope"], "study"),
])
def test_bad_options_one_line(args, needle, tracking):
    r = CliRunner().invoke(ENTRY_POINTS[args[0]], args[1:])
    assert r.exit_code == 2
    err = r.output.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and needle in err


@pytest.fixture(autouse=True)
def _fixed_code_version(monkeypatch):
    """Children are keyed by the code version (git commit): fix it, so that a commit made in the
    shared checkout while these long tests run does not make the second invocation new work."""
    monkeypatch.setattr("pipi.tracking.contract.code_version", lambda: "test-code-version")


@pytest.fixture(scope="module")
def smoke_runs(mlflow_server, tiny_staged):
    """Cells a and pi, seeds 1 and 2, ResNet-18 smoke runs: {(cell, seed): run id}.

    ResNet-18: an EfficientNet-B0 trained for two smoke batches is nearly input-independent in
    eval mode, so perturbations and prior channels would barely move its predictions."""
    from pipi.config import make_config
    from pipi.runs.training import train

    mlflow.set_tracking_uri(mlflow_server.uri)
    exp = "mechanisms"
    out = {}
    for cell, seed in itertools.product(("a", "pi"), (1, 2)):
        cfg = make_config(cell=cell, seed=seed, backbone="resnet18", **SMOKE)
        out[(cell, seed)] = train(cfg, data=str(tiny_staged), experiment=exp, register=False,
                                  progress=False).run_id
    return exp, out


def _preds(run_id: str, dst: Path) -> pd.DataFrame:
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(dst / run_id))
    return pd.read_parquet(Path(folder) / "test.parquet")


@pytest.mark.slow
def test_robustness_children_idempotent_and_prior_recomputed(tracking, smoke_runs, tiny_staged,
                                                              tmp_path):
    from pipi.data.cache import build_cache
    from pipi.data.staging import load_staged
    from pipi.probes.perturb import PERTURBATIONS
    from pipi.runs.evaluate import load_run_model
    from pipi.training.frames import FrameInputs, predict_probs
    from pipi.workflows.robustness import perturbed_images, run_robustness

    exp, runs = smoke_runs
    ids = [runs[("a", 1)], runs[("pi", 1)]]
    first = run_robustness(runs=",".join(ids), experiment=exp, progress=False)
    assert len(first.children) == 2 * 9 and {c.status for c in first.children} == {"scored"}
    for c in first.children:
        t = mlflow.get_run(c.run_id).data.tags
        name = c.variant.removeprefix("perturb_")
        assert name in PERTURBATIONS and t["pipi.perturbation"] == name
        assert t["pipi.source_run_id"] == c.source.run_id
        assert t["pipi.cell"] == f"{c.source.cell}@perturb_{name}"
        assert t["mlflow.parentRunId"] == first.parent_run_id
    # second invocation (ids given as a filter this time): nothing new is scored
    again = run_robustness(runs="tags.`pipi.seed` = '1' and tags.`pipi.entry_point` = 'train'",
                           experiment=exp, progress=False)
    assert {c.status for c in again.children} == {"reused"}
    assert {c.run_id for c in again.children} == {c.run_id for c in first.children}
    by = {(c.source.cell, c.variant): c.run_id for c in first.children}
    # the unperturbed child reproduces the source run's own test predictions
    for cell in ("a", "pi"):
        base = _preds(by[(cell, "perturb_none")], tmp_path)
        own = _preds(runs[(cell, 1)], tmp_path)
        assert list(base["path"]) == list(own["path"])
        np.testing.assert_allclose(base[list(PROB_COLUMNS)], own[list(PROB_COLUMNS)], atol=1e-6)
    # the +PI child under noise equals an independent scoring with the prior recomputed on the
    # perturbed pixels, and differs from feeding the clean frame's prior
    frames, man = load_staged(tiny_staged)
    model, cfg = load_run_model(runs[("pi", 1)])
    rows = np.flatnonzero(frames["split"].to_numpy() == "test")
    cache = np.asarray(build_cache(tiny_staged, frames, size=cfg.image_size,
                                   digest=man["data_digest"], cache_dir=tmp_path, progress=False))
    noisy = perturbed_images(cache[rows], frames.iloc[rows], "noise0.10", seed=0)
    assert not np.array_equal(noisy, cache[rows])
    np.testing.assert_array_equal(noisy, perturbed_images(cache[rows], frames.iloc[rows],
                                                          "noise0.10", seed=0))
    want = predict_probs(model, noisy, FrameInputs(cfg), device=torch.device("cpu"))
    logged = _preds(by[("pi", "perturb_noise0.10")], tmp_path)[list(PROB_COLUMNS)].to_numpy()
    np.testing.assert_allclose(logged, want, atol=1e-5)

    class StalePrior(FrameInputs):  # RGB perturbed, prior from the clean frames
        clean = torch.from_numpy(cache[rows]).float() / 255

        def __call__(self, x01, **kw):
            x, p = super().__call__(x01, **kw)
            x[:, 3:] = super().__call__(self.clean[:len(x01)], **kw)[0][:, 3:]
            return x, p

    stale = predict_probs(model, noisy, StalePrior(cfg), device=torch.device("cpu"),
                          batch_size=len(rows))
    assert np.abs(stale - logged).max() > 1e-4


@pytest.mark.slow
def test_transplant_gradcam_and_aggregate_tables(tracking, smoke_runs, tiny_staged, tmp_path):
    from pipi.models.surgery import bn_transplant, first_conv
    from pipi.runs.evaluate import load_run_model
    from pipi.workflows.aggregate import run_aggregate
    from pipi.workflows.transplant import run_transplant

    exp, runs = smoke_runs
    rgb, pi = f"{runs[('a', 1)]},{runs[('a', 2)]}", f"{runs[('pi', 2)]},{runs[('pi', 1)]}"
    res = run_transplant(rgb=rgb, pi=pi, study="all", n_frames=3, experiment=exp,
                         progress=False)
    variants = sorted(c.variant for c in res.children)
    assert variants.count("first_conv") == 2 and variants.count("first_conv_within") == 1
    assert variants.count("gradcam") == 2
    for w in ("bn", "B", "C", "D", "E", "F"):
        assert variants.count(f"transplant_{w}") == 2
    by = {(c.source.seed, c.variant): c for c in res.children}
    # cosine: independent numpy computation over the RGB slices of the first convs
    (ma, _), (mp, _) = load_run_model(runs[("a", 1)]), load_run_model(runs[("pi", 1)])
    wa = first_conv(ma).weight.detach().numpy()[:, :3].ravel().astype(np.float64)
    wp = first_conv(mp).weight.detach().numpy()[:, :3].ravel().astype(np.float64)
    cos = mlflow.get_run(by[(1, "first_conv")].run_id).data.metrics["conv/cosine"]
    assert cos == pytest.approx(wa @ wp / np.linalg.norm(wa) / np.linalg.norm(wp), abs=1e-9)
    # the BN child's predictions are those of the transplanted model
    from pipi.data.cache import build_cache
    from pipi.data.staging import load_staged
    from pipi.training.frames import FrameInputs, predict_probs

    frames, man = load_staged(tiny_staged)
    _, cfg = load_run_model(runs[("a", 1)])
    rows = np.flatnonzero(frames["split"].to_numpy() == "test")
    cache = np.asarray(build_cache(tiny_staged, frames, size=cfg.image_size,
                                   digest=man["data_digest"], cache_dir=tmp_path, progress=False))
    want = predict_probs(bn_transplant(ma, mp).model, cache[rows], FrameInputs(cfg),
                         device=torch.device("cpu"))
    got = _preds(by[(1, "transplant_bn")].run_id, tmp_path)[list(PROB_COLUMNS)].to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    t = mlflow.get_run(by[(1, "transplant_bn")].run_id).data.tags
    assert t["pipi.donor_run_id"] == runs[("pi", 1)] and t["pipi.transplant_kind"] == "batchnorm"
    # Grad-CAM: per-class means are those of the per-frame Dice artifact
    g = by[(1, "gradcam")].run_id
    folder = Path(mlflow.artifacts.download_artifacts(run_id=g, artifact_path="gradcam",
                                                      dst_path=str(tmp_path / "g")))
    dice = pd.read_parquet(folder / "dice.parquet")
    assert (folder / "overlay.png").stat().st_size > 0 and (folder / "prior.png").is_file()
    m = mlflow.get_run(g).data.metrics
    for cls, grp in dice.groupby("class"):
        assert len(grp) == min(3, int(((frames["split"] == "test")
                                       & (frames["class"] == cls)).sum()))
        assert m[f"gradcam/dice_pi/{cls}"] == pytest.approx(np.nanmean(grp["dice_pi"]))
        assert m[f"gradcam/n/{cls}"] == len(grp)
    again = run_transplant(rgb=rgb, pi=pi, study="all", n_frames=3, experiment=exp,
                           progress=False)
    assert {c.status for c in again.children} == {"reused"}

    rep = run_aggregate(experiment=exp, log_run=False).report
    pf = {r["cell"]: r for r in rep.table("per_frame").data.to_dict("records")}
    assert pf["a"]["n_seeds"] == 2 and pf["pi"]["n_seeds"] == 2
    rob = rep.table("robustness")
    assert rob.ok and len(rob.data) == 9 and set(rob.data["cell"]) == {"pi"}
    assert all(r for r in rob.run_ids)
    tr = rep.table("transplant")
    assert tr.ok and list(tr.data["transplant"]) == ["bn", "B", "C", "D", "E", "F"]
    assert (tr.data["n_seeds"] == 2).all()
    conv = rep.table("transplant_conv").data.iloc[0]
    assert conv["n_pairs"] == 2 and conv["n_within_pairs"] == 1
    gc = rep.table("gradcam")
    assert gc.ok and (gc.data["n_seeds"] == 2).all()
    assert "robustness_lift" in rep.figures
    print("\n\n".join(__import__("pipi.report.tables", fromlist=["x"]).table_markdown(
        rep.table(k)) for k in ("robustness", "transplant_conv", "transplant", "gradcam")))
