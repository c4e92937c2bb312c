"""conf/launcher/anakin.yaml: a whole run compiled into one JAX program; what it cannot run is a
ConfigError naming the key, before compiling."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from rl.environments.factories import is_jax_native
from rl.experiments.config import ExperimentConfig
from rl.experiments.launchers.base import Launcher
from rl.experiments.summary import RunSummary
from rl.experiments.make_experiment import ConfigError

log = logging.getLogger(__name__)

# XLA's CPU thunk runtime is slower on these long `lax.scan`s of small operations (docs/anakin.md), unless
# each device runs many replicas (a grid: docs/performance.md).
CPU_XLA_FLAGS = "--xla_cpu_use_thunk_runtime=false"


def set_xla_flags(flags: str = CPU_XLA_FLAGS) -> bool:
    """Sets XLA_FLAGS to `flags` unless set (even empty) or a JAX backend has started; says whether it did."""
    from jax._src import xla_bridge

    if "XLA_FLAGS" in os.environ or xla_bridge.backends_are_initialized():
        return False
    os.environ["XLA_FLAGS"] = flags
    return True


def _rounded(experiment: ExperimentConfig, key: str, step: int, why: str) -> ExperimentConfig:
    value = getattr(experiment, key)
    if value % step == 0:
        return experiment
    rounded = max(step, round(value / step) * step)
    log.warning("launcher=anakin: %s=%d rounded to %d, %s", key, value, rounded, why)
    return dataclasses.replace(experiment, **{key: rounded})


def steps_per_update(experiment: ExperimentConfig) -> int:
    """Environment steps (all copies) one learner update consumes: an on-policy rollout, else one step."""
    on_policy = experiment.builder.anakin == "on_policy"
    return experiment.num_envs * (experiment.builder.config.unroll_length if on_policy else 1)


class AnakinLauncher(Launcher):
    """`num_seeds` replicas in one compiled program; `steps_per_chunk` updates (null: an evaluation
    period's) per host call."""

    def __init__(self, num_seeds: int = 1, steps_per_chunk: int | None = None):
        if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or num_seeds < 1:
            raise ConfigError(
                "launcher.num_seeds", f"must be an integer >= 1 (replicas trained side by side), got {num_seeds!r}"
            )
        if steps_per_chunk is not None and (isinstance(steps_per_chunk, bool) or steps_per_chunk < 1):
            raise ConfigError("launcher.steps_per_chunk", f"must be an integer >= 1 or null, got {steps_per_chunk!r}")
        self.num_seeds, self.steps_per_chunk = num_seeds, steps_per_chunk
        set_xla_flags()  # Made before any program is compiled.

    def fit_experiment(self, experiment: ExperimentConfig) -> ExperimentConfig:
        """The experiment with an on-policy batch of one rollout, whole updates and chunks, checked."""
        builder = experiment.builder
        if builder.anakin is None:
            raise ConfigError(
                "agent",
                f"launcher=anakin does not compile agent={experiment.agent_name} (its builder names no `anakin` "
                "system); use launcher=local or launcher=ray for it",
            )
        if builder.anakin == "on_policy" and builder.config.batch_size != experiment.num_envs:
            log.warning(
                "launcher=anakin: agent.batch_size=%d set to environment.num_envs=%d (a batch is one rollout of every copy)",
                builder.config.batch_size,
                experiment.num_envs,
            )
            try:
                config = dataclasses.replace(builder.config, batch_size=experiment.num_envs)
            except ValueError as error:
                raise ConfigError(
                    "agent.batch_size", f"follows environment.num_envs under launcher=anakin: {error}"
                ) from None
            experiment = dataclasses.replace(experiment, builder=type(builder)(config, exploration=builder.exploration))
        per_update = steps_per_update(experiment)
        if self.steps_per_chunk is None:
            whole = f"whole updates of {per_update} environment steps (one chunk each)"
            experiment = _rounded(experiment, "eval_every", per_update, whole)
        chunk = (self.steps_per_chunk or experiment.eval_every // per_update) * per_update
        experiment = _rounded(experiment, "max_actor_steps", chunk, f"whole chunks of {chunk} environment steps")
        self.check_experiment(experiment)
        return experiment

    def check_experiment(self, experiment: ExperimentConfig) -> int:
        """Refuses a (fitted) experiment this launcher cannot run; returns the updates per chunk."""
        if not is_jax_native(experiment.environment_factory):
            raise ConfigError(
                "environment",
                f"launcher=anakin compiles the environment into its program and needs a JAX environment "
                f"(environment=gymnax environment.name=...); '{experiment.environment_name}' is not one",
            )
        if experiment.observers:
            raise ConfigError("observers", "launcher=anakin runs no observers; remove them (observers=[])")
        config = experiment.builder.config
        if experiment.builder.anakin == "on_policy" and config.normalize_observations:
            raise ConfigError(
                "agent.normalize_observations", "is not supported by launcher=anakin yet; set it to false"
            )
        if experiment.builder.anakin == "off_policy":
            sgd_steps = experiment.num_envs * config.samples_per_insert / config.batch_size
            if sgd_steps < 1 or abs(sgd_steps - round(sgd_steps)) > 1e-9:
                raise ConfigError(
                    "agent.samples_per_insert",
                    f"under launcher=anakin each step of the {experiment.num_envs} environment copies inserts "
                    f"{experiment.num_envs} transitions and takes num_envs * samples_per_insert / batch_size SGD "
                    f"steps, which must be a whole number >= 1; got {sgd_steps:g}",
                )
            if config.prioritized:
                raise ConfigError(
                    "agent.prioritized", "prioritized replay is not supported by launcher=anakin yet; set it to false"
                )
        per_update = steps_per_update(experiment)
        steps_per_chunk = self.steps_per_chunk or experiment.eval_every // per_update
        if not steps_per_chunk or experiment.max_actor_steps % (steps_per_chunk * per_update):
            raise ConfigError("max_actor_steps", "is not whole chunks of whole updates (see `fit_experiment`)")
        return steps_per_chunk

    def checkpoint_template(self, experiment: ExperimentConfig) -> Any:
        """Every replica's training state traced; a CheckpointError when chunks would miss the budget."""
        import jax

        from rl import checkpointing
        from rl.anakin.driver import replica_keys
        from rl.anakin.system import make_system

        latest, _ = checkpointing.find_latest(experiment.run_directory, warn=False)
        chunk_steps = self.check_experiment(experiment) * steps_per_update(experiment)
        steps = checkpointing.step_of(latest) if latest is not None else None
        if steps is not None and (experiment.max_actor_steps - steps) % chunk_steps:
            raise checkpointing.CheckpointError(
                f"the checkpoint is at {steps} actor steps; chunks of {chunk_steps} steps do not reach "
                f"max_actor_steps={experiment.max_actor_steps} from there: resume with the run's own "
                "launcher.steps_per_chunk"
            )
        return jax.eval_shape(jax.vmap(make_system(experiment)[0].init), replica_keys(experiment.seed, self.num_seeds))

    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        from rl.anakin.driver import AnakinNodes
        from rl.experiments import lifecycle

        return lifecycle.run(experiment, AnakinNodes(self.num_seeds, self.check_experiment(experiment)))
