"""Workflows: one module per entry point, each owning its parent MLflow run."""
