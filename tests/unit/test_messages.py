"""Small messages that left users stuck (issue 24, "Messages")."""

from __future__ import annotations

import warnings

import optuna

from pipi.calibration.study import open_storage


def test_opening_the_study_storage_shows_no_experimental_warning(tmp_path):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        storage = open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert storage.heartbeat_interval == 30  # the heartbeat is still on
    assert not [w for w in seen if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]


