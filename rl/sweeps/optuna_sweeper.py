"""The pruning sweeper's work: a study with a pruner in a storage the jobs share, the ask / launch /
tell loop (a trial its job pruned is already told), and the results: the best trial, its config
and plots of the study, in the sweep directory."""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import warnings
from typing import Any, Dict, List, Sequence

import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides
from omegaconf import OmegaConf
from optuna.trial import TrialState

from rl.sweeps import pruning
from rl.sweeps.results import Trial, rank_settings

log = logging.getLogger(__name__)

STORAGE_FILE = "optuna.db"  # In the sweep directory, when `storage` is null.
RESULTS_FILE = "optimization_results.yaml"
BEST_CONFIG_FILE = "best_config.yaml"


def hydra_string(key: str, value: str) -> str:
    """A quoted Hydra override of `key` (a URL or a name may hold `:`, `/` or `=`)."""
    if "'" in value or "\\" in value or "${" in value:
        raise ConfigCompositionException(f"{key}: {value!r} cannot hold quotes, backslashes or '${{'")
    return f"'{value}'"


class PruningOptunaSweeperImpl(OptunaSweeperImpl):
    def __init__(self, pruner: Any, **settings: Any) -> None:
        super().__init__(**settings)
        self.pruner = pruner

    def distributions(self, arguments: List[str]) -> tuple[Dict[str, Any], Dict[str, Any]]:
        """The distributions to sample and the fixed overrides, as Hydra's Optuna sweeper reads them
        (`hydra.sweeper.params` and the command line's sweeps); a grid sampler gets its grid."""
        self._process_searchspace_config()
        space, fixed = create_params_from_overrides(self._parse_sweeper_params_config() + list(arguments))
        space = {**(self.search_space_distributions or {}), **space}
        for name in fixed:
            space.pop(name, None)
        if isinstance(self.sampler, functools.partial) and self.sampler.func is optuna.samplers.GridSampler:
            grid = {name: self._to_grid_sampler_choices(distribution) for name, distribution in space.items()}
            self.sampler = self.sampler(grid)
            self.n_trials = min(self.n_trials, math.prod(len(choices) for choices in grid.values()))
        return space, fixed

    def sweep(self, arguments: List[str]) -> None:
        directions = self._get_directions()
        if len(directions) != 1:
            raise ConfigCompositionException(
                f"hydra.sweeper.direction: a search that prunes has one objective, got {directions}"
            )
        space, fixed = self.distributions(arguments)
        sqlite = os.path.join(os.path.abspath(str(self.sweep_dir)), STORAGE_FILE)
        url = str(self.storage) if self.storage is not None else f"sqlite:///{sqlite}"
        os.makedirs(str(self.sweep_dir), exist_ok=True)
        storage = pruning.open_storage(url)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=storage,
            sampler=self.sampler,
            pruner=self.pruner,
            direction=directions[0],
            load_if_exists=True,
        )
        pruner_spec = OmegaConf.to_container(self.config.hydra.sweeper.pruner, resolve=True)
        study.set_user_attr(pruning.PRUNER_ATTRIBUTE, pruner_spec)  # What each job prunes by.
        # Job n is trial n, also when a search carries on a study: its directories are new ones.
        self.job_idx = max(self.job_idx, len(study.get_trials(deepcopy=False)))
        log.info(
            f"Study {study.study_name} in {url}; pruner {type(self.pruner).__name__}, sampler {type(self.sampler).__name__}"
        )
        # Environment variables for each job only (Hydra restores them after it).
        environment = [
            f"++hydra.job.env_set.{pruning.STORAGE_VARIABLE}={hydra_string('hydra.sweeper.storage', url)}",
            f"++hydra.job.env_set.{pruning.STUDY_VARIABLE}={hydra_string('hydra.sweeper.study_name', study.study_name)}",
        ]
        remaining = self.n_trials
        while remaining > 0:
            study = self.reload(study, storage)
            trials = [study.ask() for _ in range(min(remaining, self.n_jobs))]
            overrides = [
                (*trial_overrides, *environment, f"++hydra.job.env_set.{pruning.TRIAL_VARIABLE}={trial.number}")
                for trial, trial_overrides in zip(trials, self._configure_trials(trials, space, fixed))
            ]
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            self.tell(study, storage, trials, returns)
            remaining -= len(trials)
        write_results(self.reload(study, storage), str(self.sweep_dir), url, pruner_spec)

    def reload(self, study: optuna.Study, storage: Any) -> optuna.Study:
        """The study as its storage has it now: a Study caches the trials it asked for as running, but
        their jobs may have pruned them since."""
        return optuna.load_study(study_name=study.study_name, storage=storage, sampler=self.sampler, pruner=self.pruner)

    def tell(
        self, study: optuna.Study, storage: Any, trials: Sequence[optuna.trial.Trial], returns: Sequence[JobReturn]
    ) -> None:
        """Tells the study what its jobs returned: a job that raised fails its trial (and the sweep, past
        `max_failure_rate`); a non-finite value fails it (a refused job); a pruned trial is already told."""
        raised = [job for job in returns if job.status == JobStatus.FAILED]
        for trial, job in zip(trials, returns):
            if pruning.trial_state(storage, study.study_name, trial.number).is_finished():
                continue  # Pruned by its job.
            value = job.return_value if job.status == JobStatus.COMPLETED else None
            try:
                value = float(value) if value is not None else math.nan
            except (TypeError, ValueError):
                raise ValueError(f"a job must return a number to the sweeper, got {value!r}") from None
            try:
                if math.isfinite(value):
                    study.tell(trial, value)
                else:
                    log.warning(f"Trial {trial.number} failed (its job returned {value})")
                    study.tell(trial, state=TrialState.FAIL)
            except RuntimeError as error:  # A grid sampler stops the study when its grid is done.
                if "Study.stop" not in str(error):
                    raise
        if raised and len(raised) / len(returns) > self.max_failure_rate:
            _ = raised[0].return_value  # Raises the job's own error, with its traceback.


