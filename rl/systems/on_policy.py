"""The on-policy system: each update is a whole number of rollouts of every environment copy, trained on once."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from rl.core import Batch
from rl.environments.gymnax_vector import EnvStep, VectorState
from rl.replay.adders import SequenceStep
from rl.systems.base import CompiledAgent, Derived, System, SystemInputs, Trajectory


class Settings(Protocol):
    """The agent config fields this system reads."""

    discount: float
    unroll_length: int
    batch_size: int


class OnPolicyState(NamedTuple):
    learner: Any
    environment: VectorState
    key: jax.Array


def to_sequences(
    trajectory: Trajectory, last_observation: jax.Array, final_values: jax.Array, gamma: float
) -> SequenceStep:
    """A rollout as N sequences of T + 1 rows (OnPolicySystem's docstring); `final_values` (T, N)."""
    step = trajectory.step
    reward = step.reward + gamma * step.truncated.astype(jnp.float32) * final_values
    discount = 1.0 - step.done.astype(jnp.float32)
    rows = SequenceStep(
        trajectory.observation, trajectory.action, reward, discount, jnp.ones_like(reward), trajectory.extras
    )
    last = jax.tree_util.tree_map(lambda x: jnp.zeros_like(x[0]), rows)
    last = last._replace(observation=last_observation, discount=jnp.ones_like(last.discount))
    with_last = lambda rows, last: jnp.swapaxes(jnp.concatenate([rows, last[None]], axis=0), 0, 1)
    return jax.tree_util.tree_map(with_last, rows, last)


def side_by_side(trajectory: Trajectory, last_observation: jax.Array, rollouts: int) -> tuple[Trajectory, jax.Array]:
    """`rollouts` consecutive rollouts of N copies, (R * T, N, ...), as one rollout of R * N copies,
    (T, R * N, ...), each with the observation it ends on (the next rollout's first, or `last_observation`):
    the sequences Brax's PPO trains on when it unrolls its copies several times per update."""
    if rollouts == 1:
        return trajectory, last_observation
    length = trajectory.action.shape[0] // rollouts

    def regroup(x: jax.Array) -> jax.Array:  # (R * T, N, ...) -> (T, R * N, ...)
        x = jnp.swapaxes(jnp.reshape(x, (rollouts, length) + x.shape[1:]), 0, 1)
        return jnp.reshape(x, (length, rollouts * x.shape[2]) + x.shape[3:])

    def ends(observation: jax.Array, last: jax.Array) -> jax.Array:  # (R * N, ...): rollout r's end at r * N + n.
        return jnp.reshape(jnp.concatenate([observation[length::length], last[None]]), (-1,) + last.shape[1:])

    last = jax.tree_util.tree_map(ends, trajectory.observation, last_observation)
    return jax.tree_util.tree_map(regroup, trajectory), last


class OnPolicySystem(System):
    """One update: `unroll_length` steps of every copy as a batch of `SequenceStep` sequences of
    `unroll_length + 1` rows (the last only bootstraps), one per copy. A truncation's row gets reward
    r_t + gamma * V(s_final) (the agent's `bootstrap_value`) and discount 0. The behaviour policy returns
    (actions, extras); the agent's `clock` is its schedules' actor steps. Under launcher=anakin a batch_size
    that is a multiple of the copies unrolls them batch_size / num_envs times per update (Brax's PPO settings:
    2,048 copies unrolled 16 times); under launcher=sebulba a batch is one host block of each copy."""

    stores_next_observations = False

    def __init__(self, agent: CompiledAgent, inputs: SystemInputs):
        if agent.bootstrap_value is None or agent.clock is None:
            raise ValueError("an on-policy agent gives its system a bootstrap_value and a clock")
        super().__init__(agent, inputs)
        self.bootstrap_value, self.clock = agent.bootstrap_value, agent.clock
        self.rollouts = self.rollouts_per_update(self.config, inputs.num_envs)

    @classmethod
    def rollouts_per_update(cls, settings: Settings, num_envs: int) -> int:
        return max(1, settings.batch_size // num_envs)

    @classmethod
    def steps_per_update(cls, settings: Settings, num_envs: int) -> int:
        return num_envs * settings.unroll_length * cls.rollouts_per_update(settings, num_envs)

    @classmethod
    def host_block_length(cls, settings: Settings, block_length: int) -> int:
        return settings.unroll_length  # Whole rollouts, whatever the launcher's block length.

    @classmethod
    def derived(cls, settings: Settings, num_envs: int, block_length: int = 1) -> list[Derived]:
        """block_length 1: the system unrolls its own copies (anakin), a whole number of times per update;
        longer: the host hands one block of each copy per update (sebulba)."""
        if settings.batch_size == num_envs:
            return []
        if block_length == 1 and settings.batch_size % num_envs == 0:
            return []
        if block_length == 1:
            why = f"a batch is a whole number of rollouts of each of a replica's {num_envs} environment copies"
        else:
            why = f"a batch is one block of each of a replica's {num_envs} environment copies"
        return [Derived("batch_size", settings.batch_size, num_envs, why)]

    def init(self, key: jax.Array) -> OnPolicyState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        return OnPolicyState(self.learning.init(learner_key), self.environment.reset(environment_key), key)

    def update(self, state: OnPolicyState) -> tuple[OnPolicyState, dict[str, jax.Array], EnvStep]:
        key, rollout_key = jax.random.split(state.key)
        clock = self.clock(state.learner)
        length = self.config.unroll_length * self.rollouts
        environment, trajectory = self.act(state, rollout_key, length, clock)
        learner, metrics = self.learn(state.learner, *side_by_side(trajectory, environment.observation, self.rollouts))
        return OnPolicyState(learner, environment, key), metrics, trajectory.step

    def init_learner(self, key: jax.Array) -> Any:
        return self.learning.init(key)

    def learn_block(self, state: Any, block: Trajectory, last_observation: jax.Array) -> tuple[Any, dict]:
        """A host block's `final_observation` is (N, ...): each copy's last truncated episode's, all the
        truncated rows bootstrap from (`stores_next_observations` is False)."""
        truncated_values = self.bootstrap_value(state, block.step.final_observation)
        final_values = jnp.broadcast_to(truncated_values, block.step.truncated.shape)
        return self.learn_from(state, block, last_observation, final_values)

    def learner_of(self, state: Any) -> Any:
        return state

    def learn(self, learner: Any, trajectory: Trajectory, last_observation: jax.Array) -> tuple[Any, dict]:
        final = trajectory.step.final_observation
        flat = jnp.reshape(final, (-1,) + final.shape[2:])
        final_values = jnp.reshape(self.bootstrap_value(learner, flat), final.shape[:2])
        return self.learn_from(learner, trajectory, last_observation, final_values)

    def learn_from(
        self, learner: Any, trajectory: Trajectory, last_observation: jax.Array, final_values: jax.Array
    ) -> tuple[Any, dict]:
        """One SGD step on the rollout, truncated rows bootstrapping from `final_values` (T, N)."""
        batch = to_sequences(trajectory, last_observation, jax.lax.stop_gradient(final_values), self.config.discount)
        learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(batch))
        return learner, metrics
