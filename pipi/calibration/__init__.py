"""Calibrating the analytic prior: the objective and its folds
(:mod:`pipi.calibration.objective`), the Optuna study around it
(:mod:`pipi.calibration.study`) and its trials of either mode, frozen or train
(:mod:`pipi.calibration.trials`: one worker spec, its result, the outcome). Library code: no
MLflow; the runs the trials log or train are :mod:`pipi.runs.calibrate`'s."""