def write_results(study: optuna.Study, sweep_dir: str, url: str, pruner_spec: Any) -> None:
    """`optimization_results.yaml` (the best trial's parameters, value, number and directory, and how
    many trials completed, were pruned or failed), the best job's config as `best_config.yaml`, and
    plots of the study."""
    trials = study.get_trials(deepcopy=False)
    counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState if state.is_finished()}
    results: Dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "storage": url}
    results |= {"pruner": pruner_spec, "trials": counts}
    if counts["complete"]:
        best = study.best_trial
        directory = best.user_attrs.get(pruning.DIRECTORY_ATTRIBUTE)
        results |= {"best_params": best.params, "best_value": best.value, "best_trial": best.number}
        results["best_directory"] = directory
        config = os.path.join(directory or "", ".hydra", "config.yaml")
        if directory and os.path.isfile(config):
            shutil.copyfile(config, os.path.join(sweep_dir, BEST_CONFIG_FILE))
        log.info(f"Best trial {best.number} ({best.value}): {best.params} in {directory}")
        setting = best_setting(study)
        if setting is not None:
            results["best_setting"] = setting
            log.info(f"Best setting over seeds: mean {setting['mean']:.1f} of trials {list(setting['jobs'])}")
    log.info(f"Trials: {counts}")
    OmegaConf.save(OmegaConf.create(results), os.path.join(sweep_dir, RESULTS_FILE))
    plot_study(study, sweep_dir, counts["complete"] > 0)


def best_setting(study: optuna.Study) -> Dict[str, Any] | None:
    """Where the search's parameters include the seed, its completed trials grouped into settings (their
    parameters but the seed) and the best by the mean over seeds (rl.sweeps.results), with its
    trials' numbers and values; None where every setting ran once (the best trial is then the best setting)."""
    complete = [trial for trial in study.get_trials(deepcopy=False) if trial.state == TrialState.COMPLETE]
    trials = [Trial(str(t.number), tuple(f"{k}={v}" for k, v in t.params.items()), t.value) for t in complete]
    settings = rank_settings(trials, maximize=study.direction == optuna.study.StudyDirection.MAXIMIZE)
    if all(len(setting.trials) == 1 for setting in settings):
        return None
    described = settings[0].describe()
    described.pop("command")  # The trials' parameters, not a command line: `overrides` says them.
    return described


def plot_study(study: optuna.Study, sweep_dir: str, completed: bool) -> None:
    """The optimisation history (value per trial, best so far; only once a trial completed) and every
    trial's evaluation curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    history = {"optimization_history.png": plots.plot_optimization_history} if completed else {}
    for name, plot in {**history, "intermediate_values.png": plots.plot_intermediate_values}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            axes = plot(study)
        for line in axes.get_lines():  # A trial pruned at its first report has one point: a marker shows it.
            line.set_marker("o")
            line.set_markersize(3)
        axes.figure.savefig(os.path.join(sweep_dir, name), dpi=100, bbox_inches="tight")
        plt.close(axes.figure)
