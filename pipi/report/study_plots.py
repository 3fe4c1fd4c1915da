"""Optuna's own plots of a ``calibrate`` study (optimisation history, alpha x lambda_eff
contour or, with lambda_eff fixed, the objective along alpha, parameter importances) in one
self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import optuna

__all__ = ["write_study_plots"]


def write_study_plots(study: optuna.Study, folder: Path) -> list[str]:
    """Optuna's own plots in one self-contained HTML (plotly.js included once, so it opens
    offline); returns notes for the plots that cannot be drawn."""
    import optuna.visualization as vis  # plotly is heavy: imported only when plotting

    notes, parts = [], []
    searched = {k for t in study.trials for k in t.params}
    plots = {"optimization history": lambda: vis.plot_optimization_history(study)}
    if "lambda_eff_fraction" in searched:
        plots["alpha x lambda_eff contour"] = lambda: vis.plot_contour(
            study, params=["alpha", "lambda_eff_fraction"])
    else:  # search=alpha: lambda_eff is fixed, the objective along alpha
        plots["alpha (lambda_eff fixed)"] = lambda: vis.plot_slice(study, params=["alpha"])
    plots["parameter importances"] = lambda: vis.plot_param_importances(study)
    for title, draw in plots.items():
        try:
            html = draw().to_html(full_html=False, include_plotlyjs=not parts)
        except Exception as exc:  # e.g. importances need two complete trials that differ
            notes.append(f"{title}: not drawn ({type(exc).__name__}: {exc})")
            continue
        parts.append(f"<h2>{title}</h2>\n{html}")
    folder.mkdir(parents=True, exist_ok=True)
    notes_html = "".join(f"<p>{n}</p>" for n in notes)
    (folder / "plots.html").write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{study.study_name}</title>"
        f"</head><body><h1>Optuna study {study.study_name}</h1>{notes_html}"
        + "\n".join(parts) + "</body></html>\n")
    return notes
