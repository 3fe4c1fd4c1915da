"""calibrate mode=train, the pure parts: epochs option, study name, the trial's
configuration, the objective against scikit-learn, pruning from the epoch hook, the table."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from pipi.calibration.objective import diagonal
from pipi.calibration.study import parse_epochs
from pipi.calibration.trials import (
    epoch_reporter,
    fold_macro_auc,
    trial_config,
    trials_table,
)
from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.predictions import PROB_COLUMNS
from pipi.tracking import RunRecord
from pipi.workflows.calibrate import run_calibration, train_study_name

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_epochs_auto_or_a_positive_integer():
    assert parse_epochs("auto") is None and parse_epochs(None) is None and parse_epochs("") is None
    assert parse_epochs("3") == 3 and parse_epochs(2) == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ConfigError, match="epochs="):
            parse_epochs(bad)


def test_trial_config_changes_only_the_prior():
    base = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    cfg = trial_config(base, 7.5, 0.4)
    assert cfg.prior.alpha == 7.5
    assert cfg.prior.lambda_eff == pytest.approx(0.4 * math.hypot(32, 32))
    strip = lambda c: {k: v for k, v in c.to_dict().items() if k != "prior"}
    assert strip(cfg) == strip(base)


def test_study_name_ignores_the_prior_but_not_the_recipe():
    base = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    name = train_study_name(base, target="kvasir-val", data_digest="d1")
    assert name.startswith("calibrate-train-")
    assert train_study_name(trial_config(base, 2.0, 0.5), target="kvasir-val",
                            data_digest="d1") == name
    other = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none",
                        epochs=3)
    assert train_study_name(other, target="kvasir-val", data_digest="d1") != name
    assert train_study_name(base, target="kvasir-val", data_digest="d2") != name


def test_objective_matches_scikit_learn():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 200)
    p = rng.random((200, len(PROB_COLUMNS)))
    df = pd.DataFrame({"label": y, **{c: p[:, i] for i, c in enumerate(PROB_COLUMNS)}})
    want = np.mean([roc_auc_score(y == c, p[:, c]) for c in (0, 2, 3)])
    assert fold_macro_auc(df, (0, 2, 3)) == pytest.approx(want, abs=1e-12)


def test_the_epoch_hook_reports_and_prunes():
    keep = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    t = keep.ask()
    hook = epoch_reporter(t)
    hook(0, {"val/macro_auc": 0.6, "train/loss": 1.0})
    hook(1, {"val/macro_auc": float("nan")})     # not reported
    assert keep.trials[0].intermediate_values == {0: 0.6}
    cut = optuna.create_study(direction="maximize",
                              pruner=optuna.pruners.ThresholdPruner(lower=0.9))
    with pytest.raises(optuna.TrialPruned, match="epoch 0"):
        epoch_reporter(cut.ask())(0, {"val/macro_auc": 0.5})


def test_trials_table_has_params_objective_and_run():
    st = optuna.create_study(direction="maximize")
    st.enqueue_trial({"alpha": 4.0, "lambda_eff_fraction": 0.25})

    def obj(trial):
        trial.suggest_float("alpha", 1, 12, log=True)
        trial.suggest_float("lambda_eff_fraction", 0.1, 1.0)
        trial.set_user_attr("run_id", "r" * 32)
        trial.set_user_attr("reused", trial.number == 1)
        return 0.5 + trial.number / 10

    st.optimize(obj, n_trials=2)
    table = trials_table(st.trials, image_size=64)
    assert list(table["trial"]) == [0, 1] and list(table["state"]) == ["COMPLETE"] * 2
    assert table.loc[0, "alpha"] == 4.0
    assert table.loc[0, "lambda_eff"] == pytest.approx(0.25 * diagonal(64))
    assert list(table["objective"]) == [0.5, 0.6] and list(table["reused"]) == [False, True]
    assert set(table["run_id"]) == {"r" * 32}


@pytest.mark.parametrize("kw, match", [
    ({"mode": "tuned"}, "mode='tuned' is unknown"),
    ({"mode": "frozen"}, "mode=frozen needs run="),
    ({"mode": "frozen", "run": "0" * 32, "epochs": 3}, "only for mode=train"),
    ({"mode": "train", "target": "galar:PillCam SB3", "train_fn": print},
     "mode=train needs target_data="),
    ({"mode": "frozen", "run": "0" * 32, "target_data": "/x"}, "only for mode=train"),
    ({"mode": "train", "executor": "k8s"}, "executor='k8s' is unknown"),
    ({"mode": "train", "epochs": "0", "train_fn": print}, "epochs="),
])
def test_bad_options_are_one_clear_line(kw, match):
    args = {"target": "kvasir-val", **kw}
    with pytest.raises(ConfigError, match=match):
        run_calibration(**args)


def test_prior_params_carry_their_mode():
    from pipi.calibration.objective import PriorParams, parse_prior_params, prior_params_document

    doc = prior_params_document(PriorParams(3.0, 0.3), image_size=64, mode="train")
    assert parse_prior_params(doc, "x").mode == "train"
    del doc["mode"]                                   # a document from before mode=train
    assert parse_prior_params(doc, "x").mode == "frozen"
    with pytest.raises(ConfigError, match="mode 'tuned' is unknown"):
        parse_prior_params({**doc, "mode": "tuned"}, "x")


# --------------------------------------------------------------------------- issue 28: search
def _target_fn(alpha, frac):
    """A known objective with its maximum at alpha 5, fraction 0.5."""
    return -(math.log(alpha) - math.log(5.0)) ** 2 - (frac - 0.5) ** 2


def _run_train_trials(monkeypatch, search, n):
    """mode=train trials through the real trial function, with the training and the MLflow
    lookup replaced: each trial 'reuses' a run whose value is _target_fn of its prior."""
    from pipi.calibration.study import grid_axes
    from pipi.calibration.trials import TrialSpec, WorkerResult
    from pipi.runs import calibrate as ct

    base = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    cfgs = {}
    real_config = ct.trial_config

    def trial_config_spy(b, alpha, frac):
        cfg = real_config(b, alpha, frac)
        cfgs[len(cfgs)] = cfg
        return cfg

    monkeypatch.setattr(ct, "trial_config", trial_config_spy)
    monkeypatch.setattr(ct.tracking, "find_finished_run",
                        lambda key, **tags: RunRecord(run_id=key))

    def value(rid, spec, target):
        cfg = cfgs[len(cfgs) - 1]
        return _target_fn(cfg.prior.alpha, cfg.prior.lambda_eff / diagonal(cfg.image_size))

    monkeypatch.setattr(ct, "_value", value)
    spec = TrialSpec(mode="train", index=0, n_trials=n, study="s", storage="", sampler="grid",
                     pruner="none", seed=0, parent_run_id="p" * 32, tracking_uri="",
                     code_version="c", data="", data_digest="d", fold_classes=(0, 1),
                     base_config=base.to_dict(), search=search)
    st = optuna.create_study(direction="maximize",
                             sampler=optuna.samplers.GridSampler(grid_axes(n, search), seed=0))
    result = WorkerResult(0, "w")
    st.optimize(lambda t: ct._train_trial(t, spec, result, None), n_trials=n)
    return st, list(cfgs.values()), base, spec


def test_search_auto_is_alpha_for_mode_train_and_both_for_frozen():
    from pipi.calibration.objective import parse_search

    assert parse_search("auto", mode="train") == ("alpha",)
    assert parse_search("auto", mode="frozen") == ("alpha", "lambda_eff")
    assert parse_search("lambda_eff, alpha", mode="train") == ("alpha", "lambda_eff")
    with pytest.raises(ConfigError, match="search='lambda_eff'"):
        parse_search("lambda_eff", mode="train")


def test_mode_train_fits_alpha_with_lambda_eff_fixed_by_default(monkeypatch):
    """The paper fits alpha; lambda_eff stays 0.25 x the diagonal. The best trial is the grid
    point a brute-force search over the same alpha grid (numpy) finds."""
    from pipi.calibration.objective import parse_search

    search = parse_search("auto", mode="train")
    st, cfgs, base, spec = _run_train_trials(monkeypatch, search, 9)
    assert all(set(t.params) == {"alpha"} for t in st.trials)
    assert [c.prior.lambda_eff for c in cfgs] == pytest.approx(
        [0.25 * diagonal(base.image_size)] * 9)
    grid = np.geomspace(1.0, 12.0, 9)
    want = grid[np.argmax([_target_fn(a, 0.25) for a in grid])]
    best = spec.space().values(st.best_trial.params)
    assert best["alpha"] == pytest.approx(want) and best["lambda_eff_fraction"] == 0.25
    table = trials_table(st.trials, image_size=base.image_size, space=spec.space())
    assert table["lambda_eff"].tolist() == pytest.approx([0.25 * diagonal(base.image_size)] * 9)


def test_search_alpha_and_lambda_eff_fits_both(monkeypatch):
    st, cfgs, _, _ = _run_train_trials(monkeypatch, ("alpha", "lambda_eff"), 16)
    assert all(set(t.params) == {"alpha", "lambda_eff_fraction"} for t in st.trials)
    alphas, fracs = np.geomspace(1.0, 12.0, 4), np.linspace(0.1, 1.0, 4)
    scores = [(_target_fn(a, f), a, f) for a in alphas for f in fracs]
    _, a, f = max(scores)
    assert st.best_trial.params == pytest.approx({"alpha": a, "lambda_eff_fraction": f})
    assert len({c.prior.lambda_eff for c in cfgs}) == 4


def test_study_name_binds_the_search_space():
    base = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none")
    both = train_study_name(base, target="kvasir-val", data_digest="d1")
    assert train_study_name(base, target="kvasir-val", data_digest="d1",
                            search=("alpha", "lambda_eff")) == both   # studies made before
    assert train_study_name(base, target="kvasir-val", data_digest="d1",
                            search=("alpha",)) != both


def test_a_bad_search_is_one_clear_line():
    with pytest.raises(ConfigError, match="search='phi'"):
        run_calibration(mode="train", target="kvasir-val", search="phi", train_fn=print)


def test_study_plots_of_an_alpha_only_search(tmp_path):
    from pipi.report.study_plots import write_study_plots

    st = optuna.create_study(direction="maximize")
    st.optimize(lambda t: _target_fn(t.suggest_float("alpha", 1, 12, log=True), 0.25),
                n_trials=4)
    assert write_study_plots(st, tmp_path) == []
    html = (tmp_path / "plots.html").read_text()
    assert html.count("<h2>") == 3 and "alpha (lambda_eff fixed)" in html


def test_a_trial_value_leaves_no_downloaded_predictions_behind(monkeypatch, tmp_path):
    """mode=train reads each trial run's val predictions through a folder it removes (the
    old code kept a pipi-caltrain-<pid> folder per worker in /tmp for good); the value is the
    fold's macro-AUC as scikit-learn computes it."""
    from pipi.predictions import predictions_frame, write_predictions
    from pipi.runs import calibrate as ct

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 8)
    probs = rng.dirichlet(np.ones(3), size=labels.size)
    frames = pd.DataFrame({"path": [f"v/{i}.jpg" for i in range(labels.size)],
                           "video_id": "v", "frame_number": np.arange(labels.size),
                           "class_index": labels, "class": [f"c{k}" for k in labels]})
    seen = []

    def download(run_id, path, dst=None):
        seen.append(Path(dst))
        return write_predictions({"val": predictions_frame(frames, probs)}, Path(dst) / path,
                                 classes=("c0", "c1", "c2"))

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    from pipi.tracking import runs as tracking_runs

    monkeypatch.setattr(tracking_runs, "download_artifact", download)
    spec = SimpleNamespace(fold_classes=(0, 2))
    got = ct._value("r" * 32, spec, None)
    want = np.mean([roc_auc_score(labels == k, probs[:, k]) for k in (0, 2)])
    assert got == pytest.approx(want, abs=1e-6)
    assert seen and seen[0].parent == tmp and not any(tmp.iterdir())
