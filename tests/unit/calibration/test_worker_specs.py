"""SLURM worker spec files of ``calibrate mode=train``: owner-only (they hold the Optuna
storage URL with its password), written whole, read back as the spec that was written."""

import json
import stat

from pipi.calibration.trials import TrialSpec, write_worker_specs


def _spec(index: int) -> TrialSpec:
    return TrialSpec(mode="train", index=index, n_trials=2, study="s",
                     storage="postgresql+psycopg://pipi:s3cret@127.0.0.1:5432/optuna",
                     sampler="tpe", pruner="median", seed=index, parent_run_id="p" * 32,
                     tracking_uri="http://127.0.0.1:5000", code_version="abc",
                     data="/staged", data_digest="d" * 64, base_config={"cell": "pi"},
                     fold_classes=(0, 3), train_fn=print)


def test_specs_are_owner_only_and_replace_a_readable_old_file(tmp_path):
    folder = tmp_path / "calibrate"
    folder.mkdir()
    old = folder / "worker-1.json"
    old.write_text("{}")
    old.chmod(0o644)  # a spec left by an older pipi, world-readable
    (folder / "worker-1.result.json").write_text("{}")
    paths = write_worker_specs([_spec(0), _spec(1)], folder)
    assert [p.name for p in paths] == ["worker-0.json", "worker-1.json"]
    for p in paths:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(x.name for x in folder.iterdir()) == ["worker-0.json", "worker-1.json"]
    doc = json.loads(paths[1].read_text())
    assert doc["storage"].endswith("s3cret@127.0.0.1:5432/optuna") and "train_fn" not in doc
    doc["fold_classes"] = tuple(doc["fold_classes"])
    assert TrialSpec(**doc, train_fn=print) == _spec(1)
