"""The report of ``aggregate``: the paper's tables, figures and the dashboard, built from an
:class:`pipi.analysis.Analysis` (pure: no MLflow, no statistics of its own, no files).

``build`` assembles everything (:func:`build_report`); ``run_tables``, ``headline``,
``per_class``, ``breakdown``, ``channels`` and ``pi_tta`` hold one function per table,
``rows`` their shared columns, ``curves`` the figures' data, ``figures`` the PNGs, ``tables``
the table model and its Markdown/CSV/JSON forms, ``dashboard`` the HTML page.
"""

from pipi.report.build import Report, build_report
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
    "Report", "Table", "build_report", "fmt_auc", "fmt_ci", "fmt_delta", "fmt_mean_sd", "fmt_p",
    "fmt_z", "json_safe", "table_markdown",
]
