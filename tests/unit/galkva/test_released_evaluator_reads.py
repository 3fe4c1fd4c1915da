"""Submissions pipi writes, read as the benchmark's released ``benchmark/evaluate.py`` reads
them, including ones built from imported (released) runs.

The released evaluator checks four top-level keys and ``results.<ds>.macro_auc.mean``, then
indexes ``method['name']``, ``method['description']``, ``submitter['name']``,
``submitter['affiliation']``, ``submitter['email']`` and ``benchmark_version`` directly and
prints the retention as ``delta_vs_rgb_baseline`` of Galar over Kvasir, with two decimals and
a sign. Those reads are written again here (not imported from anywhere).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import (
    evidence,
    study,  # noqa: F401  (the module fixture)
)

from pipi.analysis import mark_imported
from pipi.analysis.retention import galkva_runs
from pipi.errors import ConfigError
from pipi.galkva import MethodInfo, Submitter, build_submission, recompute


def released_evaluator_retention(sub: dict) -> str:
    """The released evaluator's field reads: a KeyError where a field it indexes is absent;
    returns the retention text it prints."""
    for key in ("submitter", "method", "benchmark_version", "results"):
        assert key in sub, key
    for ds in ("kvasir", "galar"):
        assert "mean" in sub["results"][ds]["macro_auc"], ds
    method, who = sub["method"], sub["submitter"]
    _ = (method["name"], method["description"], who["name"], who["affiliation"], who["email"],
         sub["benchmark_version"])
    dk = sub["results"]["kvasir"].get("delta_vs_rgb_baseline")
    dg = sub["results"]["galar"].get("delta_vs_rgb_baseline")
    if dk is None or dg is None:
        return "n/a (provide delta_vs_rgb_baseline in both datasets)"
    if dk == 0:
        return "n/a (Δ_Kvasir = 0)"
    return f"{dg / dk:+.2f}"


def _imported(study, label="released"):  # noqa: F811
    """The study's runs as `import` runs of a source label and their `galar` children, marked
    as `aggregate` and `galkva submission --experiment` mark them."""
    runs = study["runs"].copy()
    runs["entry_point"] = np.where(runs["study"] == "galar", "galar", "import")
    runs["tags"] = json.dumps({"pipi.source": "external", "pipi.source_label": label})
    return evidence(study, mark_imported(runs))


def test_a_submission_from_imported_runs_reads_as_the_released_evaluator_reads_it(
        study):  # noqa: F811
    ev, cv, _ = _imported(study)
    runs = galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a (released)",
                       method="pi (released)")
    rec = recompute(runs, n_resamples=100, rng=0)
    doc = build_submission(
        rec, submitter=Submitter("A. Tester", "Lab", "a@example.org"),
        method=MethodInfo("pipi pi vs a (efficientnet_b0, released)",
                          "imported released checkpoints scored zero-shot on Galar"))
    text = json.loads(json.dumps(doc))            # as the evaluator loads the written file
    assert released_evaluator_retention(text) == f"{rec.retention.value:+.2f}"
    assert doc["provenance"]["runs"]["kvasir"]["method"]["42"] == "kpi42".ljust(32, "0")
    # the trained arms are not there: imported runs never stand in for them
    with pytest.raises(Exception, match="no runs of"):
        galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a", method="pi")


@pytest.mark.parametrize("who, what, lacking", [
    (Submitter("", "Lab", "a@example.org"), None, "submitter.name"),
    (Submitter("A. Tester", " ", "a@example.org"), None, "submitter.affiliation"),
    (Submitter("A. Tester", "Lab", "a@example.org"), MethodInfo("", "x" * 30), "method.name"),
    (Submitter("A. Tester", "Lab", ""), MethodInfo("m", ""), "submitter.email, method.name"),
])
def test_a_submission_without_a_field_the_evaluator_indexes_is_refused_in_one_line(
        study, who, what, lacking):  # noqa: F811
    ev, cv, _ = evidence(study)
    rec = recompute(galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a", method="pi"),
                    n_resamples=50, rng=0)
    what = what or MethodInfo("pipi pi vs a", "a long enough description here")
    with pytest.raises(ConfigError, match="a submission needs " + lacking.split(",")[0]) as err:
        build_submission(rec, submitter=who, method=what)
    assert "\n" not in str(err.value)


def test_galkva_submission_label_takes_the_imported_arms_and_writes_what_the_evaluator_reads(
        study, tmp_path, monkeypatch):  # noqa: F811
    """`pipi galkva submission --experiment E --label released`: the arms 'pi (released)' and
    'a (released)' (the MLflow read replaced by the study's runs); the written file has every
    field the released evaluator indexes and its retention is pipi's."""
    import importlib

    from click.testing import CliRunner

    cli = importlib.import_module("pipi.cli.galkva")  # the module (pipi.cli names the group)

    ev, cv, _ = _imported(study)
    asked = {}

    def fake_runs(experiment, *, method, baseline, backbone, filter_string=""):
        asked.update(method=method, baseline=baseline)
        return galkva_runs(ev, cv, backbone=backbone, baseline=baseline, method=method)

    monkeypatch.setattr(cli, "experiment_galkva_runs", fake_runs)
    monkeypatch.setattr(cli.tracking, "configure", lambda: None)
    out = tmp_path / "sub.json"
    r = CliRunner().invoke(cli.galkva, [
        "submission", "--experiment", "released-import", "--label", "released", "--out",
        str(out), "--submitter-name", "A. Tester", "--affiliation", "Lab", "--email",
        "a@example.org", "--n-resamples", "100", "--seed", "0"])
    assert r.exit_code == 0, r.output
    assert asked == {"method": "pi (released)", "baseline": "a (released)"}
    doc = json.loads(out.read_text())
    assert "released" in doc["method"]["name"] and "imported" in doc["method"]["description"]
    rec = recompute(galkva_runs(ev, cv, backbone="efficientnet_b0", baseline="a (released)",
                                method="pi (released)"), n_resamples=100, rng=0)
    assert released_evaluator_retention(doc) == f"{rec.retention.value:+.2f}"
