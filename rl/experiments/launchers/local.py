"""conf/launcher/local.yaml: every node in this process."""

from __future__ import annotations

from rl.experiments.config import ExperimentConfig
from rl.experiments.launchers.base import Launcher
from rl.experiments.summary import RunSummary


class LocalLauncher(Launcher):
    """Runs every node in this process.

    `deterministic=False` (the default) steps the learner on its own thread beside the
    actor; `True` makes the run a function of its command (rl/experiments/run_local.py):
    one thread in a fixed order and in-process replay with a seeded choice of items.
    """

    def __init__(self, deterministic: bool = False):
        self.deterministic = deterministic

    def fit_experiment(self, experiment: ExperimentConfig) -> ExperimentConfig:
        """Refuses settings the deterministic mode would otherwise ignore without a word.
        (`checkpoint.replay` is not one: a deterministic checkpoint always holds its
        in-process replay, which an exact resume needs.)"""
        if self.deterministic and experiment.checkpoint.enabled:
            _check_environment_saves(experiment)
        return experiment

    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        from rl.experiments.run_local import run_local  # Replay (reverb, TensorFlow) loads when a run starts.
        from rl.quiet import reverb_info_filtered

        with reverb_info_filtered():  # Only our own lines: reverb's INFO lines are dropped.
            return run_local(experiment, deterministic=self.deterministic)


def _check_environment_saves(experiment: ExperimentConfig) -> None:
    """A deterministic checkpoint pickles the environments mid-episode (exact resume):
    refuses, before anything starts, environments that cannot be pickled."""
    import pickle

    from rl.experiments.validation import ConfigError

    if experiment.vector_environment_factory is not None:
        raise ConfigError(
            "environment.backend",
            "launcher.deterministic=true saves its environments in every checkpoint, which envpool's cannot be; "
            "use environment.backend=gymnasium, or checkpoint=false",
        )
    environment = experiment.environment_factory(seed=0)
    try:
        environment.reset()
        pickle.dumps(environment)
    except Exception as error:  # noqa: BLE001 - whatever pickling raises, the answer is the same.
        raise ConfigError(
            "launcher.deterministic",
            f"a deterministic checkpoint saves the environments, and '{experiment.environment_name}' cannot be "
            f"pickled ({type(error).__name__}: {error}); set checkpoint=false to run without checkpoints",
        ) from None
    finally:
        environment.close()
