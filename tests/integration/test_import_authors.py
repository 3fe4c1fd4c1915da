"""`import` of the published code's checkpoints, scored as that code scores them.

A model is built here as the published ``models_pi.ImageClassifierPI`` is built (a torchvision
model, first conv widened to 5 channels with zero-initialised new slices, its classifier
removed, ConvNeXt keeping LayerNorm2d + Flatten, ``head = Sequential(Dropout, Linear)``),
given trained-looking weights, and saved as ``train_stage2_pi.py`` saves it (``best_model.pt``
and ``last_model.pt``). The import leaves cell, backbone, image size and prior out: they come
from the file's ``args``. The imported run's test probabilities must equal a reference forward
written here from the published definition: ``Resize((S, S))``, ``ToTensor``, ImageNet
normalisation, then the code's two prior channels of the un-normalised [0, 1] RGB.
"""

from __future__ import annotations

import copy
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from PIL import Image
from torch import nn
from torchvision import transforms

from pipi.classes import CLASSES, RELEASE_FOLDERS
from pipi.errors import ConfigError
from pipi.workflows.importer import import_file

SIZE = 48  # the file's args.image_size (the staged frames are 64 px: no JPEG draft scaling)
EPS = 1e-6
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


# --------------------------------------------------------------------------- the published model
def _widen(conv: nn.Conv2d) -> nn.Conv2d:
    new = nn.Conv2d(conv.in_channels + 2, conv.out_channels, conv.kernel_size, conv.stride,
                    conv.padding, bias=conv.bias is not None)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:, :3] = conv.weight
        if conv.bias is not None:
            new.bias.copy_(conv.bias)
    return new


