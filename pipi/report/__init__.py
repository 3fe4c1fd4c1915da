"""Rendering of aggregate results: tables (Markdown, CSV, JSON), figures and the dashboard.

Everything here is a pure function of already computed results: no MLflow, no statistics.
"""

from pipi.report.tables import (
    Table,
    fmt_auc,
    fmt_ci,
    fmt_delta,
    fmt_mean_sd,
    fmt_p,
    fmt_z,
    json_safe,
    table_markdown,
)

__all__ = [
    "Table", "fmt_auc", "fmt_ci", "fmt_delta", "fmt_mean_sd", "fmt_p", "fmt_z", "json_safe",
    "table_markdown",
]
