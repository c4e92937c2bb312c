"""Agents as anakin systems: pure `init(key)` and `update(state)` (one learner update with its
acting) over one replica's training state; a chunk is `steps_per_chunk` updates in one `lax.scan`."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, NamedTuple

import flashbax
import jax
import jax.numpy as jnp

from rl.agents.builder import Batch
from rl.agents.ppo.builder import TrainingState
from rl.environments.gymnax_vector import EnvStep, GymnaxVector, VectorState
from rl.experiments.config import ExperimentConfig
from rl.core import Transition
from rl.replay.adders import SequenceStep

# `(params, key, observations, step) -> (actions, extras)`: a builder's `make_policy`.
Policy = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]

# False: the update took no SGD step; its other metrics are placeholders, left out of the means.
TRAINED = "trained"


class System:
    """A subclass adds `init(key)` and `update(state) -> (state, metrics, EnvStep)`; its state has `learner`."""

    def __init__(self, experiment: ExperimentConfig):
        builder, spec = experiment.builder, experiment.environment_spec
        options = experiment.environment_factory.keywords  # The gymnax factory's name and kwargs.
        vector = lambda copies: GymnaxVector(options["name"], copies, options.get("kwargs"))
        self.environment, self.evaluation_environment = vector(experiment.num_envs), vector(experiment.eval_episodes)
        self.config, self.network = builder.config, experiment.network_factory(environment_spec=spec)
        self.learning = builder.make_learning(self.network)
        self.behaviour_policy: Policy = builder.make_policy(self.network, spec, evaluation=False)
        self.evaluation_policy: Policy = builder.make_policy(self.network, spec, evaluation=True)

    def evaluation_params(self, state: Any) -> Any:
        return self.learning.policy_params(state.learner)

    def act(self, state: Any, key: jax.Array, length: int, clock: jax.Array) -> tuple[VectorState, Trajectory]:
        """`length` steps of the copies in `state` under the behaviour policy (`clock`: its actor steps)."""
        params = self.learning.policy_params(state.learner)
        return rollout(self.environment, self.behaviour_policy, params, state.environment, key, length, clock)


def make_system(experiment: ExperimentConfig) -> tuple[System, GymnaxVector]:
    """(the builder's system on `num_envs` gymnax copies, the evaluation environment of `eval_episodes`)."""
    system = (PPOSystem if experiment.builder.anakin == "on_policy" else OffPolicySystem)(experiment)
    return system, system.evaluation_environment


def with_hyperparameters(experiment: ExperimentConfig, values: dict[str, Any]) -> ExperimentConfig:
    """The experiment with one replica's `values` ("agent.<field>": its config's, "policy.<field>": its
    exploration's), traced scalars, set on copies: the agent's maths then reads them like any constant."""
    builder = experiment.builder
    parts = {"agent": copy.copy(builder.config), "policy": copy.copy(builder.exploration)}
    for key, value in values.items():
        group, name = key.split(".", 1)
        object.__setattr__(parts[group], name, value)  # Frozen dataclasses, checked on the jobs' own values.
    return dataclasses.replace(experiment, builder=type(builder)(parts["agent"], exploration=parts["policy"]))


class Trajectory(NamedTuple):
    """T steps of N copies, each field (T, N, ...)."""

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
    """`length` steps of every copy in one `lax.scan`; `policy_step`: the schedules' clock (actor steps)."""

    def one_step(state: VectorState, inputs: tuple[jax.Array, jax.Array]) -> tuple[VectorState, Trajectory]:
        step_key, t = inputs
        policy_key, environment_key = jax.random.split(step_key)
        clock = jnp.asarray(policy_step, jnp.int32) + t * environment.num_envs
        action, extras = policy(params, policy_key, state.observation, clock)
        next_state, answer = environment.step(state, action, environment_key)
        return next_state, Trajectory(state.observation, action, extras, answer)

    return jax.lax.scan(one_step, state, (jax.random.split(key, length), jnp.arange(length, dtype=jnp.int32)))


def make_chunk(system: System, steps_per_chunk: int) -> Callable[[Any], tuple[Any, dict[str, jax.Array]]]:
    """`state -> (state, metrics)`: `steps_per_chunk` updates of one replica; learner metrics are
    means over the updates that trained (NaN if none did)."""

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
        return state, {
            **{name: mean(values) for name, values in metrics.items()},
            "trained_updates": updates,
            "episodes": episodes,
            "episode_return": jnp.sum(returns) / count,
            "episode_length": jnp.sum(lengths).astype(jnp.float32) / count,
            "learner_steps": system.learning.learner_steps(state.learner),
        }

    return chunk


class EvaluationResult(NamedTuple):
    returns: jax.Array
    lengths: jax.Array


def evaluate(environment: GymnaxVector, policy: Policy, params: Any, key: jax.Array) -> EvaluationResult:
    """Every copy runs until its first episode ends (or one step past the episode limit)."""
    reset_key, key = jax.random.split(key)
    limit = int(environment.params.max_steps_in_episode) + 1
    zeros = jnp.zeros((environment.num_envs,), jnp.float32)
    running = lambda carry: jnp.logical_and(~jnp.all(carry[4]), carry[5] < limit)  # Not all finished, t < limit.

    def one_step(carry: tuple) -> tuple:
        state, key, returns, lengths, finished, t = carry
        key, policy_key, environment_key = jax.random.split(key, 3)
        action, _ = policy(params, policy_key, state.observation, t)
        state, answer = environment.step(state, action, environment_key)
        counted = ~finished
        returns = returns + jnp.where(counted, answer.reward, 0.0)
        lengths = lengths + counted.astype(jnp.float32)
        return state, key, returns, lengths, finished | answer.done, t + 1

    carry = (environment.reset(reset_key), key, zeros, zeros, zeros > 0, jnp.zeros((), jnp.int32))
    _, _, returns, lengths, _, _ = jax.lax.while_loop(running, one_step, carry)
    return EvaluationResult(returns, lengths)


class Stored(NamedTuple):
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
    """(B, n) stored steps -> B n-step transitions (OffPolicySystem's docstring)."""
    batch, n = sequences.reward.shape
    reward = jnp.zeros((batch,), jnp.float32)
    discount = jnp.ones((batch,), jnp.float32)
    alive = jnp.ones((batch,), jnp.float32)
    next_observation = sequences.next_observation[:, 0]
    shape = (batch,) + (1,) * (next_observation.ndim - 1)
    for k in range(n):
        taken = alive > 0
        reward = reward + alive * discount * sequences.reward[:, k]
        next_observation = jnp.where(jnp.reshape(taken, shape), sequences.next_observation[:, k], next_observation)
        discount = jnp.where(taken, discount * gamma * sequences.discount[:, k], discount)
        alive = alive * (1.0 - sequences.done[:, k].astype(jnp.float32))
    return Transition(sequences.observation[:, 0], sequences.action[:, 0], reward, discount, next_observation)


def _without_extras(policy: Callable[..., jax.Array]) -> Policy:
    return lambda params, key, observations, step: (policy(params, key, observations, step), {})


class OffPolicySystem(System):
    """One update: one step of `num_envs` copies into a flashbax buffer, then (from `min_replay_size`)
    `num_envs * samples_per_insert / batch_size` SGD steps. A sampled sequence t..t+n-1 is one
    n-step transition, m <= n its steps up to the first episode end:

        reward   = sum_{k<m} gamma^k r_{t+k}
        discount = gamma^m * d_{t+m-1}          (d = 0 at a termination, 1 at a truncation)
        next     = s'_{t+m-1}
    """

    def __init__(self, experiment: ExperimentConfig):
        super().__init__(experiment)
        config, spec, num_envs = self.config, experiment.environment_spec, experiment.num_envs
        self.behaviour_policy = _without_extras(self.behaviour_policy)
        self.evaluation_policy = _without_extras(self.evaluation_policy)
        self.sgd_steps = round(num_envs * config.samples_per_insert / config.batch_size)
        max_size = min(config.max_replay_size, experiment.max_actor_steps)
        self.buffer = flashbax.make_trajectory_buffer(
            add_batch_size=num_envs,
            sample_batch_size=config.batch_size,
            sample_sequence_length=config.n_step,
            period=1,
            min_length_time_axis=config.n_step,
            max_length_time_axis=max(config.n_step + 1, -(-max_size // num_envs)),
        )
        observation, zero = jnp.zeros(spec.observations.shape, jnp.float32), jnp.zeros((), jnp.float32)
        action = jnp.zeros(spec.actions.shape, spec.actions.dtype)
        self.example = Stored(observation, action, zero, zero, jnp.zeros((), bool), observation)

    def init(self, key: jax.Array) -> OffPolicyState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        learner, environment = self.learning.init(learner_key), self.environment.reset(environment_key)
        return OffPolicyState(learner, self.buffer.init(self.example), environment, jnp.zeros((), jnp.int32), key)

    def learn(self, learner: Any, buffer: Any, key: jax.Array) -> tuple[Any, dict]:
        def one(learner: Any, key: jax.Array) -> tuple[Any, dict]:
            sequences = self.buffer.sample(buffer, key).experience
            transitions = n_step_transitions(sequences, self.config.discount)
            learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(transitions))
            return learner, metrics

        learner, metrics = jax.lax.scan(one, learner, jax.random.split(key, self.sgd_steps))
        return learner, jax.tree_util.tree_map(jnp.mean, metrics)

    def skip(self, learner: Any, buffer: Any, key: jax.Array) -> tuple[Any, dict]:
        metrics = jax.eval_shape(self.learn, learner, buffer, key)[1]
        return learner, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metrics)

    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array], EnvStep]:
        key, act_key, learn_key = jax.random.split(state.key, 3)
        environment, trajectory = self.act(state, act_key, 1, state.actor_steps)
        step = trajectory.step
        stored = Stored(
            trajectory.observation, trajectory.action, step.reward, step.discount, step.done, step.final_observation
        )
        buffer = self.buffer.add(state.buffer, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), stored))
        actor_steps = state.actor_steps + self.environment.num_envs
        ready = actor_steps >= self.config.min_replay_size
        learner, metrics = jax.lax.cond(ready, self.learn, self.skip, state.learner, buffer, learn_key)
        return OffPolicyState(learner, buffer, environment, actor_steps, key), {**metrics, TRAINED: ready}, step