class AuthorsModel(nn.Module):
    def __init__(self, arch: str, classes: int = 14):
        super().__init__()
        m = torchvision.models.get_model(arch, weights=None)
        if arch.startswith("resnet"):
            m.conv1, dim, m.fc = _widen(m.conv1), m.fc.in_features, nn.Identity()
        else:
            m.features[0][0] = _widen(m.features[0][0])
            if arch == "convnext_tiny":  # LayerNorm2d + Flatten stay, the Linear goes
                dim = m.classifier[2].in_features
                m.classifier = nn.Sequential(m.classifier[0], m.classifier[1])
            else:
                dim, m.classifier = m.classifier[1].in_features, nn.Identity()
        self.backbone = m
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(dim, classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def _trained(arch: str, seed: int, batch: torch.Tensor) -> AuthorsModel:
    """Weights a training run could have left: prior slices of the first conv no longer zero,
    BatchNorm statistics of real inputs (``batch``: staged train frames, as the published
    transform makes them), a head whose logits on them are of order 1 (not saturated)."""
    torch.manual_seed(seed)
    model = AuthorsModel(arch)
    conv = model.backbone.features[0][0]
    with torch.no_grad():
        conv.weight[:, 3:] = torch.randn_like(conv.weight[:, 3:]) * conv.weight[:, :3].std()
    return _settled(model, batch)


def _settled(model: nn.Module, batch: torch.Tensor) -> nn.Module:
    """``model`` with BatchNorm statistics of real frames (``batch``) and a head whose logits
    on them are of order one (a fresh model in eval mode answers every frame alike)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.momentum = None
        model.train()
        model(batch)
        model.eval()
        spread = model(batch).std()
        model.head[1].weight.div_(spread)
        model.head[1].bias.div_(spread)
    return model


def _save_both(model: nn.Module, folder: Path, names: list[str], args: dict) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    best, last = folder / "best_model.pt", folder / "last_model.pt"
    torch.save({"model_state": model.state_dict(), "class_names": names, "args": args,
                "best_val_macro_f1_evaluable": 0.64, "best_val_macro_f1": np.float64(0.5)}, best)
    trained = copy.deepcopy(model)
    opt = torch.optim.AdamW(trained.parameters(), lr=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40)
    torch.save({"epoch": 12, "model_state": model.state_dict(), "optimizer_state": opt.state_dict(),
                "scheduler_state": sched.state_dict(), "scaler_state": None, "best_score": 0.64,
                "class_names": names, "args": args,
                "history": [{"epoch": 12, "val": {"macro_f1": np.float64(0.5)}}]}, last)
    return best, last


# --------------------------------------------------------------------------- the published scoring
def _phi(h: int, w: int) -> torch.Tensor:
    lam = 0.25 * (h ** 2 + w ** 2) ** 0.5
    ys = torch.arange(h, dtype=torch.float32).view(-1, 1) - (h - 1) / 2.0
    xs = torch.arange(w, dtype=torch.float32).view(1, -1) - (w - 1) / 2.0
    return torch.exp(-torch.sqrt(ys ** 2 + xs ** 2) / lam)


def _physics(x: torch.Tensor, alpha: float, version: str) -> torch.Tensor:
    """The published physics_channels of one [3, H, W] image in [0, 1]: [2, H, W]."""
    r, g, b = x[0], x[1], x[2]
    phi = _phi(*x.shape[1:])
    if version == "v1":
        idx = r / (g + b + EPS)
        lo, hi = torch.quantile(idx.flatten(), 0.01), torch.quantile(idx.flatten(), 0.99)
        norm = (torch.clamp(idx, lo, hi) - lo) / (hi - lo + EPS)
        p_blood = torch.sigmoid(alpha * (norm - 0.5)) * phi
    else:
        p_blood = torch.sigmoid(max(alpha, 6.0) * ((r - g) / (r + g + EPS) - 0.30)) * phi
    return torch.stack([p_blood, torch.log((g + EPS) / (b + EPS)) * phi])


def _inputs(staged: Path, paths, alpha: float, version: str) -> torch.Tensor:
    """The published eval transform of each frame: [N, 5, S, S]."""
    geom = transforms.Compose([transforms.Resize((SIZE, SIZE)), transforms.ToTensor()])
    xs = []
    for p in paths:
        with Image.open(staged / p) as im:
            x01 = geom(im.convert("RGB"))
        xs.append(torch.cat([(x01 - MEAN) / STD, _physics(x01, alpha, version)]))
    return torch.stack(xs)


def _reference(model, staged: Path, paths, names, alpha, version) -> np.ndarray:
    """Softmax of the published model on its eval transform, columns in pipi's class order."""
    with torch.no_grad():
        probs = torch.softmax(model(_inputs(staged, paths, alpha, version)), 1).numpy()
    lower = [n.lower() for n in names]
    return probs[:, [lower.index(c.lower()) for c in CLASSES]]


def _predictions(run_id: str, tmp: Path) -> pd.DataFrame:
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="predictions",
                                                 dst_path=str(tmp / run_id))
    return pd.read_parquet(Path(folder) / "test.parquet")


ARGS = {"data_dir": "./stage2_data", "epochs": 40, "batch_size": 24, "image_size": SIZE,
        "lr": 1e-4, "pretrained": True, "seed": 43, "use_physics_prior": True,
        "physics_lambda_eff": None, "physics_pivot_v2": 0.30, "ablate_input_channels": "",
        "mixed_precision": True, "scheduler": "cosine"}
#: ImageFolder's order of the release's class folders (sorted), and a shuffled order.
FOLDERS = sorted(RELEASE_FOLDERS.values())
SHUFFLED = [FOLDERS[i] for i in np.random.default_rng(5).permutation(len(FOLDERS))]


