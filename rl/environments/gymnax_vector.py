"""gymnax environments: `GymnaxVector`, copies as pure functions of (state, action, key)
for compiled runs (launcher=anakin: inside `lax.scan`, `vmap` over seeds, `jit`), and
`GymnaxToDmEnv`, one copy as a dm_env for launcher=local/ray (slow, for checking).
Unlike gymnax's `step`, theirs tell termination (discount 0) from the time limit.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, NamedTuple

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl.environments.wrappers import Float32Specs

# MinAtar's gymnax code writes ints into boolean arrays; JAX warns at every trace.
warnings.filterwarnings("ignore", message="scatter inputs have incompatible types", category=FutureWarning)


def make_gymnax(name: str, kwargs: dict[str, Any] | None = None) -> tuple[Any, Any, specs.Array, specs.Array]:
    """(environment, default parameters, observation spec, action spec) of gymnax id
    `name`, or a ValueError naming the registered ids. Observations are float32 (MinAtar's
    are booleans), their shape traced from a reset: gymnax's `observation_space` compiles,
    and JAX decides at its first compilation whether the cache (switched on later) is used."""
    import gymnax

    if name not in gymnax.registered_envs:
        raise ValueError(f"'{name}' is not a gymnax environment; registered ids: {list(gymnax.registered_envs)}")
    environment, params = gymnax.make(name, **(kwargs or {}))
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    shape = jax.eval_shape(lambda k: environment.reset_env(k, params)[0], key).shape
    observation_spec = specs.Array(tuple(shape), np.float32, "observation")
    space = environment.action_space(params)
    if hasattr(space, "n"):
        return environment, params, observation_spec, specs.DiscreteArray(int(space.n), np.int32, "action")
    shape = tuple(space.shape)
    low, high = (np.broadcast_to(np.asarray(bound, np.float32), shape) for bound in (space.low, space.high))
    return environment, params, observation_spec, specs.BoundedArray(shape, np.float32, low, high, "action")


class EnvStep(NamedTuple):
    """One batched step, each field with a leading (num_envs,) axis.

    `observation` is the next one to act on (a fresh episode's first where `done`);
    `discount` is 0 where the episode terminated, 1 elsewhere (truncations included);
    `final_observation` is the one the step reached, before any reset; `episode_return`
    and `episode_length` describe the episode that ended where `done` (0 elsewhere).
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


def single_step(environment: Any, params: Any, key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
    """One step of one copy without a reset: (observation, state, reward, done, truncated).

    gymnax's `done` ORs the task's end with `time >= max_steps_in_episode`; `truncated` is
    the time limit where the task did not also end the episode (asked again with a limit no
    episode reaches), so a termination on the last allowed step has discount 0.
    """
    observation, env_state, reward, done, _ = environment.step_env(key, env_state, action, params)
    done = jnp.asarray(done, bool)
    limit = getattr(params, "max_steps_in_episode", None)
    time = getattr(env_state, "time", None)
    truncated = jnp.zeros_like(done)
    if limit is not None and time is not None:
        unlimited = dataclasses.replace(params, max_steps_in_episode=np.iinfo(np.int32).max)
        terminated = jnp.asarray(environment.is_terminal(env_state, unlimited), bool)
        truncated = done & (time >= limit) & ~terminated
    reward = jnp.asarray(reward, jnp.float32).reshape(())
    return jnp.asarray(observation).astype(jnp.float32), env_state, reward, done, truncated


class GymnaxVector:
    """`num_envs` copies of gymnax environment `name`; each resets itself when its episode
    ends and keeps its running return and length on the device."""

    def __init__(self, name: str, num_envs: int, kwargs: dict[str, Any] | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.name = name
        self.num_envs = num_envs
        self.environment, self.params, self.observation_spec, self.action_spec = make_gymnax(name, kwargs)

    def reset(self, key: jax.Array) -> VectorState:
        """Every copy at the start of an episode (copy i seeded with split(key)[i])."""
        observations, env_states = jax.vmap(self.environment.reset_env, in_axes=(0, None))(
            jax.random.split(key, self.num_envs), self.params
        )
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        return VectorState(env_states, observations.astype(jnp.float32), zeros, jnp.zeros((self.num_envs,), jnp.int32))

    def _step_one(self, key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
        step_key, reset_key = jax.random.split(key)
        observation, next_state, reward, done, truncated = single_step(
            self.environment, self.params, step_key, env_state, action
        )
        reset_observation, reset_state = self.environment.reset_env(reset_key, self.params)
        env_state = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), reset_state, next_state)
        next_observation = jnp.where(done, jnp.asarray(reset_observation).astype(jnp.float32), observation)
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


class GymnaxToDmEnv(Float32Specs, dm_env.Environment):
    """One gymnax environment stepped from Python, its keys drawn from `seed`; the time
    limit ends an episode with discount 1, the task with discount 0."""

    def __init__(self, name: str, seed: int, kwargs: dict[str, Any] | None = None):
        self._environment, self._params, self._observation_spec, self._action_spec = make_gymnax(name, kwargs)
        # The key is made at the first reset: JAX's first computation decides (once per
        # process) whether the compilation cache, switched on after the spec probe, is used.
        self._seed = int(seed)
        self._key = None
        self._state = None
        self._reset = jax.jit(lambda key: self._environment.reset_env(key, self._params))
        self._step = jax.jit(
            lambda key, state, action: single_step(self._environment, self._params, key, state, action)
        )

    def _next_key(self) -> jax.Array:
        if self._key is None:
            self._key = jax.random.PRNGKey(self._seed)
        self._key, key = jax.random.split(self._key)
        return key

    def reset(self) -> dm_env.TimeStep:
        observation, self._state = self._reset(self._next_key())
        return dm_env.restart(np.asarray(observation, np.float32))

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._state is None:
            return self.reset()
        action = np.asarray(action, self._action_spec.dtype).reshape(self._action_spec.shape)
        observation, self._state, reward, done, truncated = self._step(self._next_key(), self._state, action)
        observation, reward = np.asarray(observation, np.float32), np.float32(reward)
        if not bool(done):
            return dm_env.transition(reward, observation)
        self._state = None
        if bool(truncated):
            return dm_env.truncation(reward, observation)
        return dm_env.termination(reward, observation)
