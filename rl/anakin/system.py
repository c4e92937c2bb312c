"""An agent as an anakin *system*, and the compiled programs built from it.

A system (rl/anakin/ppo.py, rl/anakin/off_policy.py) is pure functions over one replica's
whole training state (parameters, optimiser, replay buffer, environment copies, keys):
`init(key)` and `update(state)`, one learner update with the acting that feeds it. A chunk
is `steps_per_chunk` updates in one `lax.scan`, vmapped over replicas and compiled once;
the host only sees the chunks' metrics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl.environments.gymnax_vector import EnvStep, GymnaxVector, VectorState
from rl.experiments.config import ExperimentConfig

# `(params, key, observations, step) -> (actions, extras)`: a builder's `make_policy`.
Policy = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]

# An update that took no SGD step (off-policy, before `min_replay_size`) says so with this
# metric False; its other metrics are placeholders, left out of the chunk's means.
TRAINED = "trained"


def steps_per_update(experiment: ExperimentConfig) -> int:
    """Environment steps (all copies) one learner update consumes."""
    if experiment.builder.anakin == "on_policy":
        return experiment.num_envs * experiment.builder.config.unroll_length
    return experiment.num_envs


class System:
    """The builder's `Learning` and policies on a vector of environment copies. A subclass
    adds `init(key)` and `update(state) -> (state, metrics, EnvStep of its acting)`; its
    state is a NamedTuple whose `learner` is the Learning's state."""

    def __init__(self, experiment: ExperimentConfig, network: Any, environment: GymnaxVector):
        builder, spec = experiment.builder, experiment.environment_spec
        self.config, self.network, self.environment = builder.config, network, environment
        self.steps_per_update = steps_per_update(experiment)
        self.learning = builder.make_learning(network)
        self.behaviour_policy: Policy = builder.make_policy(network, spec, evaluation=False)
        self.evaluation_policy: Policy = builder.make_policy(network, spec, evaluation=True)

    def evaluation_params(self, state: Any) -> Any:
        return self.learning.policy_params(state.learner)

    def learner_steps(self, state: Any) -> jax.Array:
        return self.learning.learner_steps(state.learner)


def make_system(experiment: ExperimentConfig) -> tuple[System, GymnaxVector]:
    """(the system the builder's `anakin` names, on `num_envs` copies of the gymnax
    environment; the evaluation environment, `eval_episodes` copies)."""
    if experiment.builder.anakin == "on_policy":
        from rl.anakin.ppo import PPOSystem as kind
    else:
        from rl.anakin.off_policy import OffPolicySystem as kind
    options = experiment.environment_factory.keywords  # The gymnax factory's name and kwargs.
    network = experiment.network_factory(environment_spec=experiment.environment_spec)
    environment = GymnaxVector(options["name"], experiment.num_envs, options.get("kwargs"))
    evaluation = GymnaxVector(options["name"], experiment.eval_episodes, options.get("kwargs"))
    return kind(experiment, network, environment), evaluation


class Trajectory(NamedTuple):
    """T steps of N copies, each field (T, N, ...): the observation acted on, the action
    and the policy's extras, and what the environment answered (EnvStep)."""

    observation: jax.Array
    action: jax.Array
    extras: Any
    step: EnvStep


def rollout(
    environment: GymnaxVector,
    policy: Policy,
    params: Any,
    state: VectorState,
    key: jax.Array,
    length: int,
    policy_step: jax.Array | int = 0,
) -> tuple[VectorState, Trajectory]:
    """`length` steps of every copy, one `lax.scan`. Step t uses key split(key, length)[t],
    itself split into the policy's key and the environment's (which the vector splits per
    copy); `policy_step` is the schedules' clock passed to the policy (actor steps so far)."""

    def one_step(state: VectorState, inputs: tuple[jax.Array, jax.Array]) -> tuple[VectorState, Trajectory]:
        step_key, t = inputs
        policy_key, environment_key = jax.random.split(step_key)
        clock = jnp.asarray(policy_step, jnp.int32) + t * environment.num_envs
        action, extras = policy(params, policy_key, state.observation, clock)
        next_state, answer = environment.step(state, action, environment_key)
        return next_state, Trajectory(state.observation, action, extras, answer)

    return jax.lax.scan(one_step, state, (jax.random.split(key, length), jnp.arange(length, dtype=jnp.int32)))


