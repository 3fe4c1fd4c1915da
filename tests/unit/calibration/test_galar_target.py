"""calibrate mode=train with target=galar:<system>, the pure parts: the model scored on a fold
against an independent computation, the epoch hook reporting that score, the study name
binding the target's data, and the target_data option's one-line errors."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import torch
from sklearn.metrics import roc_auc_score

from pipi.calibration.objective import calibration_fold, score_on_fold
from pipi.calibration.trials import epoch_reporter, trial_config
from pipi.config import make_config
from pipi.data.cache import IMAGENET_MEAN, IMAGENET_STD, build_cache
from pipi.data.staging import load_staged
from pipi.errors import ConfigError
from pipi.prior import prior_channels
from pipi.runs.data import galar_target_data
from pipi.tracking.handle import MemoryRun
from pipi.training.frames import build_frame_model
from pipi.workflows.calibrate import train_study_name

optuna.logging.set_verbosity(optuna.logging.WARNING)
SMOKE_PI = {"cell": "pi", "backbone": "resnet18", "profile": "smoke", "weights": "none"}


def test_a_model_in_training_scored_on_a_fold_matches_scikit_learn(tiny_staged, tmp_path):
    cfg = trial_config(make_config(seed=0, **SMOKE_PI), 3.0, 0.4)
    torch.manual_seed(0)
    model = build_frame_model(cfg).train()          # as the epoch hook gets it
    frames, manifest = load_staged(tiny_staged)
    images = build_cache(tiny_staged, frames, size=cfg.image_size,
                         digest=manifest["data_digest"], cache_dir=tmp_path, progress=False)
    fold = calibration_fold(frames, manifest, "kvasir-val")
    got = score_on_fold(model, cfg, images, fold)
    assert model.training                            # its mode is given back
    # independently: the trained prior (alpha, lambda_eff in px), ImageNet normalisation,
    # an eval-mode forward in the fold's own order, scikit-learn one-vs-rest AUCs
    x01 = torch.from_numpy(np.asarray(images[fold.rows])).float() / 255
    prior = prior_channels(x01, alpha=cfg.prior.alpha, lambda_eff=cfg.prior.lambda_eff)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        probs = torch.softmax(model.eval()(torch.cat([(x01 - mean) / std, prior], 1)), 1).numpy()
    want = np.mean([roc_auc_score(fold.labels == c, probs[:, c]) for c in fold.classes])
    assert got == pytest.approx(want, abs=1e-6)


def test_the_epoch_hook_reports_the_target_score_of_the_model():
    seen = []

    def score(epoch, model):
        seen.append((epoch, model))
        return 0.7

    st = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    hook = epoch_reporter(st.ask(), score)
    hook(0, {"val/macro_auc": 0.2}, "the model")     # the Kvasir val metric is not the value
    assert st.trials[0].intermediate_values == {0: 0.7} and seen == [(0, "the model")]
    cut = optuna.create_study(direction="maximize",
                              pruner=optuna.pruners.ThresholdPruner(lower=0.9))
    with pytest.raises(optuna.TrialPruned, match="target fold macro-AUC 0.7000 at epoch 3"):
        epoch_reporter(cut.ask(), score)(3, {"val/macro_auc": 0.95}, None)


def test_the_study_name_binds_the_target_data():
    base = make_config(**SMOKE_PI)
    kvasir = train_study_name(base, target="kvasir-val", data_digest="d1")
    g1 = train_study_name(base, target="galar:A", data_digest="d1", target_digest="g1")
    g2 = train_study_name(base, target="galar:A", data_digest="d1", target_digest="g2")
    assert len({kvasir, g1, g2}) == 3
    assert train_study_name(trial_config(base, 9.0, 0.9), target="galar:A", data_digest="d1",
                            target_digest="g1") == g1


def test_target_data_errors_are_one_line(tiny_staged, tmp_path):
    assert galar_target_data("kvasir-val", "") is None
    with pytest.raises(ConfigError, match="only for target=galar"):
        galar_target_data("kvasir-val", str(tiny_staged))
    with pytest.raises(ConfigError, match="needs target_data="):
        galar_target_data("galar:PillCam SB3", "")
    with pytest.raises(ConfigError, match="not a staged Galar folder"):
        galar_target_data("galar:PillCam SB3", str(tmp_path))
    with pytest.raises(ConfigError, match="holds dataset 'kvasir-capsule', not galar"):
        galar_target_data("galar:PillCam SB3", str(tiny_staged))


def test_the_epoch_loop_and_the_run_tracker_hand_the_model_to_the_hook(monkeypatch, tmp_path):
    import pandas as pd

    from pipi.classes import CLASSES
    from pipi.tracking import runs
    from pipi.training.frames import fit_epochs

    class Tracker:                                    # fit_epochs' side: the model it trains
        seen: list = []

        def log_metrics(self, metrics, *, step=None, model=None):
            self.seen.append((step, model))

        def log_checkpoint(self, state):
            pass

    val = pd.DataFrame({"path": [f"v/{i}.jpg" for i in range(4)], "video_id": ["v"] * 4,
                        "frame_number": range(4), "class_index": [0, 0, 1, 1],
                        "class": [CLASSES[0]] * 2 + [CLASSES[1]] * 2})
    probs = np.full((4, len(CLASSES)), 0.05)
    model, tracker = torch.nn.Linear(1, 1), Tracker()
    fit_epochs(model, cfg=make_config(cell="a", profile="smoke", weights="none", epochs=2,
                                      patience=5),
               gen=torch.Generator().manual_seed(0), train_epoch=lambda epoch, opt: 0.0,
               predict_val=lambda: probs, val_frames=val, classes=[0, 1], tracker=tracker)
    assert [s for s, _ in tracker.seen] == [0, 1] and all(m is model for _, m in tracker.seen)
    # RunTracker's side: the hook gets (epoch, metrics, model) after the metrics are logged
    got = []
    with MemoryRun() as run:
        rt = runs.RunTracker(run, tmp_path,
                             epoch_hook=lambda e, m, mdl: got.append((e, dict(m), mdl)))
        rt.log_metrics({"val/macro_auc": 0.5}, step=2, model=model)
        rt.log_metrics({"test/macro_auc": 0.5})          # no step: not an epoch
        assert run.history == {"val/macro_auc": [(2, 0.5)], "test/macro_auc": [(0, 0.5)]}
    assert got == [(2, {"val/macro_auc": 0.5}, model)]


def test_target_data_takes_galars_synthetic_names(tmp_path, monkeypatch):
    """``target_data=synthetic-tiny`` is the staged synthetic Galar release, as for
    ``galar -P data=`` (one resolver in ``pipi.runs.data``); a bad name says which option."""
    from pipi.data.staging import stage_galar
    from pipi.data.synth import synthesize_galar

    monkeypatch.setenv("PIPI_HOME", str(tmp_path))
    staged = tmp_path / "data" / "galar-synthetic-tiny-s0"   # where the resolver stages it
    rel = synthesize_galar(tmp_path / "rel", preset="tiny", seed=0, progress=False)
    stage_galar(rel, staged, progress=False)
    got = galar_target_data("galar:PillCam SB3", "synthetic-tiny")
    assert got.root == staged and got.manifest["dataset"] == "galar"
    with pytest.raises(ConfigError, match="target_data='synthetic-huge': unknown synthetic"):
        galar_target_data("galar:PillCam SB3", "synthetic-huge")
