"""gymnax environments as pure functions over a batch of copies, for compiled runs.

`GymnaxVector(name, num_envs)` steps `num_envs` copies of one gymnax environment with
`jax.vmap`; every copy resets itself when its episode ends, and the running return and
length of each copy's episode are kept in the state, so episode statistics are computed
on the device with no host round trip. Everything is a pure function of (state, action,
key): it can sit inside `jax.lax.scan`, `jax.vmap` (over seeds) and `jax.jit`.

Unlike gymnax's own `step`, a step here says whether an episode ended by termination
(the environment's discount is 0) or by the time limit (`truncated`: the return may still
bootstrap from `final_observation`, the observation before the automatic reset).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

# MinAtar's gymnax code writes ints into boolean arrays; JAX warns at every trace.
warnings.filterwarnings("ignore", message="scatter inputs have incompatible types", category=FutureWarning)


def make_gymnax(name: str, kwargs: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """(environment, default parameters) of gymnax id `name`; a ValueError naming the
    registered ids when there is no such id."""
    import gymnax

    if name not in gymnax.registered_envs:
        raise ValueError(f"'{name}' is not a gymnax environment; registered ids: {list(gymnax.registered_envs)}")
    return gymnax.make(name, **(kwargs or {}))


def observation_spec(environment: Any, params: Any) -> specs.Array:
    """The dm_env spec of one observation; observations are float32 whatever gymnax's
    dtype (MinAtar's are booleans).

    The shape comes from tracing a reset (`jax.eval_shape`), not from gymnax's
    `observation_space`, which runs (and compiles) JAX operations: an experiment reads the
    spec before it switches the compilation cache on, and JAX decides at its first
    compilation, once per process, whether the cache is used."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    shape = jax.eval_shape(lambda k: environment.reset_env(k, params)[0], key).shape
    return specs.Array(tuple(shape), np.float32, "observation")


def action_spec(environment: Any, params: Any) -> specs.Array:
    """DiscreteArray (int32) for a discrete action space, BoundedArray (float32) otherwise."""
    space = environment.action_space(params)
    if hasattr(space, "n"):
        return specs.DiscreteArray(int(space.n), np.int32, "action")
    shape = tuple(space.shape)
    low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
    return specs.BoundedArray(shape, np.float32, low, high, "action")


class EnvStep(NamedTuple):
    """What one batched step returns, each with a leading (num_envs,) axis.

    `observation` is the next observation to act on (a fresh episode's first one where
    `done`); `discount` is 0 where the episode terminated, 1 elsewhere (a truncation
    included); `final_observation` is the observation the step reached, before any
    reset; `episode_return` and `episode_length` describe the episode that ended, where
    `done` (0 elsewhere).
    """

    observation: jax.Array
    reward: jax.Array
    discount: jax.Array
    done: jax.Array
    truncated: jax.Array
    final_observation: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


class VectorState(NamedTuple):
    env_state: Any
    observation: jax.Array
    # The running return and length of each copy's current episode.
    episode_return: jax.Array
    episode_length: jax.Array


def _as_observation(observation: jax.Array) -> jax.Array:
    return jnp.asarray(observation).astype(jnp.float32)


# A time limit no episode reaches: `is_terminal` under it is the task's own condition.
_NO_TIME_LIMIT = np.iinfo(np.int32).max


def terminated_by_task(environment: Any, params: Any, env_state: Any) -> jax.Array:
    """Whether `env_state` ends the episode by the task itself, the time limit aside.

    gymnax's `is_terminal` (what `step_env` returns as `done`) ORs the task's condition
    with `time >= max_steps_in_episode`; asked again with a limit no episode reaches, it
    answers for the task alone."""
    unlimited = dataclasses.replace(params, max_steps_in_episode=_NO_TIME_LIMIT)
    return jnp.asarray(environment.is_terminal(env_state, unlimited), bool)


def single_step(environment: Any, params: Any, key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
    """One step of one copy without a reset: (observation, state, reward, done, truncated).

    `truncated` is an episode end by the time limit (state.time >= max_steps_in_episode)
    where the task did not also end it: a step that terminates on the last allowed step
    is a termination (discount 0), as in the gymnasium adapter. gymnax counts both as
    `done`.
    """
    observation, env_state, reward, done, _ = environment.step_env(key, env_state, action, params)
    done = jnp.asarray(done, bool)
    limit = getattr(params, "max_steps_in_episode", None)
    time = getattr(env_state, "time", None)
    if limit is not None and time is not None:
        truncated = done & (time >= limit) & ~terminated_by_task(environment, params, env_state)
    else:
        truncated = jnp.zeros_like(done)
    return _as_observation(observation), env_state, jnp.asarray(reward, jnp.float32).reshape(()), done, truncated


class GymnaxVector:
    """`num_envs` copies of gymnax environment `name`, reset automatically (see module docstring)."""

    def __init__(self, name: str, num_envs: int, kwargs: dict[str, Any] | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.name = name
        self.num_envs = num_envs
        self.environment, self.params = make_gymnax(name, kwargs)
        self.observation_spec = observation_spec(self.environment, self.params)
        self.action_spec = action_spec(self.environment, self.params)

    def reset(self, key: jax.Array) -> VectorState:
        """Every copy at the start of an episode (copy i seeded with split(key)[i])."""
        observations, env_states = jax.vmap(self.environment.reset_env, in_axes=(0, None))(
            jax.random.split(key, self.num_envs), self.params
        )
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        return VectorState(env_states, _as_observation(observations), zeros, jnp.zeros((self.num_envs,), jnp.int32))

    def _step_one(self, key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
        step_key, reset_key = jax.random.split(key)
        observation, next_state, reward, done, truncated = single_step(
            self.environment, self.params, step_key, env_state, action
        )
        reset_observation, reset_state = self.environment.reset_env(reset_key, self.params)
        env_state = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), reset_state, next_state)
        next_observation = jnp.where(done, _as_observation(reset_observation), observation)
        return next_observation, env_state, reward, done, truncated, observation

    def step(self, state: VectorState, action: jax.Array, key: jax.Array) -> tuple[VectorState, EnvStep]:
        """Steps every copy with its action; copies whose episode ends start a new one."""
        observation, env_state, reward, done, truncated, final = jax.vmap(self._step_one)(
            jax.random.split(key, self.num_envs), state.env_state, action
        )
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        ended = done.astype(jnp.float32)
        step = EnvStep(
            observation=observation,
            reward=reward,
            discount=1.0 - (done & ~truncated).astype(jnp.float32),
            done=done,
            truncated=truncated,
            final_observation=final,
            episode_return=episode_return * ended,
            episode_length=episode_length * done.astype(jnp.int32),
        )
        keep = 1.0 - ended
        next_state = VectorState(
            env_state, observation, episode_return * keep, episode_length * (1 - done.astype(jnp.int32))
        )
        return next_state, step
