"""A compiled rollout: a policy acting in a vector of gymnax copies for a fixed number
of steps, as one `lax.scan`."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl.environments.gymnax_vector import EnvStep, GymnaxVector, VectorState

# `(params, key, observations, step) -> (actions, extras)`: an agent's policy as its
# builder makes it (rl/agents/*/builder.py, `make_policy`).
Policy = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]


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
    """`length` steps of every copy. Step t uses key split(key, length)[t], itself split
    into the policy's key and the environment's (which the vector splits per copy);
    `policy_step` is the schedules' clock passed to the policy (actor steps so far)."""

    def one_step(state: VectorState, inputs: tuple[jax.Array, jax.Array]) -> tuple[VectorState, Trajectory]:
        step_key, t = inputs
        policy_key, environment_key = jax.random.split(step_key)
        clock = jnp.asarray(policy_step, jnp.int32) + t * environment.num_envs
        action, extras = policy(params, policy_key, state.observation, clock)
        next_state, answer = environment.step(state, action, environment_key)
        return next_state, Trajectory(state.observation, action, extras, answer)

    return jax.lax.scan(one_step, state, (jax.random.split(key, length), jnp.arange(length, dtype=jnp.int32)))


class EpisodeStatistics(NamedTuple):
    """Sums over the episodes that ended in some steps (means are sums / episodes)."""

    episodes: jax.Array
    return_sum: jax.Array
    length_sum: jax.Array


def episode_statistics(step: EnvStep) -> EpisodeStatistics:
    """The episodes that ended in `step` (any leading axes)."""
    return EpisodeStatistics(
        episodes=jnp.sum(step.done.astype(jnp.int32)),
        return_sum=jnp.sum(step.episode_return),
        length_sum=jnp.sum(step.episode_length),
    )
