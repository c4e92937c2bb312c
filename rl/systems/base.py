"""A compiled system: pure `init(key)` and `update(state)` (one learner update with its acting) over one
replica's training state, generic over agents. An agent hands its system a `CompiledAgent`; the system
class answers what a launcher must know before compiling (steps per update, values it derives, refusals)."""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Callable, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from rl.core import EnvironmentSpec
from rl.environments.gymnax_vector import EnvStep, GymnaxVector, VectorState
from rl.environments.playground import PlaygroundVector
from rl.systems.learning import Learning

# `(params, key, observations, actor step) -> actions` (a row per copy of a vector environment) or
# `(actions, extras)`: a builder's `make_policy`, acted with by the actors and by the compiled systems.
Policy = Callable[[Any, jax.Array, Any, jax.Array], Any]

# The vector environments a system compiles, by the family `SystemInputs.family` names (same interface).
VECTORS = {"gymnax": GymnaxVector, "playground": PlaygroundVector}
JaxVector = GymnaxVector | PlaygroundVector

# False: the update took no SGD step; its other metrics are placeholders, left out of the means.
TRAINED = "trained"


@runtime_checkable
class Explores(Protocol):
    """A behaviour policy's head that reports the exploration it acts with (for episode records)."""

    def exploration_metrics(self, step: int) -> dict[str, float]: ...


@dataclasses.dataclass(frozen=True)
class CompiledAgent:
    """What a system asks of an agent. `settings`: the agent's config, read through the fields the system
    class's `Settings` protocol names. `bootstrap_value(learner state, observations) -> values` and
    `clock(learner state) -> actor steps` (its schedules' clock) are what an on-policy system needs too."""

    settings: Any
    learning: Learning
    behaviour_policy: Policy
    evaluation_policy: Policy
    bootstrap_value: Callable[[Any, jax.Array], jax.Array] | None = None
    clock: Callable[[Any], jax.Array] | None = None


@dataclasses.dataclass(frozen=True)
class SystemInputs:
    """The run a system compiles: JAX environment `name` of `family` (gymnax or playground, `VECTORS`; `kwargs`
    its options; name None: the steps come from environments on the host, launcher=sebulba), `num_envs`
    training copies per replica, `eval_episodes` evaluation copies, the actor-step budget, the environment's
    spec and `block_length`, the steps of every copy one off-policy update inserts (anakin: 1; on-policy
    systems take whole rollouts instead)."""

    name: str | None
    kwargs: dict[str, Any] | None
    num_envs: int
    eval_episodes: int
    max_actor_steps: int
    spec: EnvironmentSpec
    block_length: int = 1
    family: str = "gymnax"


