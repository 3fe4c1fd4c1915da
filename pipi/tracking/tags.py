"""Tag names of the run contract (docs/run-contract.md) and the default experiment."""

__all__ = [
    "DEFAULT_EXPERIMENT", "HEARTBEAT_TAG", "INHERITED_SOURCE_TAGS", "TAG_AGGREGATE_N_RUNS",
    "TAG_BACKBONE", "TAG_BASELINE_TRIAL", "TAG_BASE_CODE_VERSION", "TAG_BASE_RUN", "TAG_NEEDED_BY",
    "TAG_BEST_EPOCH", "TAG_C3_RUN", "TAG_CALIBRATE_MODE", "TAG_CELL", "TAG_CODE_VERSION",
    "TAG_CONFIG_HASH", "TAG_DATASET", "TAG_DATA_DIGEST", "TAG_DONOR_RUN", "TAG_ENTRY_POINT",
    "TAG_EVALUABLE_CLASSES", "TAG_FAILED_CHILDREN", "TAG_FAILURE", "TAG_GALAR_FOLD",
    "TAG_GALAR_SCOPE", "TAG_HEARTBEAT", "TAG_IMAGE_SIZE", "TAG_IMPORT_PREFIX",
    "TAG_ON_CLASSIFIER_PATH", "TAG_ONNX", "TAG_OPTUNA_STORAGE", "TAG_OPTUNA_STUDY", "TAG_OTHER_SEED",
    "TAG_PAPER_VARIANT", "TAG_PARENT_RUN", "TAG_PERTURBATION", "TAG_PERTURBATION_KIND",
    "TAG_PERTURBATION_LEVEL", "TAG_PREFIX", "TAG_PREVIOUS_FAILURE", "TAG_PRIOR_PARAMS",
    "TAG_PRIOR_PARAMS_RUN", "TAG_PROMOTE_BASELINE", "TAG_PROMOTE_CI", "TAG_PROMOTE_CI_UNIT",
    "TAG_PROMOTE_CLASS_P_BH", "TAG_PROMOTE_CRITERIA", "TAG_PROMOTE_DATE", "TAG_PROMOTE_DECISION",
    "TAG_PROMOTE_DELTA", "TAG_PROMOTE_ERROR", "TAG_PROMOTE_EVIDENCE", "TAG_PROMOTE_FORCE_REASON",
    "TAG_PROMOTE_INTERVALS", "TAG_PROMOTE_LOCK", "TAG_PROMOTE_P_BOOTSTRAP", "TAG_PROMOTE_RESTORED",
    "TAG_PROMOTE_RUNS", "TAG_PROMOTE_SEEDS", "TAG_PRUNED", "TAG_RECIPE", "TAG_RECIPE_HASH",
    "TAG_RESUMED_BY", "TAG_RESUMED_RUN", "TAG_REUSED_STAGED", "TAG_SEED", "TAG_SLURM_ATTEMPT",
    "TAG_SLURM_JOB", "TAG_SOURCE", "TAG_SOURCE_FILE", "TAG_SOURCE_KIND", "TAG_SOURCE_LABEL",
    "TAG_SOURCE_RUN", "TAG_SOURCE_SHA", "TAG_SPLIT_SHA", "TAG_STUDY", "TAG_SWEEP_ROLE",
    "TAG_TARGET", "TAG_TARGET_DATA_DIGEST", "TAG_TEST_CLASSES", "TAG_TRANSPLANT",
    "TAG_TRANSPLANT_BLOCKS", "TAG_TRANSPLANT_KIND", "TAG_TRIAL_NUMBER", "TAG_TRIAL_STATE",
    "TAG_TTA_NOTE", "TAG_VAL_CLASSES", "TAG_VARIANT", "TAG_WORKER",
]

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
#: On a run trained as another run's dependency (a sequence cell's base): the run that needed
#: it. Its registered version carries it too and moves no alias (issue 38).
TAG_NEEDED_BY = "pipi.needed_by"
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
#: every pipi tag starts with this (``queries`` keeps them all for studies without predictions)
TAG_PREFIX = "pipi."

# Evaluation classes and what a run learned from another run.
TAG_EVALUABLE_CLASSES = "pipi.evaluable_classes"
TAG_BEST_EPOCH = "pipi.best_epoch"
#: a sequence run: the code version of the per-frame base run it builds on
TAG_BASE_CODE_VERSION = "pipi.base_code_version"
#: a C3 autoencoder run: the image size its residuals were computed at
TAG_IMAGE_SIZE = "pipi.image_size"
#: a run trained or scored with a calibrated prior (``-P prior_params=``): where the prior came
#: from (the file, or "run <calibrate run id>") and, when known, the calibrate run that fitted it
TAG_PRIOR_PARAMS = "pipi.prior_params"
TAG_PRIOR_PARAMS_RUN = "pipi.prior_params_run"

