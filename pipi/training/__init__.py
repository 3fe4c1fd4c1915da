"""Fitting: per-frame cells (:mod:`pipi.training.frames`) and sequence cells on a frozen
per-frame backbone (:mod:`pipi.training.sequence`). Library code: no MLflow."""
