"""What launcher=anakin refuses, checked on the composed experiment before anything is
compiled: every refusal is a ConfigError naming the key (exit status 2, one line)."""

from __future__ import annotations

from rl.environments.gymnax_factory import is_jax_native
from rl.experiments.config import ExperimentConfig
from rl.experiments.validation import ConfigError


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
    if config.batch_size != experiment.num_envs:
        raise ConfigError(
            "agent.batch_size",
            f"under launcher=anakin a PPO batch is one rollout of every environment copy, so batch_size must equal "
            f"environment.num_envs={experiment.num_envs}, got {config.batch_size}",
        )
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


def check_experiment(experiment: ExperimentConfig, steps_per_chunk: int | None) -> int:
    """Refuses an experiment launcher=anakin cannot run; returns the updates per chunk."""
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
    budget = experiment.max_actor_steps
    if steps_per_chunk is None:
        if experiment.eval_every % per_update:
            raise ConfigError(
                "eval_every",
                f"with launcher.steps_per_chunk=null a chunk is one evaluation period, so eval_every must be a multiple "
                f"of the {per_update} environment steps of one update; got {experiment.eval_every}",
            )
        steps_per_chunk = experiment.eval_every // per_update
        key = "eval_every"
    else:
        key = "launcher.steps_per_chunk"
    chunk = steps_per_chunk * per_update
    if budget % chunk:
        raise ConfigError(
            key,
            f"a chunk of {steps_per_chunk} updates x {per_update} environment steps = {chunk} steps does not divide "
            f"max_actor_steps={budget}; make max_actor_steps a multiple of {chunk} (e.g. {max(chunk, budget // chunk * chunk)})",
        )
    return steps_per_chunk
