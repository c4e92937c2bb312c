"""What launcher=anakin derives and refuses, on the composed experiment before anything is
compiled: a value that must follow another is derived and said once in the log; every
refusal is a ConfigError naming the key (exit status 2, one line)."""

from __future__ import annotations

import dataclasses
import logging

from rl.environments.factories import is_jax_native
from rl.experiments.config import ExperimentConfig
from rl.experiments.validation import ConfigError

log = logging.getLogger(__name__)


def anakin_kind(experiment: ExperimentConfig) -> str:
    """How the agent compiles under launcher=anakin (its builder's `anakin`)."""
    kind = experiment.builder.anakin
    if kind is None:
        raise ConfigError(
            "agent",
            f"launcher=anakin does not compile agent={experiment.agent_name} (its builder names no `anakin` "
            "system); use launcher=local or launcher=ray for it",
        )
    return kind


def steps_per_update(experiment: ExperimentConfig) -> int:
    """Environment steps (all copies) one learner update consumes."""
    config = experiment.builder.config
    if anakin_kind(experiment) == "on_policy":
        return experiment.num_envs * config.unroll_length
    return experiment.num_envs


def _check_ppo(experiment: ExperimentConfig) -> None:
    config = experiment.builder.config
    if config.normalize_observations:
        raise ConfigError("agent.normalize_observations", "is not supported by launcher=anakin yet; set it to false")


def _check_off_policy(experiment: ExperimentConfig) -> None:
    """Whole SGD steps per update (rl/anakin/off_policy.py)."""
    config = experiment.builder.config
    sgd_steps = experiment.num_envs * config.samples_per_insert / config.batch_size
    if sgd_steps < 1 or abs(sgd_steps - round(sgd_steps)) > 1e-9:
        raise ConfigError(
            "agent.samples_per_insert",
            f"under launcher=anakin each step of the {experiment.num_envs} environment copies inserts "
            f"{experiment.num_envs} transitions and takes num_envs * samples_per_insert / batch_size SGD steps, "
            f"which must be a whole number >= 1; got {sgd_steps:g}",
        )
    if getattr(config, "prioritized", False):
        raise ConfigError(
            "agent.prioritized", "prioritized replay is not supported by launcher=anakin yet; set it to false"
        )


def _nearest_multiple(value: int, step: int) -> int:
    return max(step, round(value / step) * step)


def fit_experiment(experiment: ExperimentConfig, steps_per_chunk: int | None) -> ExperimentConfig:
    """The experiment with what must follow what under launcher=anakin derived, each
    change logged once: an on-policy batch is one rollout of every copy (batch_size =
    num_envs); with `steps_per_chunk` null a chunk is one evaluation period, so
    `eval_every` is whole updates; `max_actor_steps` is whole chunks."""
    if anakin_kind(experiment) == "on_policy" and experiment.builder.config.batch_size != experiment.num_envs:
        builder = experiment.builder
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
    if steps_per_chunk is None and experiment.eval_every % per_update:
        eval_every = _nearest_multiple(experiment.eval_every, per_update)
        log.warning(
            "launcher=anakin: eval_every=%d rounded to %d, whole updates of %d environment steps (one chunk each)",
            experiment.eval_every,
            eval_every,
            per_update,
        )
        experiment = dataclasses.replace(experiment, eval_every=eval_every)
    chunk = (steps_per_chunk or experiment.eval_every // per_update) * per_update
    if experiment.max_actor_steps % chunk:
        budget = _nearest_multiple(experiment.max_actor_steps, chunk)
        log.warning(
            "launcher=anakin: max_actor_steps=%d rounded to %d, whole chunks of %d environment steps",
            experiment.max_actor_steps,
            budget,
            chunk,
        )
        experiment = dataclasses.replace(experiment, max_actor_steps=budget)
    return experiment


def check_experiment(experiment: ExperimentConfig, steps_per_chunk: int | None) -> int:
    """Refuses an experiment launcher=anakin cannot run (after `fit_experiment`); returns
    the updates per chunk."""
    if not is_jax_native(experiment.environment_factory):
        raise ConfigError(
            "environment",
            f"launcher=anakin compiles the environment into its program and needs a JAX environment "
            f"(environment=gymnax environment.name=...); '{experiment.environment_name}' is not one",
        )
    kind = anakin_kind(experiment)
    if experiment.observers:
        raise ConfigError("observers", "launcher=anakin runs no observers; remove them (observers=[])")
    (_check_ppo if kind == "on_policy" else _check_off_policy)(experiment)
    per_update = steps_per_update(experiment)
    if steps_per_chunk is None:
        steps_per_chunk = experiment.eval_every // per_update
    if not steps_per_chunk or experiment.max_actor_steps % (steps_per_chunk * per_update):
        raise ConfigError("max_actor_steps", "is not whole chunks of whole updates (see `fit_experiment`)")
    return steps_per_chunk
