"""Every MLflow convention of pipi (the only package that imports mlflow).

``tags`` names the run contract, ``records`` what a run read from MLflow is handed out as
(:class:`RunRecord`, never MLflow's ``Run``), ``store`` the tracking URI and code version,
``runs`` the run lifecycle and lookups, ``signals`` how Ctrl-C and SIGTERM end runs,
``datasets`` the split inputs, ``registry`` logged models and aliases, ``queries`` the reads
of ``aggregate``, ``contract`` the run contract's tags, ``logged_model`` the registered models
(their code, run by MLflow and never imported, is ``pyfunc.py``), ``ui`` what the MLflow UI
shows (experiment kind, figures, descriptions, system metrics), ``handle`` the run as a value
(what a workflow logs through; an in-memory run beside MLflow's, ``mlflow_run``). Import it as
``from pipi import tracking`` and call ``tracking.<name>``: the face is what the layers above
use (about 60 names, issue 39); the run contract's tag names are ``tracking.tags.TAG_*``,
the registry's operations ``tracking.registry.<name>``, and any other public name of a module
(its ``__all__``) is ``tracking.<module>.<name>``.

The face is light (issue 39): importing it loads no submodule and no mlflow; a name is
imported from its module on first use (module ``__getattr__``, PEP 562, as MLflow's
``LazyLoader`` and SciPy's ``lazy_loader`` do), so a tag name costs the tags module only.
"""

from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# one progress bar per downloaded artifact floods the logs of aggregate/ablate; pipi shows its own
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from typing import TYPE_CHECKING

from pipi import lazy_face

if TYPE_CHECKING:   # what each name is, for readers and type checkers; loaded on first use
    from pipi.tracking.contract import (
        class_tags,
        config_key,
        data_tags,
        evaluation_key,
        evaluation_tags,
        import_tags,
        import_version_tags,
        train_tags,
    )
    from pipi.tracking.datasets import (
        log_split_datasets,
        split_datasets,
    )
    from pipi.tracking.handle import Run
    from pipi.tracking.liveness import (
        claim_for_resume,
        release_claim,
    )
    from pipi.tracking.parent import (
        end_with_mlflow_run,
        launched_run_id,
        remembering_launched_run,
    )
    from pipi.tracking.permissions import (
        DEFAULT_MODEL_PREFIX,
        check_can_register,
        model_prefix,
        using_model_prefix,
    )
    from pipi.tracking.queries import (
        download_predictions,
        experiment_name,
        has_artifact,
        load_runs,
    )
    from pipi.tracking.records import (
        RunRecord,
        VersionRecord,
        resolved_param,
    )
    from pipi.tracking.runs import (
        RunTracker,
        create_child_run,
        current_tracking_uri,
        default_experiment,
        download_artifact,
        downloaded,
        entry_point_params,
        find_finished_run,
        find_finished_runs,
        get_run,
        launch_env_manager,
        launch_params,
        log_artifact_to_run,
        pipi_run,
        reported,
        run_of,
        set_run_tags,
        tag_project_run,
        terminate_run,
        usable_run,
    )
    from pipi.tracking.signals import (
        Terminated,
        install_signal_handlers,
        interrupt_reason,
    )
    from pipi.tracking.store import (
        CODE_VERSION_ENV,
        code_version,
        config_hash,
        configure,
        ui_hint,
        use_code_version,
    )
    from pipi.tracking.trials import (
        log_finished_child,
        model_run_id,
        optimize_study,
    )
    from pipi.tracking.ui import (
        artifact_url,
        run_url,
        set_model_description,
        system_metrics_enabled,
    )

#: The submodule each public name lives in (the face: what the layers above call; the
#: tag names are ``tracking.tags.TAG_*``, the registry's operations ``tracking.registry.*``,
#: and a module's other names are imported from it).
_MODULES: dict[str, tuple[str, ...]] = {
    'contract': ('class_tags', 'config_key', 'data_tags', 'evaluation_key', 'evaluation_tags',
    'import_tags', 'import_version_tags', 'train_tags',),
    'datasets': ('log_split_datasets', 'split_datasets',),
    'handle': ('Run',),
    'liveness': ('claim_for_resume', 'release_claim',),
    'parent': ('end_with_mlflow_run', 'launched_run_id', 'remembering_launched_run',),
    'permissions': ('DEFAULT_MODEL_PREFIX', 'check_can_register', 'model_prefix',
    'using_model_prefix',),
    'queries': ('download_predictions', 'experiment_name', 'has_artifact', 'load_runs',),
    'records': ('RunRecord', 'VersionRecord', 'resolved_param',),
    'runs': ('RunTracker', 'create_child_run', 'current_tracking_uri', 'default_experiment',
    'download_artifact', 'downloaded', 'entry_point_params', 'find_finished_run', 'find_finished_runs', 'get_run', 'launch_env_manager', 'launch_params', 'log_artifact_to_run', 'pipi_run', 'reported', 'run_of', 'set_run_tags', 'tag_project_run', 'terminate_run', 'usable_run',),
    'signals': ('Terminated', 'install_signal_handlers', 'interrupt_reason',),
    'store': ('CODE_VERSION_ENV', 'code_version', 'config_hash', 'configure', 'ui_hint',
    'use_code_version',),
    'trials': ('log_finished_child', 'model_run_id', 'optimize_study',),
    'ui': ('artifact_url', 'run_url', 'set_model_description', 'system_metrics_enabled',),
}
_WHERE = {name: mod for mod, names in _MODULES.items() for name in names}


__getattr__, __dir__ = lazy_face(__name__, _WHERE, submodules=True)


#: Every public name of the face: each module's names in :data:`_MODULES`.
__all__ = sorted(_WHERE)