@pytest.mark.parametrize("arch, version, alpha, names", [
    ("efficientnet_b0", "v1", 4.0, FOLDERS),
    ("convnext_tiny", "v2", 4.0, SHUFFLED),
])
def test_published_checkpoint_scores_as_the_published_code(arch, version, alpha, names,
                                                           tiny_staged, galar_staged,
                                                           sqlite_tracking, tmp_path):
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    train = frames.loc[frames["split"] == "train", "path"].iloc[::4]
    model = _trained(arch, len(arch), _inputs(tiny_staged, train, alpha, version))
    args = {**ARGS, "model_name": arch, "physics_alpha": alpha,
            "physics_prior_version": version}
    best, last = _save_both(model, tmp_path / arch, names, args)
    exp = f"import-authors-{arch}"
    res = import_file(kind="checkpoint", file=best, seed=43, data=str(tiny_staged),
                      profile="smoke", experiment=exp, progress=False, register=False)
    hb = {"v1": "code", "v2": "code_v2"}[version]
    used = alpha if version == "v1" else max(alpha, 6.0)
    assert set(res.from_file) == {f"backbone={arch}", f"image_size={SIZE}", "cell=pi",
                                  f"hb_index={hb}", "second_channel=log_gb_phi",
                                  f"alpha={used}", "lambda_eff=auto"}
    run = mlflow.get_run(res.run_id)
    p = run.data.params
    assert (p["cell"], p["backbone"], p["image_size"], p["hb_index"], p["second_channel"],
            float(p["alpha"]), p["lambda_eff"]) == ("pi", arch, str(SIZE), hb, "log_gb_phi",
                                                    used, "auto")
    assert "published code" in run.data.tags["pipi.import.key_form"]
    assert f"-P hb_index={hb}" in run.data.tags["pipi.recipe"]
    df = _predictions(res.run_id, tmp_path)
    got = df[[f"prob_{k:02d}" for k in range(14)]].to_numpy()
    want = _reference(model, tiny_staged, df["path"], names, alpha, version)
    assert got.std(0).max() > 1e-3  # the frames are told apart
    np.testing.assert_allclose(got, want, atol=1e-4)
    # what galar, robustness, transplant and promote load: the imported model with its prior
    from pipi.runs.evaluate import load_run_model

    _, cfg = load_run_model(res.run_id)
    assert (cfg.prior.hb_index, cfg.prior.second_channel, cfg.prior.alpha, cfg.image_size) == \
        (hb, "log_gb_phi", used, SIZE)
    if arch == "efficientnet_b0":
        # galar on the imported run scores Galar with the file's prior, untold
        from pipi.workflows.galar import run_galar

        out = run_galar(runs=res.run_id, data=str(galar_staged), experiment=exp,
                        progress=False)
        child = out.table.iloc[0]["galar_run_id"]
        g = _predictions(child, tmp_path)
        np.testing.assert_allclose(g[[f"prob_{k:02d}" for k in range(14)]].to_numpy(),
                                   _reference(model, galar_staged, g["path"], names, alpha,
                                              version), atol=1e-4)
        # the per-epoch file holds the same weights: the same probabilities
        again = import_file(kind="checkpoint", file=last, seed=43, data=str(tiny_staged),
                            profile="smoke", experiment=exp, progress=False, register=False)
        assert again.run_id != res.run_id
        np.testing.assert_allclose(_predictions(again.run_id, tmp_path)[
            [f"prob_{k:02d}" for k in range(14)]].to_numpy(), got, atol=1e-6)
        # given options win over the file's (and are not listed as taken from it); a cell or
        # backbone the file contradicts is refused before anything is logged
        mine = import_file(kind="checkpoint", file=best, seed=43, data=str(tiny_staged),
                           profile="smoke", experiment=exp, progress=False, register=False,
                           hb_index="paper", second_channel="phi", alpha=7.0)
        assert mlflow.get_run(mine.run_id).data.params["hb_index"] == "paper"
        paper = _predictions(mine.run_id, tmp_path)[[f"prob_{k:02d}" for k in range(14)]]
        assert np.abs(paper.to_numpy() - got).max() > 1e-3  # the prior channels matter
        assert not any(s.startswith(("hb_index", "alpha", "second_channel"))
                       for s in mine.from_file)
        # the command line says what it took from the file (here: the run made above, reused)
        from click.testing import CliRunner

        from pipi.cli import main

        r = CliRunner().invoke(main, ["import", "checkpoint", "--file", str(best), "--seed",
                                      "43", "--data", str(tiny_staged), "--profile", "smoke",
                                      "--experiment", exp])
        assert r.exit_code == 0, r.output
        assert (f"taken from the file's args: backbone={arch}, image_size={SIZE}, cell=pi, "
                "hb_index=code, second_channel=log_gb_phi, alpha=4.0, lambda_eff=auto"
                in r.output) and f"already imported as run {res.run_id}" in r.output
        n = len(mlflow.search_runs(experiment_names=[exp]))
        with pytest.raises(ConfigError, match="backbone=resnet18: best_model.pt's args say "
                                              "backbone efficientnet_b0"):
            import_file(kind="checkpoint", file=best, backbone="resnet18", seed=43,
                        data=str(tiny_staged), profile="smoke", experiment=exp)
        assert len(mlflow.search_runs(experiment_names=[exp])) == n


