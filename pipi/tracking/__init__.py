"""Every MLflow convention of pipi (the only package that imports mlflow).

``tags`` names the run contract, ``records`` what a run read from MLflow is handed out as
(:class:`RunRecord`, never MLflow's ``Run``), ``store`` the tracking URI and code version,
``runs`` the run lifecycle and lookups, ``signals`` how Ctrl-C and SIGTERM end runs,
``datasets`` the split inputs, ``registry`` logged models and aliases, ``queries`` the reads
of ``aggregate``, ``contract`` the run contract's tags, ``logged_model`` the registered models
(their code, run by MLflow and never imported, is ``pyfunc.py``), ``ui`` what the MLflow UI
shows (experiment kind, figures, descriptions, system metrics). Import it as ``from pipi import
tracking`` and call ``tracking.<name>``: the names below, each module's ``__all__``.

The face is light (issue 39): importing it loads no submodule and no mlflow; a name is
imported from its module on first use (module ``__getattr__``, PEP 562, as MLflow's
``LazyLoader`` and SciPy's ``lazy_loader`` do), so a tag name costs the tags module only.
"""

from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# one progress bar per downloaded artifact floods the logs of aggregate/ablate; pipi shows its own
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # what each name is, for readers and type checkers; loaded on first use
    from pipi.tracking.contract import (
        SOURCE_EXTERNAL,
        class_tags,
        config_key,
        data_tags,
        evaluation_key,
        evaluation_tags,
        import_key,
        import_tags,
        import_version_tags,
        train_tags,
    )
    from pipi.tracking.datasets import (
        SPLIT_CONTEXTS,
        DatasetRef,
        log_model_metrics,
        log_split_datasets,
        split_datasets,
    )
    from pipi.tracking.liveness import (
        claim_for_resume,
        heartbeat,
        heartbeat_interval,
        live_holder,
        release_claim,
    )
    from pipi.tracking.parent import (
        attach_launched_run,
        end_with_mlflow_run,
        launched_run_id,
        mlflow_run_ancestor,
        remembering_launched_run,
    )
    from pipi.tracking.permissions import (
        DEFAULT_MODEL_PREFIX,
        MODEL_PREFIX_ENV,
        check_can_create_runs,
        check_can_register,
        model_prefix,
        using_model_prefix,
    )
    from pipi.tracking.queries import (
        RUN_COLUMNS,
        download_predictions,
        experiment_id,
        experiment_name,
        has_artifact,
        load_runs,
    )
    from pipi.tracking.records import (
        LIVE_STATUSES,
        RunRecord,
        VersionRecord,
        resolved_param,
        run_record,
        unquote_param,
        version_record,
    )
    from pipi.tracking.registry import (
        VERSION_TAGS,
        alias_version,
        attach_to_version,
        check_aliases,
        download_model_files,
        image_schema,
        log_pyfunc_model,
        missing_version_tags,
        model_lock,
        model_uri_run_id,
        model_uri_version,
        model_version,
        record_on_version,
        register_version,
        run_model_uri,
        run_version,
        set_aliases,
        set_registered_model_tags,
        version_model_id,
    )
    from pipi.tracking.runs import (
        RETRY_VARS,
        RunTracker,
        active_experiment_id,
        active_run_id,
        child_runs,
        client,
        create_child_run,
        current_tracking_uri,
        default_experiment,
        download_artifact,
        downloaded,
        filter_value,
        find_finished_run,
        find_finished_runs,
        get_run,
        entry_point_params,
        keep_killed_after_parent,
        launch_env_manager,
        launch_params,
        log_artifact,
        log_artifact_to_run,
        log_artifacts,
        log_dataset,
        log_dict,
        log_metrics,
        log_params,
        log_text,
        param_value,
        pipi_run,
        reported,
        resume_hint,
        set_run_tags,
        set_tags,
        tag_project_run,
        terminate_run,
        usable_run,
    )
    from pipi.tracking.signals import (
        Terminated,
        install_signal_handlers,
        interrupt_reason,
        signals_deferred,
        signals_end_runs,
        signals_live,
    )
    from pipi.tracking.store import (
        CODE_VERSION_ENV,
        check_credentials,
        check_reachable,
        code_version,
        config_hash,
        configure,
        default_tracking_uri,
        flush_lost_runs,
        record_lost_run,
        server_gone,
        ui_hint,
        use_code_version,
    )
    from pipi.tracking.tags import (
        DEFAULT_EXPERIMENT,
        HEARTBEAT_TAG,
        INHERITED_SOURCE_TAGS,
        TAG_AGGREGATE_N_RUNS,
        TAG_BACKBONE,
        TAG_BASE_CODE_VERSION,
        TAG_BASE_RUN,
        TAG_BASELINE_TRIAL,
        TAG_BEST_EPOCH,
        TAG_C3_RUN,
        TAG_CALIBRATE_MODE,
        TAG_CELL,
        TAG_CODE_VERSION,
        TAG_CONFIG_HASH,
        TAG_DATA_DIGEST,
        TAG_DATASET,
        TAG_DONOR_RUN,
        TAG_ENTRY_POINT,
        TAG_EVALUABLE_CLASSES,
        TAG_FAILED_CHILDREN,
        TAG_FAILURE,
        TAG_GALAR_FOLD,
        TAG_GALAR_SCOPE,
        TAG_HEARTBEAT,
        TAG_IMAGE_SIZE,
        TAG_IMPORT_PREFIX,
        TAG_NEEDED_BY,
        TAG_ON_CLASSIFIER_PATH,
        TAG_ONNX,
        TAG_OPTUNA_STORAGE,
        TAG_OPTUNA_STUDY,
        TAG_OTHER_SEED,
        TAG_PAPER_VARIANT,
        TAG_PARENT_RUN,
        TAG_PERTURBATION,
        TAG_PERTURBATION_KIND,
        TAG_PERTURBATION_LEVEL,
        TAG_PREFIX,
        TAG_PREVIOUS_FAILURE,
        TAG_PRIOR_PARAMS,
        TAG_PRIOR_PARAMS_RUN,
        TAG_PROMOTE_BASELINE,
        TAG_PROMOTE_CI,
        TAG_PROMOTE_CI_UNIT,
        TAG_PROMOTE_CLASS_P_BH,
        TAG_PROMOTE_CRITERIA,
        TAG_PROMOTE_DATE,
        TAG_PROMOTE_DECISION,
        TAG_PROMOTE_DELTA,
        TAG_PROMOTE_ERROR,
        TAG_PROMOTE_EVIDENCE,
        TAG_PROMOTE_FORCE_REASON,
        TAG_PROMOTE_INTERVALS,
        TAG_PROMOTE_LOCK,
        TAG_PROMOTE_P_BOOTSTRAP,
        TAG_PROMOTE_RESTORED,
        TAG_PROMOTE_RUNS,
        TAG_PROMOTE_SEEDS,
        TAG_PRUNED,
        TAG_RECIPE,
        TAG_RECIPE_HASH,
        TAG_RESUMED_BY,
        TAG_RESUMED_RUN,
        TAG_REUSED_STAGED,
        TAG_SEED,
        TAG_SLURM_ATTEMPT,
        TAG_SLURM_JOB,
        TAG_SOURCE,
        TAG_SOURCE_FILE,
        TAG_SOURCE_KIND,
        TAG_SOURCE_LABEL,
        TAG_SOURCE_RUN,
        TAG_SOURCE_SHA,
        TAG_SPLIT_SHA,
        TAG_STUDY,
        TAG_SWEEP_ROLE,
        TAG_TARGET,
        TAG_TARGET_DATA_DIGEST,
        TAG_TEST_CLASSES,
        TAG_TRANSPLANT,
        TAG_TRANSPLANT_BLOCKS,
        TAG_TRANSPLANT_KIND,
        TAG_TRIAL_NUMBER,
        TAG_TRIAL_STATE,
        TAG_TTA_NOTE,
        TAG_VAL_CLASSES,
        TAG_VARIANT,
        TAG_WORKER,
    )
    from pipi.tracking.trials import (
        log_finished_child,
        model_run_id,
        optimize_study,
    )
    from pipi.tracking.ui import (
        EXPERIMENT_KIND,
        EXPERIMENT_KIND_TAG,
        FIGURES_DIR,
        MAX_FIGURE_BYTES,
        ML_VIEW_QUERY,
        NOTE_TAG,
        SHARED_VIEW_PREFIX,
        SYSTEM_METRICS_ENV,
        TRAINING_VIEW,
        TRAINING_VIEW_STATE,
        artifact_url,
        experiment_url,
        log_figures,
        mark_experiment,
        run_url,
        set_model_description,
        set_run_description,
        set_version_description,
        system_metrics_enabled,
    )

