"""A compiled evaluation round: `num_episodes` copies of the environment, one episode
each, side by side, with the agent's evaluation policy."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rl.anakin.rollout import Policy
from rl.environments.gymnax_vector import GymnaxVector

# Steps an evaluation round may take when the environment names no episode limit.
DEFAULT_STEP_LIMIT = 100_000


class EvaluationResult(NamedTuple):
    """Each copy's first episode: its return and length (num_episodes,)."""

    returns: jax.Array
    lengths: jax.Array


def step_limit(environment: GymnaxVector) -> int:
    """The most steps a round takes: one more than the environment's episode limit."""
    limit = getattr(environment.params, "max_steps_in_episode", None)
    return int(limit) + 1 if limit is not None else DEFAULT_STEP_LIMIT


def evaluate(environment: GymnaxVector, policy: Policy, params: Any, key: jax.Array) -> EvaluationResult:
    """Runs every copy until its first episode ends (a `lax.while_loop`); copies that
    have finished keep stepping but are no longer counted. A copy still running at the
    step limit counts what it has."""
    reset_key, key = jax.random.split(key)
    limit = step_limit(environment)
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
