"""The zero-shot vs calibrated retention table says how `calibrate` fitted each calibrated
prior: frozen (the default, and every document from before mode=train) or train."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
from fakes import (
    split_galar_runs,
    study,  # noqa: F401  (the module fixture)
)
from test_retention import with_calibrated_children

from pipi import analysis
from pipi.analysis.retention import build_cross_vendor, run_calibrate_modes
from pipi.report import build_report


def test_modes_read_from_the_galar_param_frozen_by_default():
    runs = pd.DataFrame({"params": [json.dumps({"galar.calibrate_mode": "train"}),
                                    json.dumps({"galar.fold": "evaluation"}), "", None]})
    assert list(run_calibrate_modes(runs)) == ["train", "frozen", "frozen", "frozen"]
    assert list(run_calibrate_modes(pd.DataFrame(index=[0]))) == ["frozen"]


def _side_table(runs, dirs):
    kruns, gruns = split_galar_runs(runs)
    kept, _ = analysis.select_runs(kruns)
    ev = analysis.build_evidence(kept, dirs)
    gkept, _ = analysis.select_runs(gruns)
    cv, _ = build_cross_vendor(gkept, dirs, ev)
    cal, _ = build_cross_vendor(gkept, dirs, ev, variant="calibrated")
    opts = analysis.AggregateOptions(n_resamples=50, figures=False)
    rep = build_report(replace(ev, cross_vendor=cv, cross_vendor_calibrated=cal), opts)
    return rep.table("cross_vendor_calibrated")


def test_the_calibrated_table_is_labelled_by_mode(study, tmp_path):  # noqa: F811
    runs, dirs, _ = with_calibrated_children(study, tmp_path)
    cal = (runs["variant"] == "calibrated") & (runs["seed"] == 41)
    runs.loc[cal, "params"] = json.dumps({"galar.fold": "evaluation",
                                          "galar.calibrate_mode": "train"})
    table = _side_table(runs, dirs)       # seed 41 fitted by training, seed 42 frozen
    assert set(table.data["calibrate_mode"]) == {"frozen, train"}
    assert set(table.display["calibrate mode"]) == {"frozen, train"}
    assert any("mode=train" in n for n in table.notes)
