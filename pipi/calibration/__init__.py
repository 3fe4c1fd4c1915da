"""Calibrating the analytic prior: the objective and its folds
(:mod:`pipi.calibration.objective`) and the Optuna study around it
(:mod:`pipi.calibration.study`). Library code: no MLflow."""
