"""What the off-policy agents (DQN, SAC, TD3, D4PG) share under launcher=anakin: one step of every
environment copy into a flashbax buffer, then the agent's own SGD steps on n-step
transitions sampled from it.

One update = one step of `num_envs` copies (with the builder's behaviour policy) and,
once the buffer holds `min_replay_size` transitions, `num_envs * samples_per_insert /
batch_size` SGD steps (the replay ratio of the reverb agent).

The buffer (flashbax's trajectory buffer, one time axis per copy) keeps 1-step
transitions with their true next observation (before any automatic reset); a sampled
sequence of n of them, t..t+n-1, becomes one n-step transition. With m <= n the steps
up to and including the first episode end (or all n):

    reward   = sum_{k<m} gamma^k r_{t+k}
    discount = gamma^m * d_{t+m-1}          (d = 0 at a termination, 1 at a truncation)
    next     = s'_{t+m-1}

An agent plugs in through its `Learning` (rl/agents/learning.py), the functions its reverb
learner runs: its SGD steps see uniformly sampled batches.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flashbax
import jax
import jax.numpy as jnp

from rl.agents.learning import Batch, Learning
from rl.anakin.rollout import EpisodeStatistics, episode_statistics, rollout
from rl.anakin.system import TRAINED
from rl.environments.gymnax_vector import GymnaxVector, VectorState
from rl.specs import EnvironmentSpec
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
    n = sequences.reward.shape[1]
    batch = sequences.reward.shape[0]
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


def _without_extras(policy: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, dict]]:
    """A builder's policy (actions only) as a rollout policy (actions, extras)."""
    return lambda params, key, observations, step: (policy(params, key, observations, step), {})


class OffPolicySystem:
    """An off-policy agent on a gymnax vector with a flashbax buffer (module docstring).

    `config` is the agent's replay section (n_step, batch_size, samples_per_insert,
    min_replay_size, max_replay_size, discount); `behaviour_policy` and
    `evaluation_policy` are the builder's (actions only)."""

    def __init__(
        self,
        learning: Learning,
        config: Any,
        behaviour_policy: Callable[..., jax.Array],
        evaluation_policy: Callable[..., jax.Array],
        environment: GymnaxVector,
        environment_spec: EnvironmentSpec,
        max_actor_steps: int,
    ):
        self.learning = learning
        self.config = config
        self.environment = environment
        self.behaviour_policy = _without_extras(behaviour_policy)
        self.evaluation_policy = _without_extras(evaluation_policy)
        self.steps_per_update = environment.num_envs
        self.sgd_steps = round(environment.num_envs * config.samples_per_insert / config.batch_size)
        max_size = min(config.max_replay_size, max_actor_steps)
        self.buffer = flashbax.make_trajectory_buffer(
            add_batch_size=environment.num_envs,
            sample_batch_size=config.batch_size,
            sample_sequence_length=config.n_step,
            period=1,
            min_length_time_axis=config.n_step,
            max_length_time_axis=max(config.n_step + 1, -(-max_size // environment.num_envs)),
        )
        self.min_replay_size = config.min_replay_size
        observations, actions = environment_spec.observations, environment_spec.actions
        self.example = Stored(
            observation=jnp.zeros(observations.shape, jnp.float32),
            action=jnp.zeros(actions.shape, actions.dtype),
            reward=jnp.zeros((), jnp.float32),
            discount=jnp.zeros((), jnp.float32),
            done=jnp.zeros((), bool),
            next_observation=jnp.zeros(observations.shape, jnp.float32),
        )

    def init(self, key: jax.Array) -> OffPolicyState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        return OffPolicyState(
            self.learning.init(learner_key),
            self.buffer.init(self.example),
            self.environment.reset(environment_key),
            jnp.zeros((), jnp.int32),
            key,
        )

    def evaluation_params(self, state: OffPolicyState) -> Any:
        return self.learning.policy_params(state.learner)

    def learner_steps(self, state: OffPolicyState) -> jax.Array:
        return self.learning.learner_steps(state.learner)

    def learn(self, learner: Any, buffer: Any, key: jax.Array) -> tuple[Any, dict]:
        """`sgd_steps` SGD steps, each on its own sample of n-step transitions."""

        def one(learner: Any, key: jax.Array) -> tuple[Any, dict]:
            sequences = self.buffer.sample(buffer, key).experience
            transitions = n_step_transitions(sequences, self.config.discount)
            learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(transitions))
            return learner, metrics

        learner, metrics = jax.lax.scan(one, learner, jax.random.split(key, self.sgd_steps))
        return learner, jax.tree_util.tree_map(jnp.mean, metrics)

    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array], EpisodeStatistics]:
        key, act_key, learn_key = jax.random.split(state.key, 3)
        environment, trajectory = rollout(
            self.environment,
            self.behaviour_policy,
            self.learning.policy_params(state.learner),
            state.environment,
            act_key,
            1,
            state.actor_steps,
        )
        answer = trajectory.step
        stored = Stored(
            observation=trajectory.observation[0],
            action=trajectory.action[0],
            reward=answer.reward[0],
            discount=answer.discount[0],
            done=answer.done[0],
            next_observation=answer.final_observation[0],
        )
        buffer = self.buffer.add(state.buffer, jax.tree_util.tree_map(lambda x: x[:, None], stored))
        actor_steps = state.actor_steps + self.environment.num_envs
        ready = actor_steps >= self.min_replay_size
        template = jax.eval_shape(self.learn, state.learner, buffer, learn_key)[1]
        learner, metrics = jax.lax.cond(
            ready,
            self.learn,
            lambda learner, buffer, key: (
                learner,
                jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), template),
            ),
            state.learner,
            buffer,
            learn_key,
        )
        # Before `ready` the metrics are zeros of no SGD step: make_chunk leaves them out.
        metrics = {**metrics, TRAINED: ready}
        return OffPolicyState(learner, buffer, environment, actor_steps, key), metrics, episode_statistics(answer)


def make_off_policy_system(
    builder: Any, networks: Any, environment: GymnaxVector, environment_spec: EnvironmentSpec, max_actor_steps: int
) -> OffPolicySystem:
    """The builder's `Learning`, acting with its behaviour and evaluation policies, on its
    config's replay section."""
    return OffPolicySystem(
        builder.make_learning(networks),
        builder.config,
        builder.make_policy(networks, environment_spec, evaluation=False),
        builder.make_policy(networks, environment_spec, evaluation=True),
        environment,
        environment_spec,
        max_actor_steps,
    )
