"""The Optuna trial a run is, in a search that prunes: each evaluation round's return is reported to the
study, and when its pruner says so the run ends `pruned`. The sweeper (`hydra_plugins/rl_optuna_pruning`) names
storage, study and trial in the job's environment; the study carries its pruner's config."""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

from rl.experiments.hooks import RunHook

STORAGE_VARIABLE = "RL_OPTUNA_STORAGE"  # The study's storage URL (sqlite:///<sweep dir>/optuna.db).
STUDY_VARIABLE = "RL_OPTUNA_STUDY"
TRIAL_VARIABLE = "RL_OPTUNA_TRIAL"  # The trial's number in its study.
PRUNER_ATTRIBUTE = "pruner"  # The study's user attribute holding its pruner's `_target_` and arguments.
DIRECTORY_ATTRIBUTE = "run_directory"  # The trial's user attribute naming its run directory.
SQLITE_TIMEOUT_S = 60.0  # How long a job waits for another's write to an sqlite storage.


def open_storage(url: str) -> Any:
    """The study's storage (an SQLAlchemy URL), uncached: other processes change its trials."""
    import optuna

    engine = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)


def trial_state(storage: Any, study_name: str, number: int) -> Any:
    """The state (optuna.trial.TrialState) of trial `number` as `storage` has it now."""
    study_id = storage.get_study_id_from_name(study_name)
    return storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, number)).state


class OptunaTrial:
    """A running trial of a study in `storage`: `report` tells it an evaluation, `prune` ends it."""

    def __init__(self, storage: str, study_name: str, number: int, run_directory: str | None = None):
        import optuna
        from hydra.utils import instantiate

        backend = open_storage(storage)
        study_id = backend.get_study_id_from_name(study_name)
        spec = backend.get_study_user_attrs(study_id).get(PRUNER_ATTRIBUTE)
        pruner = instantiate(dict(spec)) if spec else optuna.pruners.NopPruner()
        self.study = optuna.load_study(study_name=study_name, storage=backend, pruner=pruner)
        trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, number)
        self.trial = optuna.trial.Trial(self.study, trial_id)
        if run_directory is not None:
            self.trial.set_user_attr(DIRECTORY_ATTRIBUTE, os.path.abspath(run_directory))

    def report(self, actor_steps: int, value: float) -> bool:
        """Reports an evaluation's mean return at `actor_steps`; True when the pruner stops the trial.
        A non-finite return is not reported (Optuna's pruners compare it with nothing)."""
        if math.isfinite(value):
            self.trial.report(float(value), int(actor_steps))
        return bool(self.trial.should_prune())  # Some pruners answer with numpy booleans.

    def prune(self) -> None:
        """Ends the trial as pruned (its value: the last reported return), so the sweeper goes on."""
        import optuna

        self.study.tell(self.trial, state=optuna.trial.TrialState.PRUNED)


class PruningHook(RunHook):
    """The run as trial `number` of an Optuna study in `storage`: each evaluation round is reported, and the
    run ends `pruned` when the study's pruner says so. The trial opens when the run starts."""

    may_end_early = True

    def __init__(self, storage: str, study_name: str, number: int, run_directory: str | None = None):
        self.names = (storage, study_name, number, run_directory)
        self.trial: OptunaTrial | None = None

    @classmethod
    def from_environment(
        cls, run_directory: str | None = None, environ: Mapping[str, str] = os.environ
    ) -> "PruningHook | None":
        """The trial the sweeper named in the job's environment; None outside a search that prunes."""
        if TRIAL_VARIABLE not in environ:
            return None
        return cls(environ[STORAGE_VARIABLE], environ[STUDY_VARIABLE], int(environ[TRIAL_VARIABLE]), run_directory)

    def start(self) -> None:
        self.trial = OptunaTrial(*self.names)

    def after_evaluation(self, actor_steps: int, mean_return: float) -> bool:
        return self.trial.report(actor_steps, mean_return)

    def ended_early(self) -> None:
        self.trial.prune()
