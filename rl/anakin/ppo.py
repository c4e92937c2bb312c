"""PPO as an anakin system: one update = `unroll_length` steps of `num_envs` copies, as
`num_envs` sequences of `unroll_length + 1` rows (the last only bootstraps), through the
reverb PPO's own learner update (rl/agents/ppo/builder.py `ppo_update`).

A termination has discount 0. A truncation (time limit) should bootstrap from the
episode's final observation, but the next row holds the next episode's first one; so the
row's reward becomes r_t + gamma * V(final observation) and its discount 0, which gives
GAE the same delta_t and stops the trace there:

    delta_t = r_t + gamma * V(s_final) - V(s_t)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rl.agents.builder import Batch
from rl.agents.ppo.builder import TrainingState
from rl.anakin.system import System, Trajectory, rollout
from rl.environments.gymnax_vector import EnvStep, VectorState


class Sequences(NamedTuple):
    """A batch with the fields of rl.replay.sequences.SequenceStep (what `ppo_update`
    reads), without importing reverb; each field is (N, T + 1, ...)."""

    observation: Any
    action: Any
    reward: jax.Array
    discount: jax.Array
    mask: jax.Array
    extras: Any


class PPOState(NamedTuple):
    learner: TrainingState
    environment: VectorState
    key: jax.Array


def _with_row(rows: jax.Array, last: jax.Array) -> jax.Array:
    """(T, N, ...) rows and an (N, ...) last row -> (N, T + 1, ...) sequences."""
    return jnp.swapaxes(jnp.concatenate([rows, last[None]], axis=0), 0, 1)


def to_sequences(
    trajectory: Trajectory, last_observation: jax.Array, final_values: jax.Array, gamma: float
) -> Sequences:
    """A rollout as N sequences of T + 1 rows (mask 1 on the T steps taken, 0 on the
    bootstrap row), truncations folded into the rewards (module docstring).
    `final_values` (T, N) are V(final observation) of every step."""
    step = trajectory.step
    reward = step.reward + gamma * step.truncated.astype(jnp.float32) * final_values
    discount = 1.0 - step.done.astype(jnp.float32)
    num_envs = reward.shape[1]
    zero_row = lambda x: jnp.zeros_like(x[0])
    return Sequences(
        observation=_with_row(trajectory.observation, last_observation),
        action=_with_row(trajectory.action, zero_row(trajectory.action)),
        reward=_with_row(reward, jnp.zeros((num_envs,), jnp.float32)),
        discount=_with_row(discount, jnp.ones((num_envs,), jnp.float32)),
        mask=_with_row(jnp.ones_like(reward), jnp.zeros((num_envs,), jnp.float32)),
        extras=jax.tree_util.tree_map(lambda x: _with_row(x, zero_row(x)), trajectory.extras),
    )


class PPOSystem(System):
    """PPO on a gymnax vector (module docstring)."""

    def init(self, key: jax.Array) -> PPOState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        return PPOState(self.learning.init(learner_key), self.environment.reset(environment_key), key)

    def learn(
        self, learner: TrainingState, trajectory: Trajectory, last_observation: jax.Array
    ) -> tuple[TrainingState, dict]:
        """The reverb PPO's learner step on this rollout's sequences."""
        final = trajectory.step.final_observation
        flat = jnp.reshape(final, (-1,) + final.shape[2:])
        final_values = jnp.reshape(self.network.apply(learner.params, flat)[1], final.shape[:2])
        batch = to_sequences(trajectory, last_observation, jax.lax.stop_gradient(final_values), self.config.discount)
        learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(batch))
        return learner, metrics

    def update(self, state: PPOState) -> tuple[PPOState, dict[str, jax.Array], EnvStep]:
        key, rollout_key = jax.random.split(state.key)
        learner, length = state.learner, self.config.unroll_length
        params = self.learning.policy_params(learner)
        environment, trajectory = rollout(
            self.environment, self.behaviour_policy, params, state.environment, rollout_key, length, learner.actor_steps
        )
        learner, metrics = self.learn(learner, trajectory, environment.observation)
        return PPOState(learner, environment, key), metrics, trajectory.step