@dataclasses.dataclass(frozen=True)
class Derived:
    """A value of the agent's config that must follow another under this system: `key` (a field),
    the value typed, the one it becomes, and why (a clause for the run's log)."""

    key: str
    typed: Any
    value: Any
    why: str


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A setting a system cannot run: the config key and why, in one line."""

    key: str
    message: str


class System(abc.ABC):
    """A subclass adds `init(key)` and `update(state) -> (state, metrics, EnvStep)`; its state has `learner`."""

    # Whether a block of host steps carries every step's next observation (`final_observation`, (T, N, ...):
    # replay keeps them), or only each copy's last truncated episode's ((N, ...): what a rollout bootstraps from).
    stores_next_observations: ClassVar[bool] = True

    def __init__(self, agent: CompiledAgent, inputs: SystemInputs):
        self.agent, self.config, self.learning, self.inputs = agent, agent.settings, agent.learning, inputs
        self.behaviour_policy: Policy = agent.behaviour_policy
        self.evaluation_policy: Policy = agent.evaluation_policy

    @functools.cached_property
    def environment(self) -> JaxVector:
        """The training copies compiled with the system (launcher=anakin); made on first use."""
        return self._vector(self.inputs.num_envs)

    @functools.cached_property
    def evaluation_environment(self) -> JaxVector:
        return self._vector(self.inputs.eval_episodes)

    def _vector(self, num_envs: int) -> JaxVector:
        """The copies, made concrete even when first asked for inside a trace (`init`, a chunk's scan): they
        are kept on the system and used by later traces, so no array of theirs (an environment's default
        parameters, its maps) may be a tracer of the first."""
        if self.inputs.name is None:
            raise ValueError("this system's steps come from the host: it has no compiled environment")
        with jax.ensure_compile_time_eval():
            return VECTORS[self.inputs.family](self.inputs.name, num_envs, self.inputs.kwargs)

    @classmethod
    @abc.abstractmethod
    def steps_per_update(cls, settings: Any, num_envs: int) -> int:
        """Environment steps (all copies) one learner update consumes."""

    @classmethod
    @abc.abstractmethod
    def host_block_length(cls, settings: Any, block_length: int) -> int:
        """Steps of every copy one update learns from when they are stepped on the host (launcher=sebulba),
        given the launcher's `block_length`."""

    @classmethod
    def derived(cls, settings: Any, num_envs: int, block_length: int = 1) -> list[Derived]:
        """The values of `settings` that must change to follow `num_envs` copies per replica, each update
        learning from `block_length` steps of each off the host (none by default)."""
        return []

    @classmethod
    def refusal(cls, settings: Any, num_envs: int, block_length: int = 1) -> Refusal | None:
        """Why the (fitted) settings cannot run under this system (None: they can)."""
        return None

    @abc.abstractmethod
    def init(self, key: jax.Array) -> Any: ...

    @abc.abstractmethod
    def update(self, state: Any) -> tuple[Any, dict[str, jax.Array], EnvStep]: ...

    @abc.abstractmethod
    def init_learner(self, key: jax.Array) -> Any:
        """What learns from blocks of steps taken elsewhere (launcher=sebulba's host environments): the
        learner state, with the replay an off-policy system keeps."""

    @abc.abstractmethod
    def learn_block(self, state: Any, block: Trajectory, last_observation: jax.Array) -> tuple[Any, dict]:
        """One update on a block of steps (T, N): `init_learner`'s state and the update's metrics. Only the
        fields the system reads need be in the block (the next observations and episode statistics need not)."""

    @abc.abstractmethod
    def learner_of(self, state: Any) -> Any:
        """The agent's learner state inside `init_learner`'s state."""

    def evaluation_params(self, state: Any) -> Any:
        return self.learning.policy_params(state.learner)

    def act(self, state: Any, key: jax.Array, length: int, clock: jax.Array) -> tuple[VectorState, Trajectory]:
        """`length` steps of the copies in `state` under the behaviour policy (`clock`: its actor steps)."""
        params = self.learning.policy_params(state.learner)
        return rollout(self.environment, self.behaviour_policy, params, state.environment, key, length, clock)


class Trajectory(NamedTuple):
    """T steps of N copies, each field (T, N, ...)."""

    observation: jax.Array
    action: jax.Array
    extras: Any
    step: EnvStep


def rollout(
    environment: JaxVector,
    policy: Policy,
    params: Any,
    state: VectorState,
    key: jax.Array,
    length: int,
    policy_step: jax.Array | int = 0,
) -> tuple[VectorState, Trajectory]:
    """`length` steps of every copy in one `lax.scan`; `policy` returns (actions, extras);
    `policy_step`: the schedules' clock (actor steps)."""

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


def evaluate(environment: JaxVector, policy: Policy, params: Any, key: jax.Array) -> EvaluationResult:
    """Every copy runs until its first episode ends (or one step past the episode limit); `policy`
    returns (actions, extras). Host environments are evaluated by `EnvironmentLoop.run_evaluation`
    (rl/environment_loop.py), whose docstring says why there are two loops."""
    reset_key, key = jax.random.split(key)
    limit = environment.max_steps_in_episode + 1
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