class PPOState(NamedTuple):
    learner: TrainingState
    environment: VectorState
    key: jax.Array


def to_sequences(
    trajectory: Trajectory, last_observation: jax.Array, final_values: jax.Array, gamma: float
) -> SequenceStep:
    """A rollout as N sequences of T + 1 rows (PPOSystem's docstring); `final_values` (T, N)."""
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


class PPOSystem(System):
    """One update: `unroll_length` steps of every copy as sequences of `unroll_length + 1` rows (the last
    only bootstraps). A truncation's row gets reward r_t + gamma * V(s_final) and discount 0."""

    def init(self, key: jax.Array) -> PPOState:
        learner_key, environment_key, key = jax.random.split(key, 3)
        return PPOState(self.learning.init(learner_key), self.environment.reset(environment_key), key)

    def update(self, state: PPOState) -> tuple[PPOState, dict[str, jax.Array], EnvStep]:
        key, rollout_key = jax.random.split(state.key)
        environment, trajectory = self.act(state, rollout_key, self.config.unroll_length, state.learner.actor_steps)
        learner, metrics = self.learn(state.learner, trajectory, environment.observation)
        return PPOState(learner, environment, key), metrics, trajectory.step

    def learn(self, learner: TrainingState, trajectory: Trajectory, last_observation: jax.Array) -> tuple[Any, dict]:
        final = trajectory.step.final_observation
        flat = jnp.reshape(final, (-1,) + final.shape[2:])
        final_values = jnp.reshape(self.network.apply(learner.params, flat)[1], final.shape[:2])
        batch = to_sequences(trajectory, last_observation, jax.lax.stop_gradient(final_values), self.config.discount)
        learner, metrics, _ = self.learning.sgd_step(learner, Batch.uniform(batch))
        return learner, metrics
