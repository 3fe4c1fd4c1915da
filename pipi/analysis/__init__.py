"""Analysis: arms, run selection, evidence loading and comparisons (pure; no mlflow)."""
