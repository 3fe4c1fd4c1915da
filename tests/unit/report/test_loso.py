"""The leave-one-source-out table (issue 29 part 3) against an independent computation.

Fake runs of a 4-class, 3-source dataset in the exact predictions format `train` writes:
`a` and `pi` trained on every source (scored on every source's test frames) and trained on
X and Y only (params train_sources=X,Y, test_sources=Z: scored on Z's frames). Every number
of the table is recomputed here from the predictions: macro-AUCs with scikit-learn, means
with numpy, the video bootstrap by replaying its resamples (tests/brute.py), the seed-level
BCa with scipy.stats.bootstrap, the retention's interval from the two replays' paired draws.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from brute import replay_delta_bootstrap
from scipy import special, stats
from sklearn.metrics import roc_auc_score

from pipi import analysis
from pipi.analysis.loso import build_heldout, select_heldout_runs, split_heldout_runs
from pipi.galkva import retention_band
from pipi.predictions import predictions_frame, write_predictions
from pipi.report.build import build_report
from pipi.report.loso import loso_table
from pipi.report.sources import per_source_table

NAMES = ("Angioectasia", "Bleeding", "Normal", "Polyp")
SOURCES = ("X", "Y", "Z")
SEEDS = (1, 2, 3)
HELD = {"train_sources": "X,Y", "test_sources": "Z"}
OPTS = analysis.AggregateOptions(n_resamples=150, figures=False)
B0 = "efficientnet_b0"


def _frames(split: str, seed: int) -> pd.DataFrame:
    """Per source 4 videos of 24 frames, every class in every video."""
    rng = np.random.default_rng(seed)
    rows = []
    for src in SOURCES:
        for v in range(4):
            lab = rng.integers(0, len(NAMES), 24)
            lab[:len(NAMES)] = range(len(NAMES))
            rows += [{"path": f"{split}/{NAMES[k]}/{src}/{src}{v}_{f:03d}.jpg",
                      "video_id": f"{src}{v}", "frame_number": f, "class_index": int(k),
                      "class": NAMES[k], "source": src} for f, k in enumerate(lab)]
    return pd.DataFrame(rows)


TEST, VAL = _frames("test", 0), _frames("val", 1)


def _probs(frames: pd.DataFrame, quality: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = frames["class_index"].to_numpy()
    return special.softmax(rng.normal(size=(len(y), len(NAMES)))
                           + quality * np.eye(len(NAMES))[y], axis=1)


#: (cell, held out?) -> how well the arm separates the classes
QUALITY = {("a", False): 1.0, ("pi", False): 1.6, ("a", True): 0.8, ("pi", True): 1.1}


def _run(tmp, cell, seed, held: bool, *, start: int = 0, sources=None) -> tuple[dict, str]:
    rid = f"{cell}{seed}{'h' if held else 'e'}{start}".ljust(32, "0")
    test = TEST[TEST["source"] == "Z"] if held else TEST
    val = VAL[VAL["source"].isin(["X", "Y"])] if held else VAL
    q = QUALITY[(cell, held)]
    off = 100 * seed + 10 * held + (cell == "pi")
    folder = write_predictions({"test": predictions_frame(test, _probs(test, q, off)),
                                "val": predictions_frame(val, _probs(val, q, off + 5))},
                               tmp / rid / "predictions", classes=NAMES)
    opts = {"cell": cell, "seed": str(seed), "profile": "smoke",
            **((sources or HELD) if held else {})}
    row = {"run_id": rid, "experiment_id": "1", "run_name": rid, "status": "FINISHED",
           "start_time": start + seed, "entry_point": "train", "cell": cell, "backbone": B0,
           "seed": seed, "data_digest": "d" * 64, "dataset": "images", "study": "",
           "variant": "", "base_run_id": "", "parent_run_id": "", "code_version": "",
           "test_macro_auc": float("nan"), "evaluable_classes": "",
           "test_classes": json.dumps(list(NAMES)), "val_classes": json.dumps(list(NAMES)),
           "recipe": "mlflow run . -e train " + " ".join(f"-P {k}={v}" for k, v in opts.items()),
           "recipe_hash": "", "failure_reason": "", "params": json.dumps(opts)}
    return row, folder


def _evidence(tmp, arms: dict, sources=None):
    """As ``runs.evidence.load_evidence`` reads a store: arms (cell, held) -> seeds;
    ``sources``: (cell, held) -> the held-out runs' train/test sources (default HELD)."""
    rows, dirs = [], {}
    for i, ((cell, held), seeds) in enumerate(arms.items()):
        for s in seeds:
            row, folder = _run(tmp, cell, s, held, start=100 * i,
                               sources=(sources or {}).get((cell, held)))
            rows.append(row)
            dirs[row["run_id"]] = folder
    runs = pd.DataFrame(rows)
    runs["seed"] = runs["seed"].astype("Int64")
    everywhere, heldout = split_heldout_runs(runs)
    kept, excluded = analysis.select_runs(everywhere)
    ev = analysis.build_evidence(kept, dirs, excluded=excluded)
    if heldout.empty:
        return ev
    hkept, hexcl = select_heldout_runs(heldout)
    return replace(ev, held_out=build_heldout(hkept, dirs, ev, excluded=hexcl))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    ev = _evidence(tmp_path_factory.mktemp("loso"),
                   {(c, h): SEEDS for c in ("a", "pi") for h in (False, True)})
    an = analysis.Analysis(ev, OPTS)
    return ev, {"per_source": per_source_table(an), "leave_one_source_out": loso_table(an)}


