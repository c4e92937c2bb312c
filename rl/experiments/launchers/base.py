"""What the entry point asks of a launcher (the class `conf/launcher/<name>.yaml` names)."""

from __future__ import annotations

from typing import Any

from rl.experiments.config import ExperimentConfig


class LauncherError(RuntimeError):
    """The run could not start or finish (unreachable cluster, failed learner...): reported
    to the user as a message rather than a traceback."""


class Launcher:
    """Runs an experiment's nodes and returns its `RunSummary` (`__call__`). Before anything
    starts, `fit_experiment` derives or refuses what only this launcher constrains, and a
    resume checks the run's checkpoint against `checkpoint_template` (the learner state this
    launcher saves)."""

    def __call__(self, experiment: ExperimentConfig) -> Any:
        raise NotImplementedError

    def fit_experiment(self, experiment: ExperimentConfig) -> ExperimentConfig:
        return experiment

    def checkpoint_template(self, experiment: ExperimentConfig) -> Any:
        """A freshly built learner's state: the structure, shapes and dtypes a checkpoint
        must have to be resumed."""
        import jax

        from rl.counting import Counter
        from rl.loggers.base import NoOpLogger

        networks = experiment.network_factory(environment_spec=experiment.environment_spec)
        builder = experiment.builder
        learner = builder.make_learner(jax.random.PRNGKey(0), networks, iter(()), None, Counter(), NoOpLogger())
        return learner.save()
