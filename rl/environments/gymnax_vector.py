"""gymnax environments: `GymnaxVector`, pure copies for launcher=anakin, and `GymnaxToDmEnv`, one
copy as a dm_env for launcher=local/ray; both tell termination (discount 0) from the time limit."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import warnings
from typing import Any, NamedTuple

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl.environments.specs import Float32Specs, RenderingError

# MinAtar writes ints into boolean arrays; JAX warns at every trace.
warnings.filterwarnings("ignore", message="scatter inputs have incompatible types", category=FutureWarning)


def make_gymnax(name: str, kwargs: dict[str, Any] | None = None) -> tuple[Any, Any, specs.Array, specs.Array]:
    """(environment, default parameters, observation spec, action spec) of gymnax id `name`; float32
    observations, their shape traced from a reset (`observation_space` would compile). An id that cannot be made
    here (MNISTBandit-bsuite downloads MNIST) or whose reset or step does not trace (gymnax 0.0.9's
    SimpleBandit-bsuite) is a ValueError of one line naming why, not a failure inside a compiled run."""
    import gymnax

    if name not in gymnax.registered_envs:
        raise ValueError(f"'{name}' is not a gymnax environment; registered ids: {list(gymnax.registered_envs)}")
    try:
        environment, params = gymnax.make(name, **(kwargs or {}))
    except (OSError, NotImplementedError) as error:
        raise ValueError(f"gymnax cannot make '{name}' here: {error_line(error)}") from None
    action_spec = gymnax_action_spec(environment.action_space(params))
    key = jax.eval_shape(lambda: jax.random.PRNGKey(0))  # Any PRNG implementation's key.
    action = jax.ShapeDtypeStruct(action_spec.shape, action_spec.dtype)
    try:
        observation, state = jax.eval_shape(lambda k: environment.reset_env(k, params), key)
        jax.eval_shape(lambda k, s, a: single_step(environment, params, k, s, a), key, state, action)
    except Exception as error:  # noqa: BLE001 - whatever the library's trace hits, the id is refused by it.
        version = importlib.metadata.version("gymnax")
        raise ValueError(f"gymnax {version} cannot step '{name}': {error_line(error)}") from None
    return environment, params, specs.Array(tuple(observation.shape), np.float32, "observation"), action_spec


def gymnax_action_spec(space: Any) -> specs.Array:
    """The dm_env spec of a gymnax action space: discrete int32 actions, or bounded float32 ones."""
    from gymnax.environments.spaces import Discrete

    if isinstance(space, Discrete):
        return specs.DiscreteArray(int(space.n), np.int32, "action")
    shape = tuple(space.shape)
    low, high = (np.broadcast_to(np.asarray(bound, np.float32), shape) for bound in (space.low, space.high))
    return specs.BoundedArray(shape, np.float32, low, high, "action")


def error_line(error: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


class EnvStep(NamedTuple):
    """One batched step, fields (num_envs, ...): `observation` the next to act on (a new episode's
    where `done`), `final_observation` the one before any reset, episode return/length where it ended (else 0)."""

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
    episode_return: jax.Array
    episode_length: jax.Array


def single_step(environment: Any, params: Any, key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
    """One step of one copy without a reset: (observation, state, reward, done, truncated). `done`: the episode
    ended, by a termination or at the time limit; `truncated`: at the time limit without a termination (a
    termination on the last allowed step is not truncated). gymnax 0.0.9's `step_env` counts the time limit in
    its `done`, gymnax 1.x's leaves it to `is_truncated` (which its `step` adds): the limit is asked for here
    either way, as gymnax 1.x's `is_truncated` asks it (no environment of 1.0.1 overrides it)."""
    observation, env_state, reward, done, _ = environment.step_env(key, env_state, action, params)
    unlimited = dataclasses.replace(params, max_steps_in_episode=np.iinfo(np.int32).max)
    terminated = jnp.asarray(environment.is_terminal(env_state, unlimited), bool)
    at_limit = jnp.asarray(env_state.time >= params.max_steps_in_episode, bool)
    done = jnp.asarray(done, bool) | at_limit
    truncated = at_limit & ~terminated
    reward = jnp.asarray(reward, jnp.float32).reshape(())
    return jnp.asarray(observation).astype(jnp.float32), env_state, reward, done, truncated


class LazyKeys:
    """The keys one environment copy draws, split from `seed` one at a time. The first key is made at the first
    draw, not here: JAX's first computation decides on the compilation cache."""

    def __init__(self, seed: int):
        self._seed = int(seed)
        self._key: jax.Array | None = None

    def next(self) -> jax.Array:
        if self._key is None:
            self._key = jax.random.PRNGKey(self._seed)
        self._key, key = jax.random.split(self._key)
        return key


