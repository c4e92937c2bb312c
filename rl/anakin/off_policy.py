"""The off-policy agents (DQN, SAC, TD3, D4PG) under launcher=anakin: one update = one step
of `num_envs` copies into a flashbax buffer and, once it holds `min_replay_size`
transitions, `num_envs * samples_per_insert / batch_size` SGD steps (the reverb agent's
replay ratio) of the agent's `Learning` on uniformly sampled n-step transitions.

The buffer (one time axis per copy) keeps 1-step transitions with their true next
observation (before any automatic reset); a sampled sequence t..t+n-1 becomes one n-step
transition. With m <= n the steps up to and including the first episode end (or all n):

    reward   = sum_{k<m} gamma^k r_{t+k}
    discount = gamma^m * d_{t+m-1}          (d = 0 at a termination, 1 at a truncation)
    next     = s'_{t+m-1}
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flashbax
import jax
import jax.numpy as jnp

from rl.agents.builder import Batch
from rl.anakin.system import TRAINED, Policy, System, rollout
from rl.environments.gymnax_vector import EnvStep, GymnaxVector, VectorState
from rl.experiments.config import ExperimentConfig
from rl.types import Transition


class Stored(NamedTuple):
    """One step of one copy as the buffer keeps it."""

    observation: jax.Array
    action: jax.Array
    reward: jax.Array
    discount: jax.Array
    done: jax.Array
    next_observation: jax.Array


class OffPolicyState(NamedTuple):
    learner: Any
    buffer: Any
    environment: VectorState
    actor_steps: jax.Array
    key: jax.Array


def n_step_transitions(sequences: Stored, gamma: float) -> Transition:
    """(B, n) stored steps -> B n-step transitions (module docstring)."""
    batch, n = sequences.reward.shape
    reward = jnp.zeros((batch,), jnp.float32)
    discount = jnp.ones((batch,), jnp.float32)
    alive = jnp.ones((batch,), jnp.float32)
    next_observation = sequences.next_observation[:, 0]
    for k in range(n):
        taken = alive > 0
        reward = reward + alive * discount * sequences.reward[:, k]
        next_observation = jnp.where(
            jnp.reshape(taken, (batch,) + (1,) * (next_observation.ndim - 1)),
            sequences.next_observation[:, k],
            next_observation,
        )
        discount = jnp.where(taken, discount * gamma * sequences.discount[:, k], discount)
        alive = alive * (1.0 - sequences.done[:, k].astype(jnp.float32))
    return Transition(sequences.observation[:, 0], sequences.action[:, 0], reward, discount, next_observation)


def _without_extras(policy: Callable[..., jax.Array]) -> Policy:
    """A builder's policy (actions only) as a rollout policy (actions, extras)."""
    return lambda params, key, observations, step: (policy(params, key, observations, step), {})


class OffPolicySystem(System):
    """An off-policy agent on a gymnax vector with a flashbax buffer (module docstring), as
    its config's replay section says (n_step, batch_size, ..., discount)."""

    def __init__(self, experiment: ExperimentConfig, network: Any, environment: GymnaxVector):
        super().__init__(experiment, network, environment)
        config, spec = self.config, experiment.environment_spec
        self.behaviour_policy = _without_extras(self.behaviour_policy)
        self.evaluation_policy = _without_extras(self.evaluation_policy)
        self.sgd_steps = round(environment.num_envs * config.samples_per_insert / config.batch_size)
        max_size = min(config.max_replay_size, experiment.max_actor_steps)
        self.buffer = flashbax.make_trajectory_buffer(
            add_batch_size=environment.num_envs,
            sample_batch_size=config.batch_size,
            sample_sequence_length=config.n_step,
            period=1,
            min_length_time_axis=config.n_step,
            max_length_time_axis=max(config.n_step + 1, -(-max_size // environment.num_envs)),
        )
        observation, zero = jnp.zeros(spec.observations.shape, jnp.float32), jnp.zeros((), jnp.float32)
        action = jnp.zeros(spec.actions.shape, spec.actions.dtype)
        self.example = Stored(observation, action, zero, zero, jnp.zeros((), bool), observation)

    def init(self, key: jax.Array) -> OffPolicyState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        learner, environment = self.learning.init(learner_key), self.environment.reset(environment_key)
        return OffPolicyState(learner, self.buffer.init(self.example), environment, jnp.zeros((), jnp.int32), key)

    def learn(self, learner: Any, buffer: Any, key: jax.Array) -> tuple[Any, dict]:
        """`sgd_steps` SGD steps, each on its own sample of n-step transitions."""

        def one(learner: Any, key: jax.Array) -> tuple[Any, dict]:
            sequences = self.buffer.sample(buffer, key).experience
            transitions = n_step_transitions(sequences, self.config.discount)
            learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(transitions))
            return learner, metrics

        learner, metrics = jax.lax.scan(one, learner, jax.random.split(key, self.sgd_steps))
        return learner, jax.tree_util.tree_map(jnp.mean, metrics)

    def skip(self, learner: Any, buffer: Any, key: jax.Array) -> tuple[Any, dict]:
        """No SGD step (the buffer is short of `min_replay_size`): `learn`'s metrics as zeros."""
        metrics = jax.eval_shape(self.learn, learner, buffer, key)[1]
        return learner, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metrics)

    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array], EnvStep]:
        key, act_key, learn_key = jax.random.split(state.key, 3)
        params = self.learning.policy_params(state.learner)
        environment, trajectory = rollout(
            self.environment, self.behaviour_policy, params, state.environment, act_key, 1, state.actor_steps
        )
        step = trajectory.step  # (1, num_envs, ...) each: the buffer's (num_envs, 1, ...) swapped.
        stored = Stored(
            trajectory.observation, trajectory.action, step.reward, step.discount, step.done, step.final_observation
        )
        buffer = self.buffer.add(state.buffer, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), stored))
        actor_steps = state.actor_steps + self.environment.num_envs
        ready = actor_steps >= self.config.min_replay_size
        learner, metrics = jax.lax.cond(ready, self.learn, self.skip, state.learner, buffer, learn_key)
        metrics = {**metrics, TRAINED: ready}  # Before `ready`, placeholders: make_chunk leaves them out.
        return OffPolicyState(learner, buffer, environment, actor_steps, key), metrics, step
