"""A signal inside ``signals_deferred`` acts when the block is over (a child run is never
cut between being created and being ended); a second signal acts at once."""

import signal

import pytest

from pipi.tracking import signals as runs  # the signal handling (tracking/signals.py)


@pytest.fixture()
def pipi_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    runs._stopping = False
    runs.install_signal_handlers()
    yield
    runs._stopping, runs._pending, runs._deferring = False, None, 0
    for s, h in saved.items():
        signal.signal(s, h)


def test_sigterm_inside_waits_for_the_end_of_the_block(pipi_handlers):
    done = []
    with pytest.raises(runs.Terminated):
        with runs.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            done.append("created")
            done.append("ended")
    assert done == ["created", "ended"]


def test_a_second_signal_inside_acts_at_once(pipi_handlers):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with runs.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            done.append("first")
            signal.raise_signal(signal.SIGINT)
            done.append("never")
    assert done == ["first"]


def test_no_signal_no_exception(pipi_handlers):
    with runs.signals_deferred():
        pass
    assert runs._pending is None and not runs._stopping


def _study_signalled_in_tell(monkeypatch, calls: int = 1):
    """An in-memory study whose storage receives a SIGTERM while Optuna records a finished
    trial (inside ``study.tell``, outside the objective)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    real = study._storage.set_trial_state_values
    sent = []

    def set_state(trial_id, state, values=None):
        done = real(trial_id, state, values)
        if len(sent) < calls and state == optuna.trial.TrialState.COMPLETE:
            sent.append(trial_id)
            signal.raise_signal(signal.SIGTERM)
        return done

    monkeypatch.setattr(study._storage, "set_trial_state_values", set_state)
    return study


def test_a_sigterm_in_optunas_tell_acts_in_the_next_trial(pipi_handlers, monkeypatch):
    from pipi.tracking.trials import optimize_study

    study = _study_signalled_in_tell(monkeypatch)
    logged = []
    with pytest.raises(runs.Terminated):
        optimize_study(study, lambda t: t.suggest_float("x", 0, 1), n_trials=5,
                       callbacks=[lambda s, t: logged.append(t.number)])
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "FAIL"]  # trial 1's objective raised it; nothing RUNNING
    assert logged == [0]  # trial 0's child run was logged after the signal came


def test_a_sigterm_in_the_last_tell_acts_when_the_study_is_over(pipi_handlers, monkeypatch):
    from pipi.tracking.trials import optimize_study

    study = _study_signalled_in_tell(monkeypatch)
    with pytest.raises(runs.Terminated):
        optimize_study(study, lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert [t.state.name for t in study.trials] == ["COMPLETE"]


def test_without_deferral_optuna_loses_the_signal_in_tell(pipi_handlers, monkeypatch):
    """Why ``optimize_study`` exists: Optuna 5.0 replaces the KeyboardInterrupt raised in its
    ``tell`` by an UnboundLocalError (the CI failure of stop 27). If a later Optuna fixes
    this, the test says so and the deferral can be reconsidered."""
    study = _study_signalled_in_tell(monkeypatch)
    with pytest.raises((UnboundLocalError, runs.Terminated)) as got:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert got.type is UnboundLocalError, "Optuna now re-raises the interrupt itself"
