"""conf/launcher/anakin.yaml: a whole run compiled into one JAX program."""

from __future__ import annotations

from typing import Any

from rl.experiments.config import ExperimentConfig
from rl.experiments.launchers.base import Launcher
from rl.experiments.summary import RunSummary


class AnakinLauncher(Launcher):
    """Acting, replay and learning of `num_seeds` replicas in one compiled program
    (Podracer's "Anakin"): `steps_per_chunk` learner updates (with the acting that feeds
    them) per call from the host, vmapped over replicas. Needs a JAX environment
    (environment=gymnax). `steps_per_chunk: null` makes one chunk per evaluation period.
    Checkpoints hold the whole training state of every replica (rl/anakin/driver.py);
    the same command resumes a stopped run.
    """

    def __init__(self, num_seeds: int = 1, steps_per_chunk: int | None = None):
        from rl.experiments.validation import ConfigError

        if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or num_seeds < 1:
            raise ConfigError(
                "launcher.num_seeds", f"must be an integer >= 1 (replicas trained side by side), got {num_seeds!r}"
            )
        if steps_per_chunk is not None and (isinstance(steps_per_chunk, bool) or steps_per_chunk < 1):
            raise ConfigError("launcher.steps_per_chunk", f"must be an integer >= 1 or null, got {steps_per_chunk!r}")
        self.num_seeds = num_seeds
        self.steps_per_chunk = steps_per_chunk
        # Before anything starts JAX's backends (the launcher is made before any program
        # is compiled): XLA's faster CPU runtime for these programs (rl/anakin/startup.py).
        from rl.anakin.startup import prefer_fast_cpu_runtime

        prefer_fast_cpu_runtime()

    def fit_experiment(self, experiment: ExperimentConfig) -> ExperimentConfig:
        """The experiment with what this launcher derives (logged), checked: refuses what
        it cannot run (a ConfigError naming the key) before anything is compiled."""
        from rl.anakin.checks import fit_experiment

        experiment = fit_experiment(experiment, self.steps_per_chunk)
        self.check_experiment(experiment)
        return experiment

    def check_experiment(self, experiment: ExperimentConfig) -> int:
        """The updates per chunk of a fitted experiment (refusing what cannot run)."""
        from rl.anakin.checks import check_experiment

        return check_experiment(experiment, self.steps_per_chunk)

    def checkpoint_template(self, experiment: ExperimentConfig) -> Any:
        """The structure, shapes and dtypes of what this launcher checkpoints (every
        replica's training state), for the resume checks; nothing is compiled. Refuses
        (CheckpointError) a resume whose chunks would not end at the budget."""
        import jax

        from rl import checkpointing
        from rl.anakin.driver import chunks_do_not_reach, state_template
        from rl.anakin.replicas import replica_keys
        from rl.anakin.systems import make_system

        system, _ = make_system(experiment)
        latest, _ = checkpointing.find_latest(experiment.run_directory, warn=False)
        chunk_steps = self.check_experiment(experiment) * system.steps_per_update
        if latest is not None and (experiment.max_actor_steps - checkpointing.step_of(latest)) % chunk_steps:
            message = chunks_do_not_reach(checkpointing.step_of(latest), chunk_steps, experiment.max_actor_steps)
            raise checkpointing.CheckpointError(message)
        return state_template(jax.vmap(system.init), replica_keys(experiment.seed, self.num_seeds))

    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        from rl.anakin.driver import run_anakin
        from rl.anakin.systems import make_system

        steps_per_chunk = self.check_experiment(experiment)
        system, evaluation_environment = make_system(experiment)
        return run_anakin(experiment, system, evaluation_environment, self.num_seeds, steps_per_chunk)
