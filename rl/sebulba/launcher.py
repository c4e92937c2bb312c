"""conf/launcher/sebulba.yaml: environments stepped on the host's cores by actor threads, the agent's policy
and learner compiled on the device (Podracer's Sebulba); what it cannot run is a ConfigError naming the key,
before anything starts."""

from __future__ import annotations

import dataclasses
from typing import Any

from rl.experiments.compiled import derive_settings, evaluation_interval, make_system, replica_keys, rounded
from rl.experiments.compiled import steps_per_update, system_class
from rl.experiments.config import Experiment
from rl.experiments.launcher import Launcher
from rl.experiments.summary import RunSummary
from rl.experiments.validation import ConfigError
from rl.environments.factories import is_jax_native
from rl.observers import GameScore
from rl.sebulba.settings import SebulbaSettings, block_length, copies_per_replica


class SebulbaLauncher(Launcher):
    """`num_seeds` replicas learning in one compiled program from `actor_threads` host threads, each stepping
    `environment.num_envs` copies of every replica (docs/sebulba.md)."""

    replay_sized_by_budget = True

    def __init__(
        self,
        num_seeds: int = 1,
        actor_threads: int = 1,
        block_length: int = 32,
        policy_lag: int = 1,
        actor_device: str = "auto",
        environment_threads: int | None = None,
        evaluation_processes: int = 0,
    ):
        self.settings = SebulbaSettings(
            num_seeds, actor_threads, block_length, policy_lag, actor_device, environment_threads, evaluation_processes
        )
        self.settings.check()
        self.num_seeds = self.settings.num_seeds

    def fit_experiment(self, experiment: Experiment) -> Experiment:
        """The experiment with the values its system derives, budgets in whole updates, checked."""
        settings = self.settings
        system_class(experiment, "sebulba")  # Refuses an agent that names no compiled system.
        if is_jax_native(experiment.environment_factory):
            raise ConfigError(
                "launcher",
                "a gymnax environment compiles into the program itself: use launcher=anakin for it "
                "(launcher=sebulba steps gymnasium, MuJoCo, dm_control and Atari environments on the host)",
            )
        if experiment.vector_environment_factory is not None:
            raise ConfigError(
                "environment.backend",
                "launcher=sebulba steps Atari in ale-py's vector environment and other environments as copies "
                "per actor thread; set environment.backend=gymnasium",
            )
        if any(observer is not GameScore for observer in experiment.observers):  # Its records carry game scores.
            raise ConfigError("observers", "launcher=sebulba runs no observers; remove them (observers=[])")
        copies = copies_per_replica(experiment, settings)
        length = block_length(experiment, settings)
        experiment = derive_settings(experiment, "sebulba", copies, length)
        refusal = system_class(experiment, "sebulba").refusal(experiment.builder.config, copies, length)
        if refusal is not None:
            raise ConfigError(refusal.key, refusal.message)
        per_update = steps_per_update(experiment, "sebulba", length, copies)
        whole = f"whole updates of {per_update} environment steps"
        eval_every = evaluation_interval("sebulba", experiment.eval_every, per_update, whole)
        budget = rounded("sebulba", "max_actor_steps", experiment.max_actor_steps, per_update, whole)
        return dataclasses.replace(experiment, eval_every=eval_every, max_actor_steps=budget)

    def checkpoint_template(self, experiment: Experiment) -> Any:
        """Every replica's learner state (and replay), traced."""
        import jax

        from rl.sebulba.programs import host_inputs

        system = make_system(experiment, inputs=host_inputs(experiment, self.settings))
        return jax.eval_shape(jax.vmap(system.init_learner), replica_keys(experiment.seed, self.num_seeds))

    def replica_learners(self, experiment: Experiment, checkpoint: str) -> Any:
        """The agent's learner states (replicas first) in the run's `checkpoint`."""
        import jax

        from rl.checkpointing import restore_learner_state
        from rl.sebulba.programs import host_inputs

        state = restore_learner_state(checkpoint, self.checkpoint_template(experiment))
        return jax.vmap(make_system(experiment, inputs=host_inputs(experiment, self.settings)).learner_of)(state)

    def __call__(self, experiment: Experiment) -> RunSummary:
        from rl.experiments import lifecycle
        from rl.sebulba.nodes import SebulbaNodes

        nodes = SebulbaNodes(self.settings)
        return lifecycle.run(lifecycle.RunContext.make(experiment), nodes, experiment.hooks)
