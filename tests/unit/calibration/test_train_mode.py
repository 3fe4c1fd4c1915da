"""calibrate mode=train, the pure parts: epochs option, study name, the trial's
configuration, the objective against scikit-learn, pruning from the epoch hook, the table."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from pipi.calibration.objective import diagonal
from pipi.calibration.study import parse_epochs
from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.predictions import PROB_COLUMNS
from pipi.sweeps.calibrate_trials import (
    _epoch_reporter,
    fold_macro_auc,
    trial_config,
    trials_table,
)
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
    hook = _epoch_reporter(t)
    hook(0, {"val/macro_auc": 0.6, "train/loss": 1.0})
    hook(1, {"val/macro_auc": float("nan")})     # not reported
    assert keep.trials[0].intermediate_values == {0: 0.6}
    cut = optuna.create_study(direction="maximize",
                              pruner=optuna.pruners.ThresholdPruner(lower=0.9))
    with pytest.raises(optuna.TrialPruned, match="epoch 0"):
        _epoch_reporter(cut.ask())(0, {"val/macro_auc": 0.5})


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