class GymnaxVector:
    """`num_envs` copies of gymnax environment `name`, each resetting itself at an episode's end."""

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

    @property
    def max_steps_in_episode(self) -> int:
        """The time limit: an episode ends at this step at the latest."""
        return int(self.params.max_steps_in_episode)

    def step(self, state: VectorState, action: jax.Array, key: jax.Array) -> tuple[VectorState, EnvStep]:
        """Steps every copy with its action; copies whose episode ends start a new one."""
        observation, env_state, reward, done, truncated, final = jax.vmap(self._step_one)(
            jax.random.split(key, self.num_envs), state.env_state, action
        )
        return finish_step(state, env_state, observation, reward, done, truncated, final)


def finish_step(
    state: VectorState,
    env_state: Any,
    observation: jax.Array,
    reward: jax.Array,
    done: jax.Array,
    truncated: jax.Array,
    final_observation: jax.Array,
) -> tuple[VectorState, EnvStep]:
    """The batched step's answer and the next state, given every copy's step (reset where `done`): the
    episode statistics of the copies whose episode ended, and a discount of 0 only where one terminated.
    Shared by the JAX vector environments (gymnax, MuJoCo Playground)."""
    episode_return = state.episode_return + reward
    episode_length = state.episode_length + 1
    ended = done.astype(jnp.float32)
    discount = 1.0 - (done & ~truncated).astype(jnp.float32)
    returns = episode_return * ended
    lengths = episode_length * done.astype(jnp.int32)
    step = EnvStep(observation, reward, discount, done, truncated, final_observation, returns, lengths)
    return VectorState(env_state, observation, episode_return * (1.0 - ended), episode_length - lengths), step


# Frames of a gymnax environment: its gymnasium classic-control twin drawn at the gymnax state's values of
# these fields (the twin's `state`, in order); the dynamics are the same, only gymnasium draws.
DRAWN_BY_TWIN = {
    "CartPole-v1": ("x", "x_dot", "theta", "theta_dot"),
    "Acrobot-v1": ("joint_angle1", "joint_angle2", "velocity_1", "velocity_2"),
    "Pendulum-v1": ("theta", "theta_dot"),
    "MountainCar-v0": ("position", "velocity"),
    "MountainCarContinuous-v0": ("position", "velocity"),
}


class GymnaxToDmEnv(Float32Specs, dm_env.Environment):
    """One gymnax environment stepped from Python, its keys drawn from `seed`; `render_mode="rgb_array"`
    draws frames (`render`) for the environments of DRAWN_BY_TWIN."""

    def __init__(self, name: str, seed: int, kwargs: dict[str, Any] | None = None, render_mode: str | None = None):
        self._environment, self._params, self._observation_spec, self._action_spec = make_gymnax(name, kwargs)
        self._name = name
        self._twin = None
        if render_mode is not None:
            if render_mode != "rgb_array" or name not in DRAWN_BY_TWIN:
                raise RenderingError(
                    f"gymnax {name} makes no {render_mode} frames (those that do: {', '.join(DRAWN_BY_TWIN)})"
                )
            import gymnasium

            self._twin = gymnasium.make(name, render_mode="rgb_array").unwrapped
        self._keys = LazyKeys(seed)
        self._state = None
        self._shown = None
        self._reset = jax.jit(lambda key: self._environment.reset_env(key, self._params))
        self._step = jax.jit(
            lambda key, state, action: single_step(self._environment, self._params, key, state, action)
        )

    def reset(self) -> dm_env.TimeStep:
        observation, self._state = self._reset(self._keys.next())
        self._shown = self._state
        return dm_env.restart(np.asarray(observation, np.float32))

    def render(self) -> np.ndarray:
        """The last state as an RGB frame, drawn by the gymnasium twin."""
        if self._twin is None:
            raise RenderingError(f"gymnax {self._name} was made without render_mode='rgb_array'")
        fields = vars(self._shown)
        self._twin.state = np.array([float(fields[name]) for name in DRAWN_BY_TWIN[self._name]])
        self._twin.last_u = None  # Pendulum's torque arrow: not drawn.
        return self._twin.render()

    def close(self) -> None:
        if self._twin is not None:
            self._twin.close()

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._state is None:
            return self.reset()
        action = np.asarray(action, self._action_spec.dtype).reshape(self._action_spec.shape)
        observation, self._state, reward, done, truncated = self._step(self._keys.next(), self._state, action)
        self._shown = self._state
        observation = np.asarray(observation, np.float32)
        reward = np.float32(reward)
        if not bool(done):
            return dm_env.transition(reward, observation)
        self._state = None
        if bool(truncated):
            return dm_env.truncation(reward, observation)
        return dm_env.termination(reward, observation)