def _loso(ev):
    return loso_table(analysis.Analysis(ev, OPTS))


def _macro(y, p):
    ks = [k for k in range(len(NAMES)) if 0 < (y == k).sum() < y.size]
    return np.mean([roc_auc_score(y == k, p[:, k]) for k in ks])


def _side(ev, mask):
    """(per-seed macro-AUC of a, of pi, (S, N, C) probs of a, of pi) on the masked frames."""
    a, pi = (ev.arm(B0, c) for c in ("a", "pi"))
    y = ev.labels[mask]
    pa = np.stack([a.probs[a.index(s)][mask] for s in SEEDS]).astype(float)
    pp = np.stack([pi.probs[pi.index(s)][mask] for s in SEEDS]).astype(float)
    return (np.array([_macro(y, p) for p in pa]), np.array([_macro(y, p) for p in pp]), pa, pp)


def test_the_held_out_runs_never_join_the_arms_of_the_runs_on_every_source(full):
    ev, rep = full
    (cond,) = ev.held_out.conditions
    assert len(ev.runs) == len(cond.evidence.runs) == 6
    assert not set(ev.runs["run_id"]) & set(cond.evidence.runs["run_id"])
    assert set(ev.sources) == set(SOURCES)
    assert cond.train_sources == ("X", "Y") and cond.held_out() == ["Z"]
    assert set(cond.evidence.sources) == {"Z"}
    assert rep["per_source"].status == "ok"


