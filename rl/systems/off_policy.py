"""The off-policy system: each update is one step of every environment copy into a flashbax buffer and,
once it holds `min_replay_size` steps, the SGD steps the replay ratio asks for on n-step transitions."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from rl.core import Batch, Transition
from rl.environments.gymnax_vector import EnvStep, VectorState
from rl.systems.base import TRAINED, CompiledAgent, Derived, Policy, Refusal, System, SystemInputs, Trajectory


class Settings(Protocol):
    """The agent config fields this system reads."""

    discount: float
    n_step: int
    batch_size: int
    samples_per_insert: float
    min_replay_size: int
    max_replay_size: int
    prioritized: bool


class BufferItem(NamedTuple):
    """One environment step as the compiled off-policy system's buffer keeps it (n-step transitions are made
    from runs of these when sampled)."""

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


class ReplayState(NamedTuple):
    """What learns from blocks of host steps: the learner, its replay and the steps inserted so far."""

    learner: Any
    buffer: Any
    actor_steps: jax.Array
    key: jax.Array


def n_step_transitions(sequences: BufferItem, gamma: float) -> Transition:
    """(B, n) stored steps -> B n-step transitions (OffPolicySystem's docstring): R = sum_k gamma^k r_k and
    the bootstrap factor prod_k gamma d_k over the steps before the first `done`. The host's adders compute
    the same per step as it arrives (`rl.replay.adders.n_step_return`, whose docstring says why two)."""
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


def sgd_steps_per_update(settings: Settings, num_envs: int) -> float:
    """SGD steps one update takes: each copy's step inserts one item, each SGD step samples `batch_size`."""
    return num_envs * settings.samples_per_insert / settings.batch_size


class OffPolicySystem(System):
    """One update: one step of `num_envs` copies into a flashbax buffer, then (from `min_replay_size`)
    `num_envs * samples_per_insert / batch_size` SGD steps, each on a uniform batch of n-step `Transition`s.
    The policies return actions. A sampled sequence t..t+n-1 is one n-step transition, m <= n its steps
    up to the first episode end:

        reward   = sum_{k<m} gamma^k r_{t+k}
        discount = gamma^m * d_{t+m-1}          (d = 0 at a termination, 1 at a truncation)
        next     = s'_{t+m-1}
    """

    def __init__(self, agent: CompiledAgent, inputs: SystemInputs):
        import flashbax  # Here: an agent's import stays light for the launchers that do not compile it.

        super().__init__(agent, inputs)
        config, spec, num_envs = self.config, inputs.spec, inputs.num_envs
        self.behaviour_policy = _without_extras(self.behaviour_policy)
        self.evaluation_policy = _without_extras(self.evaluation_policy)
        self.sgd_steps = round(sgd_steps_per_update(config, num_envs * inputs.block_length))
        max_size = min(config.max_replay_size, inputs.max_actor_steps)
        self.buffer = flashbax.make_trajectory_buffer(
            add_batch_size=num_envs,
            sample_batch_size=config.batch_size,
            sample_sequence_length=config.n_step,
            period=1,
            min_length_time_axis=config.n_step,
            max_length_time_axis=max(config.n_step + 1, -(-max_size // num_envs)),
        )
        # Observations are kept in the environment's own dtype: Atari's uint8 frames take a quarter of the
        # device memory float32 would, and the networks scale them when they read them.
        observations = spec.observations
        observation, zero = jnp.zeros(observations.shape, observations.dtype), jnp.zeros((), jnp.float32)
        action = jnp.zeros(spec.actions.shape, spec.actions.dtype)
        self.example = BufferItem(observation, action, zero, zero, jnp.zeros((), bool), observation)

    @classmethod
    def steps_per_update(cls, settings: Settings, num_envs: int) -> int:
        return num_envs

    @classmethod
    def host_block_length(cls, settings: Settings, block_length: int) -> int:
        return block_length

    @classmethod
    def derived(cls, settings: Settings, num_envs: int, block_length: int = 1) -> list[Derived]:
        num_envs = num_envs * block_length  # The steps one update inserts.
        sgd_steps = sgd_steps_per_update(settings, num_envs)
        if sgd_steps >= 1 and abs(sgd_steps - round(sgd_steps)) <= 1e-9:
            return []
        whole = max(1, round(sgd_steps))
        why = (
            f"each update's {num_envs} inserted steps (environment copies x steps per update) take "
            f"steps * samples_per_insert / batch_size SGD steps, a whole number >= 1 ({sgd_steps:g} rounded to {whole})"
        )
        return [Derived("samples_per_insert", settings.samples_per_insert, whole * settings.batch_size / num_envs, why)]

    @classmethod
    def refusal(cls, settings: Settings, num_envs: int, block_length: int = 1) -> Refusal | None:
        num_envs = num_envs * block_length  # The steps one update inserts.
        sgd_steps = sgd_steps_per_update(settings, num_envs)
        if sgd_steps < 1 or abs(sgd_steps - round(sgd_steps)) > 1e-9:
            return Refusal(
                "agent.samples_per_insert",
                f"each update inserts {num_envs} steps (environment copies x steps per update) and takes "
                f"steps * samples_per_insert / batch_size SGD steps, which must be a whole number >= 1; "
                f"got {sgd_steps:g}",
            )
        if settings.prioritized:
            return Refusal(
                "agent.prioritized",
                "prioritized replay is not supported by the compiled launchers (anakin, sebulba) yet; set it to false",
            )
        return None

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
        learner, buffer, actor_steps, metrics = self.insert_and_learn(
            state.learner, state.buffer, state.actor_steps, trajectory, learn_key
        )
        return OffPolicyState(learner, buffer, environment, actor_steps, key), metrics, trajectory.step

    def insert_and_learn(
        self, learner: Any, buffer: Any, actor_steps: jax.Array, trajectory: Trajectory, key: jax.Array
    ) -> tuple[Any, Any, jax.Array, dict[str, jax.Array]]:
        """Inserts the (T, N) steps of `trajectory`, then takes the SGD steps they allow once replay holds
        `min_replay_size` steps (the metrics' TRAINED says whether it did)."""
        step = trajectory.step
        stored = BufferItem(
            trajectory.observation, trajectory.action, step.reward, step.discount, step.done, step.final_observation
        )
        buffer = self.buffer.add(buffer, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), stored))
        actor_steps = actor_steps + step.reward.size
        ready = actor_steps >= self.config.min_replay_size
        learner, metrics = jax.lax.cond(ready, self.learn, self.skip, learner, buffer, key)
        return learner, buffer, actor_steps, {**metrics, TRAINED: ready}

    def init_learner(self, key: jax.Array) -> ReplayState:
        learner_key, key = jax.random.split(key)
        zero = jnp.zeros((), jnp.int32)
        return ReplayState(self.learning.init(learner_key), self.buffer.init(self.example), zero, key)

    def learn_block(
        self, state: ReplayState, block: Trajectory, last_observation: jax.Array
    ) -> tuple[ReplayState, dict[str, jax.Array]]:
        key, learn_key = jax.random.split(state.key)
        learner, buffer, actor_steps, metrics = self.insert_and_learn(
            state.learner, state.buffer, state.actor_steps, block, learn_key
        )
        return ReplayState(learner, buffer, actor_steps, key), metrics

    def learner_of(self, state: ReplayState) -> Any:
        return state.learner