#: The submodule each public name lives in.
_MODULES: dict[str, tuple[str, ...]] = {
    "contract": ('SOURCE_EXTERNAL', 'class_tags', 'config_key', 'data_tags', 'evaluation_key', 'evaluation_tags', 'import_key', 'import_tags', 'import_version_tags', 'train_tags',),
    "datasets": ('DatasetRef', 'SPLIT_CONTEXTS', 'log_model_metrics', 'log_split_datasets', 'split_datasets',),
    "liveness": ('claim_for_resume', 'heartbeat', 'heartbeat_interval', 'live_holder', 'release_claim',),
    "parent": ('attach_launched_run', 'end_with_mlflow_run', 'launched_run_id', 'mlflow_run_ancestor', 'remembering_launched_run',),
    "permissions": ('DEFAULT_MODEL_PREFIX', 'MODEL_PREFIX_ENV', 'check_can_create_runs', 'check_can_register', 'model_prefix', 'using_model_prefix',),
    "queries": ('RUN_COLUMNS', 'download_predictions', 'experiment_id', 'experiment_name', 'has_artifact', 'load_runs',),
    "records": ('LIVE_STATUSES', 'RunRecord', 'VersionRecord', 'resolved_param', 'run_record', 'unquote_param', 'version_record',),
    "registry": ('VERSION_TAGS', 'alias_version', 'attach_to_version', 'check_aliases', 'download_model_files', 'image_schema', 'log_pyfunc_model', 'missing_version_tags', 'model_lock', 'model_uri_run_id', 'model_uri_version', 'model_version', 'record_on_version', 'register_version', 'run_model_uri', 'run_version', 'set_aliases', 'set_registered_model_tags', 'version_model_id',),
    "runs": ('RETRY_VARS', 'RunTracker', 'active_experiment_id', 'active_run_id', 'child_runs', 'client', 'create_child_run', 'current_tracking_uri', 'default_experiment', 'download_artifact', 'downloaded', 'filter_value', 'find_finished_run', 'find_finished_runs', 'get_run', 'entry_point_params', 'keep_killed_after_parent', 'launch_env_manager', 'launch_params', 'log_artifact', 'log_artifact_to_run', 'log_artifacts', 'log_dataset', 'log_dict', 'log_metrics', 'log_params', 'log_text', 'param_value', 'pipi_run', 'reported', 'resume_hint', 'set_run_tags', 'set_tags', 'tag_project_run', 'terminate_run', 'usable_run',),
    "signals": ('Terminated', 'install_signal_handlers', 'interrupt_reason', 'signals_deferred', 'signals_end_runs', 'signals_live',),
    "store": ('CODE_VERSION_ENV', 'check_credentials', 'check_reachable', 'code_version', 'config_hash', 'configure', 'default_tracking_uri', 'flush_lost_runs', 'record_lost_run', 'server_gone', 'ui_hint', 'use_code_version',),
    "tags": ('DEFAULT_EXPERIMENT', 'HEARTBEAT_TAG', 'INHERITED_SOURCE_TAGS', 'TAG_AGGREGATE_N_RUNS', 'TAG_BACKBONE', 'TAG_BASELINE_TRIAL', 'TAG_BASE_CODE_VERSION', 'TAG_BASE_RUN', 'TAG_BEST_EPOCH', 'TAG_C3_RUN', 'TAG_CALIBRATE_MODE', 'TAG_CELL', 'TAG_CODE_VERSION', 'TAG_CONFIG_HASH', 'TAG_DATASET', 'TAG_DATA_DIGEST', 'TAG_DONOR_RUN', 'TAG_ENTRY_POINT', 'TAG_EVALUABLE_CLASSES', 'TAG_FAILED_CHILDREN', 'TAG_FAILURE', 'TAG_GALAR_FOLD', 'TAG_GALAR_SCOPE', 'TAG_HEARTBEAT', 'TAG_IMAGE_SIZE', 'TAG_IMPORT_PREFIX', 'TAG_NEEDED_BY', 'TAG_ON_CLASSIFIER_PATH', 'TAG_ONNX', 'TAG_OPTUNA_STORAGE', 'TAG_OPTUNA_STUDY', 'TAG_OTHER_SEED', 'TAG_PAPER_VARIANT', 'TAG_PARENT_RUN', 'TAG_PERTURBATION', 'TAG_PERTURBATION_KIND', 'TAG_PERTURBATION_LEVEL', 'TAG_PREFIX', 'TAG_PREVIOUS_FAILURE', 'TAG_PRIOR_PARAMS', 'TAG_PRIOR_PARAMS_RUN', 'TAG_PROMOTE_BASELINE', 'TAG_PROMOTE_CI', 'TAG_PROMOTE_CI_UNIT', 'TAG_PROMOTE_CLASS_P_BH', 'TAG_PROMOTE_CRITERIA', 'TAG_PROMOTE_DATE', 'TAG_PROMOTE_DECISION', 'TAG_PROMOTE_DELTA', 'TAG_PROMOTE_ERROR', 'TAG_PROMOTE_EVIDENCE', 'TAG_PROMOTE_FORCE_REASON', 'TAG_PROMOTE_INTERVALS', 'TAG_PROMOTE_LOCK', 'TAG_PROMOTE_P_BOOTSTRAP', 'TAG_PROMOTE_RESTORED', 'TAG_PROMOTE_RUNS', 'TAG_PROMOTE_SEEDS', 'TAG_PRUNED', 'TAG_RECIPE', 'TAG_RECIPE_HASH', 'TAG_RESUMED_BY', 'TAG_RESUMED_RUN', 'TAG_REUSED_STAGED', 'TAG_SEED', 'TAG_SLURM_ATTEMPT', 'TAG_SLURM_JOB', 'TAG_SOURCE', 'TAG_SOURCE_FILE', 'TAG_SOURCE_KIND', 'TAG_SOURCE_LABEL', 'TAG_SOURCE_RUN', 'TAG_SOURCE_SHA', 'TAG_SPLIT_SHA', 'TAG_STUDY', 'TAG_SWEEP_ROLE', 'TAG_TARGET', 'TAG_TARGET_DATA_DIGEST', 'TAG_TEST_CLASSES', 'TAG_TRANSPLANT', 'TAG_TRANSPLANT_BLOCKS', 'TAG_TRANSPLANT_KIND', 'TAG_TRIAL_NUMBER', 'TAG_TRIAL_STATE', 'TAG_TTA_NOTE', 'TAG_VAL_CLASSES', 'TAG_VARIANT', 'TAG_WORKER',),
    "trials": ('log_finished_child', 'model_run_id', 'optimize_study',),
    "ui": ('EXPERIMENT_KIND', 'EXPERIMENT_KIND_TAG', 'FIGURES_DIR', 'MAX_FIGURE_BYTES', 'ML_VIEW_QUERY', 'NOTE_TAG', 'SHARED_VIEW_PREFIX', 'SYSTEM_METRICS_ENV', 'TRAINING_VIEW', 'TRAINING_VIEW_STATE', 'artifact_url', 'experiment_url', 'log_figures', 'mark_experiment', 'run_url', 'set_model_description', 'set_run_description', 'set_version_description', 'system_metrics_enabled',),
}
_WHERE = {name: mod for mod, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    """A public name imported from its submodule on first use (then cached here)."""
    mod = _WHERE.get(name)
    if mod is None:
        try:   # a submodule by name (``tracking.server``)
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


#: Every public name of the face: each module's names in :data:`_MODULES`.
__all__ = sorted(_WHERE)
