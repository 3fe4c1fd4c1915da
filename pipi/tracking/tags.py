"""Tag names of the run contract (docs/run-contract.md) and the default experiment."""

#: MLflow's own default experiment: runs land where `mlflow run` puts them.
DEFAULT_EXPERIMENT = "Default"

# Tag names (the run contract; docs/run-contract.md).
TAG_ENTRY_POINT = "pipi.entry_point"
TAG_DATASET = "pipi.dataset"
TAG_DATA_DIGEST = "pipi.data_digest"
TAG_SPLIT_SHA = "pipi.split_sha256"
TAG_CODE_VERSION = "pipi.code_version"
TAG_CONFIG_HASH = "pipi.config_hash"
TAG_FAILURE = "pipi.failure_reason"
#: a resumed run's earlier failure reason
TAG_PREVIOUS_FAILURE = "pipi.previous_failure"
TAG_CELL = "pipi.cell"
TAG_BACKBONE = "pipi.backbone"
TAG_SEED = "pipi.seed"
TAG_PARENT_RUN = "pipi.parent_run_id"
TAG_BASE_RUN = "pipi.base_run_id"
TAG_STUDY = "pipi.study"
TAG_VARIANT = "pipi.variant"
TAG_C3_RUN = "pipi.c3_run_id"

TAG_RECIPE = "pipi.recipe"
TAG_RECIPE_HASH = "pipi.recipe_hash"
TAG_TEST_CLASSES = "pipi.test_classes"
TAG_VAL_CLASSES = "pipi.val_classes"
TAG_SOURCE_RUN = "pipi.source_run_id"

# Runs made from outside files (`import`) and the evaluation children of such runs.
TAG_SOURCE = "pipi.source"                  # "external"
TAG_SOURCE_KIND = "pipi.source_kind"        # checkpoint | predictions
TAG_SOURCE_SHA = "pipi.source_sha256"
TAG_SOURCE_FILE = "pipi.source_file"
TAG_SOURCE_LABEL = "pipi.source_label"      # aggregate's arm: "<cell> (<label>)"
#: What an evaluation child inherits from its source run (``evaluate_run``).
INHERITED_SOURCE_TAGS = (TAG_SOURCE, TAG_SOURCE_KIND, TAG_SOURCE_SHA, TAG_SOURCE_LABEL)
#: on `mlflow run`'s own run: the run it resumed / the staged folder it reused
TAG_RESUMED_RUN = "pipi.resumed_run_id"
TAG_REUSED_STAGED = "pipi.reused_staged"
#: on a resumed run: the `mlflow run` runs that resumed it (comma-separated)
TAG_RESUMED_BY = "pipi.resumed_by"
