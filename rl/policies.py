"""Action-selection heads named by conf/policy.

A head turns a network's output into an action inside the actor's jitted policy; the
agent's builder composes it with its network in `make_policy`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax


@dataclasses.dataclass(frozen=True)
class Greedy:
    """The best action by value: the evaluation policy of value-based agents."""

    action_kind = "discrete"

    def __call__(self, q_values: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
        del key, step
        return jnp.argmax(q_values, axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class EpsilonGreedy:
    """Random action with probability epsilon, annealed linearly over the actor's steps."""

    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    decay_steps: int = 10_000

    action_kind = "discrete"

    def __post_init__(self) -> None:
        for name in ("epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.decay_steps < 0:
            raise ValueError(f"decay_steps must be >= 0, got {self.decay_steps}")

    def epsilon(self, step: jax.Array) -> jax.Array:
        schedule = optax.linear_schedule(self.epsilon_start, self.epsilon_end, max(1, self.decay_steps))
        return schedule(step)

    def __call__(self, q_values: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
        explore_key, action_key = jax.random.split(key)
        random_action = jax.random.randint(action_key, q_values.shape[:-1], 0, q_values.shape[-1])
        greedy_action = jnp.argmax(q_values, axis=-1)
        explore = jax.random.uniform(explore_key, q_values.shape[:-1]) < self.epsilon(step)
        return jnp.where(explore, random_action, greedy_action).astype(jnp.int32)