# Liveness (``liveness``): "<host>:<pid>:<nonce> <unix time>" of the process training a run.
# Bookkeeping, not a user-facing tag: it is written under ``mlflow.`` (the prefix MLflow's UI
# hides from the run page, the runs table and the compare view); ``pipi.heartbeat`` is still
# read, for runs started before.
HEARTBEAT_TAG = "mlflow.pipi.heartbeat"
TAG_HEARTBEAT = "pipi.heartbeat"

# Sweeps (``ablate``, local and SLURM executors).
TAG_SWEEP_ROLE = "pipi.sweep_role"
TAG_FAILED_CHILDREN = "pipi.failed_children"
TAG_SLURM_ATTEMPT = "pipi.slurm_attempt"
TAG_SLURM_JOB = "pipi.slurm_job"
# ``ablate``'s test-time-adaptation children.
TAG_PAPER_VARIANT = "pipi.paper_variant"
TAG_TTA_NOTE = "pipi.tta_note"
TAG_ON_CLASSIFIER_PATH = "pipi.on_classifier_path"
#: A registered version's ONNX graph (``pipi onnx --register``): its runs:/ URI.
TAG_ONNX = "pipi.onnx"

# ``galar``: the vendor fold scored and what it covered, in words.
TAG_GALAR_FOLD = "pipi.galar_fold"
TAG_GALAR_SCOPE = "pipi.galar_scope"

# ``robustness``: the perturbation of an evaluation child.
TAG_PERTURBATION = "pipi.perturbation"
TAG_PERTURBATION_KIND = "pipi.perturbation_kind"
TAG_PERTURBATION_LEVEL = "pipi.perturbation_level"

# ``transplant``: the donor run and what moved.
TAG_DONOR_RUN = "pipi.donor_run_id"
TAG_TRANSPLANT = "pipi.transplant"
TAG_TRANSPLANT_KIND = "pipi.transplant_kind"
TAG_TRANSPLANT_BLOCKS = "pipi.transplant_blocks"
TAG_OTHER_SEED = "pipi.other_seed"

# ``aggregate`` and ``import``.
TAG_AGGREGATE_N_RUNS = "pipi.aggregate.n_runs"
#: ``import``: one tag per fact of the imported file, ``pipi.import.<fact>``
TAG_IMPORT_PREFIX = "pipi.import."

# ``promote``: what a promotion decided, recorded on the model version.
TAG_PROMOTE_DECISION = "pipi.promote.decision"
TAG_PROMOTE_DATE = "pipi.promote.date"
TAG_PROMOTE_BASELINE = "pipi.promote.baseline"
TAG_PROMOTE_SEEDS = "pipi.promote.seeds"
TAG_PROMOTE_DELTA = "pipi.promote.delta"
TAG_PROMOTE_CI = "pipi.promote.ci"
TAG_PROMOTE_CI_UNIT = "pipi.promote.ci_unit"
TAG_PROMOTE_EVIDENCE = "pipi.promote.evidence"
TAG_PROMOTE_INTERVALS = "pipi.promote.intervals"
TAG_PROMOTE_P_BOOTSTRAP = "pipi.promote.p_bootstrap"
TAG_PROMOTE_RUNS = "pipi.promote.runs"
TAG_PROMOTE_CRITERIA = "pipi.promote.criteria"
TAG_PROMOTE_CLASS_P_BH = "pipi.promote.class_p_bh"
TAG_PROMOTE_FORCE_REASON = "pipi.promote.force_reason"
TAG_PROMOTE_ERROR = "pipi.promote.error"
TAG_PROMOTE_RESTORED = "pipi.promote.restored"
#: registered-model tag held while a promotion moves the aliases: "<host>:<pid>:<nonce> <time>"
TAG_PROMOTE_LOCK = "pipi.promote.lock"

# ``calibrate``: the Optuna study of a parent run and each trial's child run.
TAG_OPTUNA_STUDY = "pipi.optuna_study"
TAG_OPTUNA_STORAGE = "pipi.optuna_storage"
TAG_TARGET = "pipi.target"
#: the data digest of the staged folder the target fold comes from (a Galar target's folder)
TAG_TARGET_DATA_DIGEST = "pipi.target_data_digest"
TAG_TRIAL_NUMBER = "pipi.trial_number"
TAG_TRIAL_STATE = "pipi.trial_state"
TAG_PRUNED = "pipi.pruned"
TAG_WORKER = "pipi.worker"
TAG_BASELINE_TRIAL = "pipi.baseline_trial"
#: how calibrate fitted the prior: "frozen" (a trained model) or "train" (a run per trial)
TAG_CALIBRATE_MODE = "pipi.calibrate_mode"