def test_the_loso_table_equals_sklearn_numpy_the_replayed_bootstrap_and_scipy(full):
    ev, rep = full
    t = rep["leave_one_source_out"]
    assert t.status == "ok" and len(t.data) == 1
    row = t.data.iloc[0]
    assert (row["held_out_source"], row["reference"], row["new"]) == ("Z", "a", "pi")
    assert row["condition"] == "train X,Y -> test Z" and row["n_seeds"] == 3
    hev = ev.held_out.conditions[0].evidence
    im = ev.sources == "Z"
    ia, ip, ipa, ipp = _side(ev, im)
    ha, hp, hpa, hpp = _side(hev, np.ones(hev.labels.size, bool))
    np.testing.assert_array_equal(ev.labels[im], hev.labels)
    for col, want in (("in_source_ref_macro_auc", ia.mean()), ("in_source_new_macro_auc",
    ip.mean()),
                      ("held_out_ref_macro_auc", ha.mean()), ("held_out_new_macro_auc", hp.mean()),
                      ("in_source_delta", (ip - ia).mean()), ("held_out_delta", (hp - ha).mean()),
                      ("in_source_delta_sd", np.std(ip - ia, ddof=1)),
                      ("retention", (hp - ha).mean() / (ip - ia).mean())):
        assert abs(row[col] - want) < 1e-9, col
    assert row["band"] == retention_band(row["retention"])
    # the per-source table's in-source numbers for Z are the same
    ps = rep["per_source"].data.set_index(["reference", "new", "source"])
    assert abs(ps.loc[("a", "pi", "Z"), "lift"] - row["in_source_delta"]) < 1e-9
    # the video bootstrap: both deltas replayed with the row's seed draw the same videos
    y, videos, cls = hev.labels, hev.videos, list(range(len(NAMES)))
    seed, n = int(row["bootstrap_seed"]), OPTS.n_resamples
    rin = replay_delta_bootstrap(y, ipa, ipp, cls, n_resamples=n, rng=seed, videos=videos)
    rout = replay_delta_bootstrap(y, hpa, hpp, cls, n_resamples=n, rng=seed, videos=videos)
    assert row["in_source_bootstrap_unit"] == "videos"
    for prefix, ref in (("in_source", rin), ("held_out", rout)):
        assert abs(row[f"{prefix}_delta"] - ref["statistic"]) < 1e-9
        np.testing.assert_allclose([row[f"{prefix}_ci_percentile_low"],
                                    row[f"{prefix}_ci_percentile_high"]], ref["percentile"],
                                   atol=1e-9)
        np.testing.assert_allclose([row[f"{prefix}_ci_bca_low"], row[f"{prefix}_ci_bca_high"]],
                                   ref["bca"], atol=1e-9)
    ratio = rout["star"] / rin["star"]
    ratio = ratio[rin["star"] > 0]
    np.testing.assert_allclose([row["retention_ci_low"], row["retention_ci_high"]],
                               np.percentile(ratio, [2.5, 97.5]), atol=1e-9)
    assert row["n_ratio_draws"] == ratio.size
    # the seed-level BCa of each delta: scipy over the per-seed deltas
    for prefix, d in (("in_source", ip - ia), ("held_out", hp - ha)):
        sp = stats.bootstrap((d,), np.mean, n_resamples=n, method="BCa",
                             rng=np.random.default_rng(OPTS.seed))
        assert abs(row[f"{prefix}_seed_ci_bca_low"] - sp.confidence_interval.low) < 1e-9
        assert abs(row[f"{prefix}_seed_ci_bca_high"] - sp.confidence_interval.high) < 1e-9
    disp = t.display.iloc[0]
    assert disp["held-out source"] == "Z" and disp["trained on"] == "X,Y"
    assert {"Δ in-source 95% BCa CI (videos)", "Δ held-out 95% BCa CI (seeds)"} <= set(t.display)
    assert t.run_ids[0]["out pi"][2] == hev.arm(B0, "pi").runs()[2]
    assert t.run_ids[0]["in a"][1] == ev.arm(B0, "a").runs()[1]


def test_identical_conditions_retain_exactly_one_under_every_draw(full):
    """The two deltas share their resamples: held-out arms that score Z's frames exactly as
    the in-source arms do give retention 1 in every draw, so its interval is [1, 1]."""
    ev, _ = full
    cond = ev.held_out.conditions[0]
    hev, im = cond.evidence, ev.sources == "Z"
    arms = {(B0, c): replace(hev.arm(B0, c), probs=ev.arm(B0, c).probs[:, im])
            for c in ("a", "pi")}
    same = replace(ev.held_out, conditions=(replace(cond, evidence=replace(hev, arms=arms)),))
    row = _loso(replace(ev, held_out=same)).data.iloc[0]
    assert abs(row["retention"] - 1) < 1e-12 and row["n_ratio_draws"] == OPTS.n_resamples
    assert abs(row["retention_ci_low"] - 1) < 1e-12 and abs(row["retention_ci_high"] - 1) < 1e-12


