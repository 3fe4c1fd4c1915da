"""The report of ``aggregate``: the paper's tables, figures and the dashboard, built from an
:class:`pipi.analysis.Analysis` (pure: no MLflow, no statistics of its own, no files).

``build`` assembles everything (:func:`build_report`); ``run_tables``, ``headline``,
``per_class``, ``breakdown``, ``channels`` and ``pi_tta`` hold one function per table,
``rows`` their shared columns, ``curves`` the figures' data, ``figures`` the PNGs, ``tables``
the table model and its Markdown/CSV/JSON forms, ``dashboard`` the HTML page.
"""

from pipi import lazy_face

#: The face's names and the submodule each comes from: imported on first use (PEP 562, as
#: :mod:`pipi.tracking` does), so a module that needs one figure (``pipi predict``'s
#: timeline) does not load the whole report, its statistics and scipy.
_WHERE = {
    "Report": "build", "build_report": "build",
    **{n: "tables" for n in ("Table", "fmt_auc", "fmt_ci", "fmt_delta", "fmt_mean_sd", "fmt_p",
                             "fmt_z", "json_safe", "table_markdown")},
}


__getattr__, __dir__ = lazy_face(__name__, _WHERE, submodules=True)

__all__ = ["Report", "Table", "build_report", "fmt_auc", "fmt_ci", "fmt_delta", "fmt_mean_sd",
           "fmt_p", "fmt_z", "json_safe", "table_markdown"]
