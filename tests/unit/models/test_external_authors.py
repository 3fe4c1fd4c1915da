"""The published code's checkpoint layout (``train_stage2_pi.py``: ``best_model.pt`` and the
per-epoch ``last_model.pt``) read by pipi.models.external.

The files are written here as the published script writes them: a dict with the
``ImageClassifierPI`` state dict under ``model_state`` (``backbone.<torchvision key>``,
``head.1.*``), ``class_names`` in ImageFolder order, ``args`` (``vars(args)``) and, in
``last_model.pt``, the optimizer / scheduler / scaler state and a history whose metrics are
numpy scalars (scikit-learn returns them), as a real file holds them.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from pipi.classes import CLASSES, RELEASE_FOLDERS, ClassSet
from pipi.config import make_config
from pipi.errors import DataError
from pipi.models.external import file_settings, load_external_state, read_checkpoint
from pipi.training.frames import build_frame_model

#: ImageFolder's order: the release's class folders, sorted.
FOLDERS = sorted(RELEASE_FOLDERS.values())
ARGS = {"data_dir": "./stage2_data", "model_name": "resnet18", "epochs": 40, "batch_size": 24,
        "image_size": 224, "lr": 1e-4, "pretrained": True, "seed": 42, "output_dir": "out",
        "use_physics_prior": True, "physics_alpha": 4.0, "physics_lambda_eff": None,
        "physics_prior_version": "v1", "physics_pivot_v2": 0.30, "ablate_input_channels": "",
        "label_smoothing": 0.0, "mixup_alpha": 0.0, "deterministic": True}


class _AuthorsModel(nn.Module):
    """As the published ImageClassifierPI is built: a torchvision ResNet-18 whose first conv
    takes 5 channels (extra ones zero-initialised), ``fc`` removed, Sequential(Dropout, Linear)."""

    def __init__(self, classes: int = 14):
        super().__init__()
        m = torchvision.models.resnet18(weights=None)
        old = m.conv1
        new = nn.Conv2d(5, old.out_channels, old.kernel_size, old.stride, old.padding, bias=False)
        with torch.no_grad():
            new.weight.zero_()
            new.weight[:, :3] = old.weight
        m.conv1, m.fc = new, nn.Identity()
        self.backbone = m
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(512, classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def _write(tmp_path, model, *, names=FOLDERS, args=ARGS):
    best = tmp_path / "best_model.pt"
    torch.save({"model_state": model.state_dict(), "class_names": list(names),
                "args": dict(args), "best_val_macro_f1_evaluable": 0.61,
                "best_val_macro_f1": np.float64(0.48)}, best)
    model = copy.deepcopy(model)  # one training step for the optimizer state
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.rand(2, 5, 32, 32)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40)
    report = {c: {"precision": np.float64(0.5), "support": np.int64(3)} for c in names}
    history = [{"epoch": 1, "train": {"loss": 1.2, "macro_f1": np.float64(0.3),
                                       "report": report, "evaluable_classes": list(names)},
                "val": {"loss": 1.4, "macro_f1_evaluable": 0.61, "confusion_matrix": [[1, 0]]}}]
    last = tmp_path / "last_model.pt"
    torch.save({"epoch": 1, "model_state": model.state_dict(), "optimizer_state": opt.state_dict(),
                "scheduler_state": sched.state_dict(), "scaler_state": None,
                "best_score": 0.61, "class_names": list(names), "history": history,
                "args": dict(args)}, last)
    return best, last


@pytest.fixture(scope="module")
def authors():
    torch.manual_seed(0)
    model = _AuthorsModel().eval()
    with torch.no_grad():  # a trained model's prior slices are not zero
        model.backbone.conv1.weight[:, 3:] = torch.randn_like(model.backbone.conv1.weight[:, 3:])
    return model


def test_both_files_load_with_weights_only_and_give_state_names_and_args(authors, tmp_path):
    for path in _write(tmp_path, authors):
        ck = read_checkpoint(path)
        assert ck.container == "model_state"
        assert ck.class_names == tuple(FOLDERS) and ck.args["model_name"] == "resnet18"
        assert set(ck.state) == set(authors.state_dict())
        assert file_settings(ck, path) == {
            "backbone": "resnet18", "image_size": 224, "cell": "pi", "hb_index": "code",
            "second_channel": "log_gb_phi", "alpha": 4.0, "lambda_eff": None}


def test_a_file_that_pickles_an_object_is_still_refused(tmp_path):
    """Allowing numpy scalars opens nothing else: any other global stays refused (here the
    argparse.Namespace a script saves when it forgets vars(args))."""
    path = tmp_path / "namespace.pt"
    torch.save({"model_state": {"w": torch.zeros(1)}, "args": argparse.Namespace(lr=1)}, path)
    with pytest.raises(DataError, match="cannot read it as a torch state dict"):
        read_checkpoint(path)


def test_keys_map_and_rows_follow_class_names(authors, tmp_path):
    """backbone.* / head.1.* onto pipi's model, the head's rows reordered by class_names:
    pipi's output k is the file's output for the class named CLASSES[k]."""
    names = list(reversed(FOLDERS))  # any order: matched by name
    best, _ = _write(tmp_path, authors, names=names)
    ck = read_checkpoint(best)
    model = build_frame_model(make_config(cell="pi", backbone="resnet18", weights="none"))
    facts = load_external_state(model, ck.state, arch="resnet18", cell="pi", source=str(best),
                                class_names=ck.class_names)
    assert "published code" in facts["key_form"] and facts["class_order"].startswith("the file")
    x = torch.rand(3, 5, 64, 64)
    with torch.no_grad():
        theirs, ours = authors(x), model.eval()(x)
    lower = [n.lower() for n in names]
    for k, c in enumerate(CLASSES):
        torch.testing.assert_close(ours[:, k], theirs[:, lower.index(c.lower())])


@pytest.mark.parametrize("names, match", [
    ([*FOLDERS[:-1], "Tumour"], r"class_names has classes pipi does not know: \['Tumour'\]"),
    ([*FOLDERS[:-1], FOLDERS[0]], r"named twice: \['Ampulla of vater'\]; missing: \['Ulcer'\]"),
])
def test_unknown_or_repeated_class_names_are_refused_in_one_line(authors, tmp_path, names,
                                                                 match):
    best, _ = _write(tmp_path, authors, names=names)
    ck = read_checkpoint(best)
    model = build_frame_model(make_config(cell="pi", backbone="resnet18", weights="none"))
    with pytest.raises(DataError, match=match) as err:
        load_external_state(model, ck.state, arch="resnet18", cell="pi", source=str(best),
                            class_names=ck.class_names)
    assert "\n" not in str(err.value) and str(best) in str(err.value)


@pytest.mark.parametrize("change, want", [
    ({"physics_prior_version": "v2"}, {"hb_index": "code_v2", "alpha": 6.0}),
    ({"physics_prior_version": "v2", "physics_alpha": 8.0}, {"hb_index": "code_v2", "alpha": 8.0}),
    ({"physics_lambda_eff": 50.0}, {"lambda_eff": 50.0}),
    ({"ablate_input_channels": "4"}, {"cell": "pblood_only"}),
    ({"ablate_input_channels": "3"}, {"cell": "phi_only"}),
    ({"use_physics_prior": False}, {"cell": "a", "hb_index": None}),
])
def test_file_settings_follow_the_args(authors, tmp_path, change, want):
    best, _ = _write(tmp_path, authors, args={**ARGS, **change})
    got = file_settings(read_checkpoint(best), best)
    for k, v in want.items():
        assert got.get(k) == v, k


@pytest.mark.parametrize("change, match", [
    ({"physics_prior_version": "v3"}, "physics_prior_version='v3' is unknown"),
    ({"physics_prior_version": "v2", "physics_pivot_v2": 0.4}, "physics_pivot_v2=0.4"),
    ({"model_name": "vit_b_16"}, "model_name='vit_b_16' is not a backbone pipi has"),
    ({"ablate_input_channels": "0,1,2"}, "ablate_input_channels='0,1,2' has no pipi cell"),
])
def test_args_pipi_cannot_reproduce_are_refused(authors, tmp_path, change, match):
    best, _ = _write(tmp_path, authors, args={**ARGS, **change})
    with pytest.raises(DataError, match=match):
        file_settings(read_checkpoint(best), best)


# --------------------------------------------------------------------------- another class set
#: A staged image dataset's classes (the Capsule Vision 2024 challenge's first three), in the
#: staged index order; the published code's ImageFolder order of the same folders is sorted.
OWN = ClassSet(("Erosion", "Bleeding", "Angioectasia"))


def _own_model(classes: int) -> _AuthorsModel:
    torch.manual_seed(1)
    model = _AuthorsModel(classes).eval()
    with torch.no_grad():
        model.backbone.conv1.weight[:, 3:] = torch.randn_like(model.backbone.conv1.weight[:, 3:])
    return model


def test_a_checkpoint_of_another_class_set_loads_against_that_class_set(tmp_path):
    """A published-layout file trained on three ImageFolder classes: the model of the staged
    data's class set predicts, for its class k, the file's output named OWN[k]."""
    theirs = _own_model(3)
    folders = sorted(OWN.names)  # ImageFolder's order
    best, _ = _write(tmp_path, theirs, names=folders)
    ck = read_checkpoint(best)
    cfg = make_config(cell="pi", backbone="resnet18", weights="none").with_classes(OWN)
    model = build_frame_model(cfg)
    facts = load_external_state(model, ck.state, arch="resnet18", cell="pi", source=str(best),
                                class_names=ck.class_names, classes=OWN)
    assert facts["class_order"] == "the file's class_names"
    x = torch.rand(2, 5, 64, 64)
    with torch.no_grad():
        want, got = theirs(x), model.eval()(x)
    assert got.shape == (2, 3)
    for k, c in enumerate(OWN.names):
        torch.testing.assert_close(got[:, k], want[:, folders.index(c)])
    # a bare state dict (no class_names): its rows are taken in the staged order
    bare = tmp_path / "bare.pt"
    torch.save(theirs.state_dict(), bare)
    model = build_frame_model(cfg)
    facts = load_external_state(model, read_checkpoint(bare).state, arch="resnet18", cell="pi",
                                source=str(bare), classes=OWN)
    assert facts["class_order"] == "the staged data's class order"
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), want)


def test_a_checkpoint_of_kvasir_s_classes_is_refused_against_another_class_set(authors,
                                                                              tmp_path):
    cfg = make_config(cell="pi", backbone="resnet18", weights="none").with_classes(OWN)
    best, _ = _write(tmp_path, authors)  # Kvasir's 14 folders
    ck = read_checkpoint(best)
    with pytest.raises(DataError) as err:
        load_external_state(build_frame_model(cfg), ck.state, arch="resnet18", cell="pi",
                            source=str(best), class_names=ck.class_names, classes=OWN)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(best))
    assert "class_names has classes the staged data does not have: ['Ampulla of vater'" in msg
    assert "the staged data's 3 classes: ['Erosion', 'Bleeding', 'Angioectasia']" in msg
    bare = tmp_path / "bare14.pt"
    torch.save(authors.state_dict(), bare)  # no class_names: the head's size says it
    with pytest.raises(DataError) as err:
        load_external_state(build_frame_model(cfg), read_checkpoint(bare).state,
                            arch="resnet18", cell="pi", source=str(bare), classes=OWN)
    msg = str(err.value)
    assert "\n" not in msg and msg == (
        f"{bare}: its head has 14 outputs; the staged data's class set has 3 (Erosion, "
        "Bleeding, Angioectasia); import it against data staged with its 14 classes, or save "
        "class_names beside it")


class _AuthorsDistillResNet(nn.Module):
    """As the published ImageClassifierPIDistill is built on ResNet-18: the torchvision model
    split into ``backbone.stem`` / ``backbone.body`` / ``backbone.pool``, ``head =
    Sequential(Dropout, Linear)`` and ``distill_decoder`` (3x3 conv, GELU, 3x3 conv, GELU,
    1x1 conv, 64 channels), written here from the published layout."""

    def __init__(self, classes: int = 14) -> None:
        super().__init__()
        m = torchvision.models.resnet18(weights=None)
        self.backbone = nn.Module()
        self.backbone.stem = nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)
        self.backbone.body = nn.Sequential(m.layer1, m.layer2, m.layer3, m.layer4)
        self.backbone.pool = m.avgpool
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(512, classes))
        self.distill_decoder = nn.Sequential(nn.Conv2d(512, 64, 3, padding=1), nn.GELU(),
                                             nn.Conv2d(64, 64, 3, padding=1), nn.GELU(),
                                             nn.Conv2d(64, 1, 1))

    def decode(self, x):
        return self.distill_decoder(self.backbone.body(self.backbone.stem(x)))


def test_decoder_code_keeps_the_published_distillation_decoder(tmp_path):
    """Issue 42 item 8: ``decoder=code`` is the published decoder, so an imported distillation
    checkpoint keeps it: pipi's auxiliary map equals the published model's on frames whose maps
    differ; with pipi's own decoder the file's is not kept, and says so."""
    torch.manual_seed(0)
    theirs = _AuthorsDistillResNet().train()
    x = torch.rand(6, 3, 64, 64)
    with torch.no_grad():
        theirs.decode(x)   # BN statistics of these frames
    theirs.eval()
    path = tmp_path / "best_model.pt"
    torch.save({"model_state": theirs.state_dict(), "class_names": list(CLASSES),
                "args": {**ARGS, "use_physics_prior": None, "distill_lambda": 1.0}}, path)
    ckpt = read_checkpoint(path)
    got = file_settings(ckpt, path)
    assert got["decoder"] == "code" and got["cell"] == "distill"
    cfg = make_config(cell="distill", backbone="resnet18", profile="smoke", weights="none",
                      decoder="code")
    model = build_frame_model(cfg).eval()
    facts = load_external_state(model, ckpt.state, arch="resnet18", cell="distill",
                                class_names=ckpt.class_names, source=str(path))
    assert facts["aux_head"] == "loaded"
    with torch.no_grad():
        want = theirs.decode(x)
        _, mine = model(x)
    assert want.std() > 1e-3                        # maps that differ across frames
    torch.testing.assert_close(mine, want, atol=1e-5, rtol=1e-5)
    # pipi's own decoder: the file's is not kept, and the facts say so
    other = build_frame_model(make_config(cell="distill", backbone="resnet18", profile="smoke",
                                          weights="none")).eval()
    facts = load_external_state(other, ckpt.state, arch="resnet18", cell="distill",
                                class_names=ckpt.class_names, source=str(path))
    assert "not kept" in facts["aux_head"] and "decoder=code" in facts["aux_head"]