# --------------------------------------------------------------------------- distillation
class AuthorsDistill(nn.Module):
    """Built as the published ``ImageClassifierPIDistill`` is (issue 42): a torchvision model
    split into ``stem`` (ResNet: conv1, bn1, relu, maxpool; else none), ``body`` (ResNet's four
    layers, else ``features``) and ``pool``; ``head = Sequential(Dropout, Linear)``; a
    ``distill_decoder`` of 3x3 conv, GELU, 3x3 conv, GELU, 1x1 conv with 64 channels; RGB in."""

    def __init__(self, arch: str, classes: int = 14):
        super().__init__()
        m = torchvision.models.get_model(arch, weights=None)
        trunk = nn.Module()
        if arch.startswith("resnet"):
            trunk.stem = nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)
            trunk.body = nn.Sequential(m.layer1, m.layer2, m.layer3, m.layer4)
            dim = m.fc.in_features
        else:
            trunk.stem, trunk.body = nn.Identity(), m.features
            dim = m.classifier[-1].in_features
        trunk.pool = m.avgpool
        self.backbone = trunk
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(dim, classes))
        self.distill_decoder = nn.Sequential(nn.Conv2d(dim, 64, 3, padding=1), nn.GELU(),
                                             nn.Conv2d(64, 64, 3, padding=1), nn.GELU(),
                                             nn.Conv2d(64, 1, 1))

    def forward(self, x):   # deploy mode: the logits only
        fmap = self.backbone.body(self.backbone.stem(x))
        return self.head(self.backbone.pool(fmap).flatten(1))


def _rgb(staged: Path, paths) -> torch.Tensor:
    """The published RGB eval transform: Resize((S, S)), ToTensor, ImageNet normalisation."""
    geom = transforms.Compose([transforms.Resize((SIZE, SIZE)), transforms.ToTensor()])
    xs = []
    for p in paths:
        with Image.open(staged / p) as im:
            xs.append((geom(im.convert("RGB")) - MEAN) / STD)
    return torch.stack(xs)


DISTILL_ARGS = {"data_dir": "./stage2_data", "epochs": 30, "batch_size": 24, "image_size": SIZE,
                "lr": 1e-4, "pretrained": True, "seed": 42, "distill_lambda": 1.0,
                "physics_alpha": 4.0, "physics_lambda_eff": None, "mixed_precision": True,
                "scheduler": "cosine", "physics_prior_version": "v1"}


