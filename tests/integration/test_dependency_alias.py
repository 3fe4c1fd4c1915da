"""A sequence cell that trains its base as a dependency leaves ``@candidate`` of the base's
model where the user put it (issue 38: in the tour a 2-batch model at AUC 0.53 took
``@candidate`` from the demo's 0.86)."""

from __future__ import annotations

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from pipi import tracking
from pipi.config import make_config
from pipi.runs import training as workflow

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("test_dependency_alias")]


def test_the_base_a_sequence_cell_trains_moves_no_alias(training_store, tiny_staged):
    kw = dict(backbone="resnet18", profile="smoke", weights="none", image_size=32)
    mine = workflow.train(make_config(cell="a", seed=1, **kw), experiment="dependency-alias",
    data=str(tiny_staged),
                          progress=False)
    seq = workflow.train(make_config(cell="b", seed=2, **kw), experiment="dependency-alias",
    data=str(tiny_staged),
                         progress=False)
    c = MlflowClient()
    name = mine.registered_name
    assert str(c.get_model_version_by_alias(name, "candidate").run_id) == mine.run_id
    base = tracking.get_run(seq.base_run_id)
    assert base.tags[tracking.tags.TAG_NEEDED_BY] == seq.run_id and base.seed == 2
    (dep,) = c.search_model_versions(f"name='{name}' and run_id='{seq.base_run_id}'")
    assert dep.tags["needed_by"] == seq.run_id and not dep.aliases
    # the sequence model the user asked for holds its own candidate
    assert c.get_model_version_by_alias(seq.registered_name, "candidate").run_id == seq.run_id
    # issue 38 item 6: the nested base and the in-process runs log the request form beside the
    # resolved values, as a run `mlflow run . -e train` started does
    from mlflow.projects._project_spec import load_project

    from pipi.paths import PROJECT_ROOT
    keys = set(load_project(str(PROJECT_ROOT)).get_entry_point("train").parameters)
    for rid in (seq.base_run_id, mine.run_id, seq.run_id):
        params = c.get_run(rid).data.params
        assert keys <= set(params), sorted(keys - set(params))
        assert params["batch_size"] == "auto" and "batch_size.resolved" in params
        assert params["weights"] == "none" and params["train_sources"] == "''"
        # item 8: the recipe names the environment it ran in (this process: local)
        assert "--env-manager local" in c.get_run(rid).data.tags[tracking.tags.TAG_RECIPE]
    assert c.get_run(seq.base_run_id).data.params["cell"] == base.cell
    # item 8: the sequence model declares its inputs (the UI showed Inputs (0))
    info = mlflow.models.get_model_info(f"models:/{seq.registered_name}@candidate")
    assert [col.name for col in info.signature.inputs.inputs] == ["image", "pixels"]
