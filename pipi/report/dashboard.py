"""The self-contained HTML dashboard of ``aggregate`` (template: ``dashboards/aggregate.html``).

Pure rendering of a :class:`pipi.report.build.Report`: inline CSS, figures embedded as base64
PNG, no network access. Every table row lists the run ids behind its numbers, linked to the
MLflow UI (``<uri>/#/experiments/<id>/runs/<run id>``) when the tracking server is http(s).
A small inline script checks, on load, that every figure decoded and every table has rows;
it reports problems with ``console.error("pipi-dashboard-error: ...")`` and sets
``<body data-selfcheck="ok|failed">``.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from string import Template

from pipi.errors import PipiError
from pipi.report.tables import Table

#: The template, at the repository root (the package is installed editable).
TEMPLATE = Path(__file__).resolve().parents[2] / "dashboards" / "aggregate.html"


#: The UI's model-training view (pipi.tracking.ui.ML_VIEW_QUERY; this layer is below it).
ML_VIEW_QUERY = "workflowType=machine_learning"


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """Link to a run in the MLflow UI's model-training view, or None when the tracking URI is
    not http(s)."""
    if not tracking_uri.startswith(("http://", "https://")) or not experiment_id:
        return None
    return (f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
            f"?{ML_VIEW_QUERY}")


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _run_links(ids: Mapping[str, Mapping[int, str]], uri: str, eid: str) -> str:
    parts = []
    for arm, seeds in ids.items():
        links = []
        for seed, rid in sorted(seeds.items()):
            url = run_url(uri, eid, rid)
            text = f"s{seed}:{rid[:8]}"
            links.append(f'<a href="{_esc(url)}" title="{_esc(rid)}" target="_top">{_esc(text)}</a>'
                         if url else f'<code title="{_esc(rid)}">{_esc(text)}</code>')
        parts.append(f"<b>{_esc(arm)}</b> " + " ".join(links) if links else f"<b>{_esc(arm)}</b> -")
    return "<br>".join(parts)


def table_html(table: Table, *, tracking_uri: str = "", experiment_id: str = "") -> str:
    """One ``<section>``: title, the table (with a run-id column) or its 'no runs' reason, notes."""
    out = [f'<section id="t-{_esc(table.key)}">', f"<h2>{_esc(table.title)}</h2>"]
    if table.paper:
        out.append(f'<p class="paper">paper: {_esc(table.paper)} &middot; files: '
                   f"tables/{_esc(table.key)}.csv, tables/{_esc(table.key)}.md</p>")
    if not table.ok:
        out.append(f'<p class="no-runs">{_esc(table.status)}</p>')
    elif table.display.empty:
        out.append("<p>none</p>")
    else:
        cols = [str(c) for c in table.display.columns]
        head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
        if table.run_ids:
            head += "<th>runs (seed:run id)</th>"
        body = []
        for i, row in enumerate(table.display.itertuples(index=False)):
            cells = "".join(f'<td class="num">{_esc(v)}</td>' for v in row)
            if table.run_ids:
                cells += (f'<td class="runs">'
                          f"{_run_links(table.run_ids[i], tracking_uri, experiment_id)}</td>")
            body.append(f"<tr>{cells}</tr>")
        out.append(f'<div class="table-wrap"><table class="pipi" data-key="{_esc(table.key)}">'
                   f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")
    if table.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in table.notes)
                   + "</ul>")
    out.append("</section>")
    return "\n".join(out)


def render_dashboard(report, *, meta: Mapping | None = None, template: Path | None = None) -> str:
    """The dashboard HTML of an aggregate ``Report`` (``meta`` defaults to ``report.meta``)."""
    path = Path(template) if template else TEMPLATE
    try:
        tpl = Template(path.read_text())
    except OSError as exc:
        raise PipiError(f"dashboard template {path} not readable ({exc}); it ships in the "
                        "repository's dashboards/ folder") from None
    meta = dict(meta or report.meta)
    uri, eid = str(meta.get("tracking_uri", "")), str(meta.get("experiment_id", ""))
    agg_id = meta.get("aggregate_run_id") or ""
    agg_url = run_url(uri, str(meta.get("aggregate_experiment_id") or eid), agg_id) \
        if agg_id else None
    header = {
        "experiment": f"{meta.get('experiment', '')} (id {eid})",
        "filter": meta.get("filter") or "(none)",
        "tracking URI": uri or "(unknown)",
        "data digest": meta.get("data_digest") or "(none)",
        "headline classes": ", ".join(meta.get("headline_classes",
                                               meta.get("evaluable_classes", []))),
        "test frames / videos": f"{meta.get('n_test_frames', '')} / "
                                f"{len(meta.get('test_videos', []))}",
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in header.items())
    if agg_id:
        link = (f'<a href="{_esc(agg_url)}" target="_top">{_esc(agg_id)}</a>' if agg_url
                else _esc(agg_id))
        dl += f"<dt>aggregate run</dt><dd>{link}</dd>"
    tables = [t for t in report.tables]
    empty = ' class="empty"'
    nav = " ".join(f'<a href="#t-{_esc(t.key)}"{"" if t.ok else empty}>{_esc(t.key)}</a>'
                   for t in tables) + ' <a href="#figures">figures</a>'
    figs = []
    for name, png in report.figures.items():
        b64 = base64.b64encode(png).decode("ascii")
        cap = report.captions.get(name, name)
        runs = report.figure_runs.get(name, {})
        figs.append(f'<figure id="f-{_esc(name)}"><img class="pipi-fig" alt="{_esc(name)}" '
                    f'src="data:image/png;base64,{b64}"><figcaption>{_esc(cap)}'
                    f'<br><span class="runs">runs: {_run_links(runs, uri, eid)}</span>'
                    "</figcaption></figure>")
    if not figs:
        figs.append('<p class="no-runs">no figures</p>')
    n_tables = sum(1 for t in tables if t.ok and not t.display.empty)
    return tpl.substitute(
        title=_esc(meta.get("experiment", "")), header=dl, nav=nav,
        summary=_esc(report.summary),
        tables="\n".join(table_html(t, tracking_uri=uri, experiment_id=eid) for t in tables),
        figures="\n".join(figs), expected_tables=n_tables, expected_figures=len(report.figures))