def test_a_condition_without_runs_gets_a_note_row(tmp_path):
    ev = _evidence(tmp_path, {("a", False): SEEDS, ("a", True): SEEDS, ("pi", True): SEEDS})
    t = _loso(ev)
    assert t.status == "ok" and len(t.data) == 1
    row, disp = t.data.iloc[0], t.display.iloc[0]
    assert "in source: no runs of both a and pi" in row["note"]
    assert np.isnan(row["in_source_delta"]) and np.isnan(row["retention"])
    assert np.isfinite(row["held_out_delta"]) and disp["in-source new"] == "no runs"
    assert any("no runs of both a and pi" in n for n in t.notes)


def test_without_held_out_runs_the_table_says_how_to_make_them(tmp_path):
    ev = _evidence(tmp_path, {("a", False): SEEDS, ("pi", False): SEEDS})
    assert ev.held_out is None
    t = build_report(ev, OPTS).table("leave_one_source_out")  # wired into aggregate
    assert t.status == "no runs" and "train_sources" in t.notes[0]
    assert _loso(replace(ev, sources=None)) is None  # Kvasir-like data: no table


def test_the_table_lands_in_aggregates_files(full, tmp_path):
    from pipi.workflows.aggregate import write_report

    ev, _ = full
    folder = write_report(build_report(ev, OPTS), tmp_path / "out")
    csv = pd.read_csv(folder / "tables" / "leave_one_source_out.csv")
    assert list(csv["held_out_source"]) == ["Z"] and np.isfinite(csv["retention"]).all()
    doc = json.loads((folder / "aggregate.json").read_text())
    assert doc["tables"]["leave_one_source_out"]["rows"][0]["condition"] == "train X,Y -> test Z"
    assert "# " in (folder / "report.md").read_text() and "Leave one source out" in (
        folder / "report.md").read_text()


def test_a_store_of_held_out_runs_only_aggregates_them_with_a_note(tmp_path, sqlite_tracking):
    """No run trained on every source: the held-out runs are the arms (as before the table
    existed) and the table's row says the in-source condition has no runs."""
    from mlflow.tracking import MlflowClient

    from pipi import tracking
    from pipi.runs.evidence import load_evidence

    c = MlflowClient()
    eid = c.create_experiment("held-out-only")
    for cell in ("a", "pi"):
        for s in SEEDS:
            row, folder = _run(tmp_path, cell, s, True)
            rid = c.create_run(eid, tags={
                tracking.tags.TAG_ENTRY_POINT: "train", tracking.tags.TAG_DATA_DIGEST: "d" * 64,
                tracking.tags.TAG_CELL: cell, tracking.tags.TAG_BACKBONE: B0,
                tracking.tags.TAG_SEED: str(s),
                "pipi.test_classes": row["test_classes"]}).info.run_id
            for k, v in json.loads(row["params"]).items():
                c.log_param(rid, k, v)
            c.log_artifacts(rid, str(folder), "predictions")
            c.set_terminated(rid, "FINISHED")
    ev, kept = load_evidence("held-out-only", "", tmp_path / "cache")
    assert sorted(ev.cells(B0)) == ["a", "pi"] and len(kept) == 6
    assert set(ev.sources) == {"Z"} and not ev.held_out.in_source
    row = _loso(ev).data.iloc[0]
    assert row["note"].startswith("in source: no run trained on every source")
    assert np.isfinite(row["held_out_delta"]) and np.isnan(row["retention"])


def test_a_condition_that_holds_nothing_out_is_left_out_with_its_reason(tmp_path):
    """Runs trained on every source but scored on Z only (test_sources alone) are in-source
    runs of another recipe: not a held-out condition, excluded with the reason."""
    only_test = {"test_sources": "Z"}
    ev = _evidence(tmp_path, {("a", False): SEEDS, ("pi", False): SEEDS, ("a", True): SEEDS,
                              ("pi", True): SEEDS},
                   sources={("a", True): only_test, ("pi", True): only_test})
    assert ev.held_out.conditions == ()
    (why,) = ev.held_out.errors.values()
    assert why.startswith("trained on every source: nothing held out")
    assert (ev.held_out.excluded["reason"].str.contains("nothing held out")).sum() == 6
    t = _loso(ev)
    assert t.status == "no runs" and any("nothing held out" in n for n in t.notes)
