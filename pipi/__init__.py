"""pipi: training-time optical priors for wireless capsule endoscopy, on MLflow."""

__version__ = "0.1.0"