def make_chunk(system: System, steps_per_chunk: int) -> Callable[[Any], tuple[Any, dict[str, jax.Array]]]:
    """`state -> (state, metrics)`: `steps_per_chunk` updates of one replica. The metrics
    are the learner's averaged over the updates that trained (NaN if none did: a
    placeholder's zeros are no loss) with their count (`trained_updates`), the episodes
    that ended (`episodes`, `episode_return` and `episode_length` as means) and
    `learner_steps`."""

    def body(state: Any, _: None) -> tuple[Any, tuple[dict[str, jax.Array], tuple[jax.Array, ...]]]:
        state, metrics, step = system.update(state)
        ended = (jnp.sum(step.done.astype(jnp.int32)), jnp.sum(step.episode_return), jnp.sum(step.episode_length))
        return state, (metrics, ended)

    def chunk(state: Any) -> tuple[Any, dict[str, jax.Array]]:
        state, (metrics, (episodes, returns, lengths)) = jax.lax.scan(body, state, None, length=steps_per_chunk)
        trained = metrics.pop(TRAINED, jnp.ones((steps_per_chunk,), bool))
        updates = jnp.sum(trained)

        def mean(values: jax.Array) -> jax.Array:
            mask = jnp.reshape(trained, trained.shape + (1,) * (values.ndim - 1))
            total = jnp.sum(jnp.where(mask, values, 0), axis=0)
            return jnp.where(updates > 0, total / jnp.maximum(updates, 1), jnp.nan)

        episodes = jnp.sum(episodes)
        count = jnp.maximum(episodes, 1).astype(jnp.float32)
        summary = {
            **{name: mean(values) for name, values in metrics.items()},
            "trained_updates": updates,
            "episodes": episodes,
            "episode_return": jnp.sum(returns) / count,
            "episode_length": jnp.sum(lengths).astype(jnp.float32) / count,
            "learner_steps": system.learner_steps(state),
        }
        return state, summary

    return chunk


class EvaluationResult(NamedTuple):
    """Each copy's first episode: its return and length (num_episodes,)."""

    returns: jax.Array
    lengths: jax.Array


def evaluate(environment: GymnaxVector, policy: Policy, params: Any, key: jax.Array) -> EvaluationResult:
    """A compiled evaluation round: every copy runs until its first episode ends (a
    `lax.while_loop`, at most one step more than the environment's episode limit); copies
    that have finished keep stepping but are no longer counted, and a copy still running
    at the limit counts what it has."""
    reset_key, key = jax.random.split(key)
    limit = getattr(environment.params, "max_steps_in_episode", None)
    limit = int(limit) + 1 if limit is not None else 100_000  # No episode limit: 100,000 steps at most.
    zeros = jnp.zeros((environment.num_envs,), jnp.float32)
    finished = jnp.zeros((environment.num_envs,), bool)

    def running(carry: tuple) -> jax.Array:
        _, _, _, _, finished, t = carry
        return jnp.logical_and(~jnp.all(finished), t < limit)

    def one_step(carry: tuple) -> tuple:
        state, key, returns, lengths, finished, t = carry
        key, policy_key, environment_key = jax.random.split(key, 3)
        action, _ = policy(params, policy_key, state.observation, t)
        state, answer = environment.step(state, action, environment_key)
        counted = ~finished
        returns = returns + jnp.where(counted, answer.reward, 0.0)
        lengths = lengths + counted.astype(jnp.float32)
        return state, key, returns, lengths, finished | answer.done, t + 1

    carry = (environment.reset(reset_key), key, zeros, zeros, finished, jnp.zeros((), jnp.int32))
    _, _, returns, lengths, _, _ = jax.lax.while_loop(running, one_step, carry)
    return EvaluationResult(returns, lengths)