@pytest.mark.parametrize("arch", ["resnet18", "efficientnet_b0"])
def test_published_distillation_checkpoint_scores_as_the_published_code(arch, tiny_staged,
                                                                        sqlite_tracking,
                                                                        tmp_path):
    """The released distillation checkpoints were refused ("missing 360"); both files import
    from their args (cell distill, backbone, image size) with the published model's
    probabilities on frames it tells apart."""
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    batch = _rgb(tiny_staged, frames.loc[frames["split"] == "train", "path"].iloc[::4])
    torch.manual_seed(3)
    model = _settled(AuthorsDistill(arch), batch)
    best, last = _save_both(model, tmp_path / arch, SHUFFLED, {**DISTILL_ARGS,
                                                               "model_name": arch})
    exp = f"import-distill-{arch}"
    for path in (best, last):
        res = import_file(kind="checkpoint", file=path, seed=42, data=str(tiny_staged),
                          profile="smoke", experiment=exp, progress=False, register=False)
        assert set(res.from_file) == {f"backbone={arch}", f"image_size={SIZE}", "cell=distill",
                                      "decoder=code"}
        run = mlflow.get_run(res.run_id)
        assert run.data.params["cell"] == "distill" and run.data.params["decoder"] == "code"
        assert run.data.tags["pipi.import.aux_head"] == "loaded"   # its decoder is kept
        assert "published distillation code" in run.data.tags["pipi.import.key_form"]
        df = _predictions(res.run_id, tmp_path)
        got = df[[f"prob_{k:02d}" for k in range(14)]].to_numpy()
        with torch.no_grad():
            probs = torch.softmax(model(_rgb(tiny_staged, df["path"])), 1).numpy()
        lower = [n.lower() for n in SHUFFLED]
        want = probs[:, [lower.index(c.lower()) for c in CLASSES]]
        assert got.std(0).max() > 1e-3   # the frames are told apart
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_a_published_convnext_distillation_checkpoint_is_refused_saying_why(tiny_staged,
                                                                           sqlite_tracking,
                                                                           tmp_path):
    from pipi.errors import DataError

    best, _ = _save_both(AuthorsDistill("convnext_tiny"), tmp_path / "cnx", FOLDERS,
                         {**DISTILL_ARGS, "model_name": "convnext_tiny"})
    with pytest.raises(DataError, match="without ConvNeXt's final LayerNorm2d") as err:
        import_file(kind="checkpoint", file=best, seed=42, data=str(tiny_staged),
                    profile="smoke", experiment="import-distill-cnx", progress=False,
                    register=False)
    assert "\n" not in str(err.value)
    assert not mlflow.search_runs(experiment_names=["import-distill-cnx"]).shape[0]


def test_e_dagger_builds_on_an_imported_distillation_run(tiny_staged, sqlite_tracking, tmp_path):
    """Issue 42: `e_dagger` could not start from the released distillation bases (its base was
    found among `train` runs only); `-P base_run=<import run>` names it, checked first."""
    from pipi.errors import ConfigError
    from pipi.runs import training as workflow

    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    batch = _rgb(tiny_staged, frames.loc[frames["split"] == "train", "path"].iloc[::4])
    torch.manual_seed(4)
    model = _settled(AuthorsDistill("resnet18"), batch)
    # C3 (e_dagger) takes sizes that are multiples of 32: a file trained at 64 px
    best, _ = _save_both(model, tmp_path / "d", SHUFFLED, {**DISTILL_ARGS, "image_size": 64,
                                                           "model_name": "resnet18"})
    imported = import_file(kind="checkpoint", file=best, seed=42, data=str(tiny_staged),
                           profile="smoke", experiment="e-dagger-import", progress=False,
                           register=False)
    opts = dict(backbone="resnet18", seed=42, profile="smoke", data=str(tiny_staged),
                weights="none", image_size=64)
    with pytest.raises(ConfigError, match=r"cell distill \(cell b_plus needs pi\)") as err:
        workflow.request_from_options(cell="b_plus", base_run=imported.run_id, **opts)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"image size 64 \(cell e_dagger needs 32\)"):
        workflow.request_from_options(cell="e_dagger", base_run=imported.run_id,
                                      **{**opts, "image_size": 32})
    req = workflow.request_from_options(cell="e_dagger", base_run=imported.run_id, **opts)
    s = workflow.run(req, experiment="e-dagger-import", register=False, progress=False)
    run = mlflow.get_run(s.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["pipi.base_run_id"] == imported.run_id
    assert s.base_run_id == imported.run_id and 0.0 <= s.test_macro_auc <= 1.0
