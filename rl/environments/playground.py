"""MuJoCo Playground environments (its DeepMind Control Suite: CheetahRun, WalkerWalk, CartpoleSwingup, ...):
`PlaygroundVector`, pure copies for launcher=anakin with the interface of `GymnaxVector`, and `PlaygroundToDmEnv`,
one copy as a dm_env (what the experiment probes for the specs). Playground's training wrappers (brax's) are
not used: they return each copy to the start it drew at its first reset. Here every episode draws its own start,
a time limit is a truncation (discount 1), and a termination (a simulation that went NaN) ends with discount 0,
its NaN observation and reward read as zeros."""

from __future__ import annotations

import difflib
import importlib.util
from typing import Any, Mapping

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl.environments.gymnax_vector import EnvStep, LazyKeys, VectorState, finish_step
from rl.environments.specs import Float32Specs, RenderingError

IMPLEMENTATIONS = ("jax", "warp")


class PlaygroundError(ValueError):
    """An environment Playground cannot make here (unknown name, missing assets, an impl the device lacks)."""


def choose_impl(requested: str | None, backend: str) -> str:
    """MuJoCo's implementation for JAX backend `backend`: `requested`, or (None) Warp on an NVIDIA GPU where
    warp-lang is installed and MJX's JAX implementation elsewhere. Warp has no TPU kernels: refused there."""
    if requested is not None and requested not in IMPLEMENTATIONS:
        raise PlaygroundError(
            f"environment.kwargs.impl must be one of {list(IMPLEMENTATIONS)} or null, got {requested!r}"
        )
    if requested == "warp" and backend == "tpu":
        raise PlaygroundError("impl=warp (MuJoCo Warp) cannot run on a TPU; use impl=jax or leave impl null")
    if requested is not None:
        return requested
    return "warp" if backend == "gpu" and importlib.util.find_spec("warp") is not None else "jax"


def check_name(name: str) -> None:
    """A PlaygroundError unless `name` is a Playground id whose models are here (one line, with close ids).
    The DM Control Suite's models ship in the wheel; the other families' come from MuJoCo Menagerie, which
    Playground clones with git on first use: refused here when absent rather than fetched mid-run."""
    from rl.environments.rendering import choose_mujoco_gl

    choose_mujoco_gl(rendering=False)  # MuJoCo reads MUJOCO_GL once, when Playground first imports it.
    from mujoco_playground import registry
    from mujoco_playground._src import mjx_env

    if name not in registry.ALL_ENVS:
        close = difflib.get_close_matches(name, registry.ALL_ENVS, n=5, cutoff=0.5)
        hint = (
            f"did you mean one of {close}?" if close else f"DM Control Suite ids: {registry.dm_control_suite.ALL_ENVS}"
        )
        raise PlaygroundError(f"'{name}' is not a MuJoCo Playground environment; {hint}")
    if name not in registry.dm_control_suite.ALL_ENVS and not mjx_env.MENAGERIE_PATH.exists():
        raise PlaygroundError(
            f"Playground's {name} needs MuJoCo Menagerie's models, missing at {mjx_env.MENAGERIE_PATH} "
            "(Playground clones them with git on first use; clone them there, or pick a DM Control Suite id)"
        )


def load_playground(name: str, kwargs: dict[str, Any] | None = None) -> Any:
    """Playground environment `name` with `kwargs` over its config (null values keep Playground's own),
    its MuJoCo implementation chosen for this device (`choose_impl`); MuJoCo's known warnings dropped."""
    from rl.library_output import known_warnings_dropped

    check_name(name)
    from mujoco_playground import registry

    overrides = {key: value for key, value in (kwargs or {}).items() if value is not None}
    defaults = registry.get_default_config(name)
    unknown = sorted(set(overrides) - set(defaults.keys()) - {"impl"})
    if unknown:
        raise PlaygroundError(f"{name} has no settings {unknown}; its settings: {sorted(defaults.keys())}")
    overrides["impl"] = choose_impl(overrides.get("impl"), jax.default_backend())
    # A system is often built inside a trace (a replica's, vmapped): the model's arrays must be concrete there,
    # not tracers of that trace, which JAX would pass to the program as extra arguments (and leak).
    with known_warnings_dropped(), jax.ensure_compile_time_eval():  # Cheetah: 'settotalmass' deprecation.
        return registry.load(name, config_overrides=overrides)


def playground_specs(environment: Any, name: str) -> tuple[specs.Array, specs.BoundedArray]:
    """(observation spec, action spec): float32 observations, their shape traced from a reset; actions within
    the actuators' control ranges (-1 to 1 in the Control Suite)."""
    key = jax.eval_shape(lambda: jax.random.PRNGKey(0))  # Any PRNG implementation's key.
    observation = jax.eval_shape(lambda k: environment.reset(k).obs, key)
    if isinstance(observation, Mapping):  # Some Playground environments observe a dict of arrays.
        raise PlaygroundError(
            f"Playground's {name} observes a dict ({sorted(observation)}); only array observations run"
        )
    model = environment.mj_model
    limited = np.asarray(model.actuator_ctrllimited, bool)[:, None]
    bounds = np.where(limited, np.asarray(model.actuator_ctrlrange, np.float32), np.float32([-1.0, 1.0]))
    shape = (int(environment.action_size),)
    action_spec = specs.BoundedArray(shape, np.float32, bounds[:, 0], bounds[:, 1], "action")
    return specs.Array(tuple(observation.shape), np.float32, "observation"), action_spec


def episode_limit(environment: Any) -> int:
    """Agent steps in an episode: Playground's `episode_length` counts physics control steps, each agent step
    takes `action_repeat` of them (brax's training wrapper's reckoning)."""
    config = environment._config  # Playground keeps its config here, with no public accessor.
    return -(-int(config.episode_length) // int(config.action_repeat))


def finite(values: jax.Array) -> jax.Array:
    """`values` with NaNs and infinities as zeros (finite values unchanged)."""
    return jnp.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)


class PlaygroundVector:
    """`num_envs` copies of Playground environment `name`, each resetting itself at an episode's end
    (`kwargs`: Playground's settings, `load_playground`)."""

    def __init__(self, name: str, num_envs: int, kwargs: dict[str, Any] | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.name = name
        self.num_envs = num_envs
        self.environment = load_playground(name, kwargs)
        self.observation_spec, self.action_spec = playground_specs(self.environment, name)
        self.max_steps_in_episode = episode_limit(self.environment)
        self.action_repeat = int(self.environment._config.action_repeat)

    def _reset_all(self, key: jax.Array) -> tuple[Any, jax.Array]:
        states = jax.vmap(self.environment.reset)(jax.random.split(key, self.num_envs))
        return states, states.obs.astype(jnp.float32)

    def reset(self, key: jax.Array) -> VectorState:
        """Every copy at the start of an episode (copy i seeded with split(key)[i])."""
        states, observations = self._reset_all(key)
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        return VectorState(states, observations, zeros, jnp.zeros((self.num_envs,), jnp.int32))

    def _advance(self, state: Any, action: jax.Array) -> Any:
        """One agent step of one copy: `action_repeat` physics control steps, their rewards summed."""

        def repeat(current: Any, _: None) -> tuple[Any, jax.Array]:
            following = self.environment.step(current, action)
            return following, following.reward

        state, rewards = jax.lax.scan(repeat, state, None, length=self.action_repeat)
        return state.replace(reward=jnp.sum(rewards))

    def step(self, state: VectorState, action: jax.Array, key: jax.Array) -> tuple[VectorState, EnvStep]:
        """Steps every copy with its action; copies whose episode ends start a new one. The resets are
        computed only when some copy ended (one `lax.cond` over the batch: copies mostly end together, at the
        time limit); vmapped over replicas the condition becomes a select and they are computed every step."""
        stepped = jax.vmap(self._advance)(state.env_state, action)
        # A simulation that diverged ends the episode with NaNs, which would reach the losses through `final`.
        final = finite(stepped.obs.astype(jnp.float32))
        reward = finite(stepped.reward.astype(jnp.float32))
        terminated = stepped.done > 0
        at_limit = state.episode_length + 1 >= self.max_steps_in_episode
        done = terminated | at_limit
        truncated = at_limit & ~terminated

        def reset_ended(operands: tuple[Any, jax.Array]) -> tuple[Any, jax.Array]:
            states, observations = operands
            fresh, fresh_observations = self._reset_all(key)
            where = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)
            return jax.tree_util.tree_map(where, fresh, states), where(fresh_observations, observations)

        env_state, observation = jax.lax.cond(jnp.any(done), reset_ended, lambda operands: operands, (stepped, final))
        return finish_step(state, env_state, observation, reward, done, truncated, final)


class PlaygroundToDmEnv(Float32Specs, dm_env.Environment):
    """One Playground environment stepped from Python (compiled steps), its keys drawn from `seed`: what the
    experiment probes for its specs (the launchers that step host environments need reverb, which the current
    stack, the only one with Playground, lacks)."""

    def __init__(self, name: str, seed: int, kwargs: dict[str, Any] | None = None, render_mode: str | None = None):
        if render_mode not in (None, "rgb_array"):
            raise RenderingError(f"Playground's {name} makes rgb_array frames only, not {render_mode}")
        if render_mode is not None:
            from rl.environments.rendering import choose_mujoco_gl

            choose_mujoco_gl(rendering=True)  # MuJoCo's renderer draws the frames: a headless backend, or one line.
        self._render_mode = render_mode
        self._shown = None  # The copy's latest physics state, kept past an episode's end for its last frame.
        self._renderer = None  # MuJoCo's, made at the first frame.
        self._frame_data = None
        self._vector = PlaygroundVector(name, 1, kwargs)
        self._observation_spec = self._vector.observation_spec
        self._action_spec = self._vector.action_spec
        self._keys = LazyKeys(seed)
        self._state = None
        self._reset = jax.jit(self._vector.reset)
        self._step = jax.jit(self._vector.step)

    def reset(self) -> dm_env.TimeStep:
        self._state = self._reset(self._keys.next())
        self._shown = self._state.env_state
        return dm_env.restart(np.asarray(self._state.observation[0], np.float32))

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._state is None:
            return self.reset()
        action = np.asarray(action, np.float32).reshape((1, *self._action_spec.shape))
        previous = self._state
        self._state, answer = self._step(self._state, action, self._keys.next())
        # At an episode's end the copy has already started the next episode: its frame stays the one before the step.
        self._shown = previous.env_state if bool(answer.done[0]) else self._state.env_state
        reward = np.float32(answer.reward[0])
        observation = np.asarray(answer.final_observation[0], np.float32)
        if not bool(answer.done[0]):
            return dm_env.transition(reward, observation)
        self._state = None
        if bool(answer.truncated[0]):
            return dm_env.truncation(reward, observation)
        return dm_env.termination(reward, observation)

    def render(self) -> np.ndarray:
        """The copy's latest frame, drawn by MuJoCo's renderer on the CPU (240 x 320, the free camera): its
        positions and velocities copied into a MuJoCo MjData, whose derived quantities mj_forward computes."""
        import mujoco

        if self._render_mode != "rgb_array":
            raise RenderingError(f"Playground's {self._vector.name} was made without render_mode='rgb_array'")
        if self._shown is None:
            raise RenderingError("nothing to render before the first reset")
        model = self._vector.environment.mj_model
        if self._renderer is None:
            self._renderer = mujoco.Renderer(model, height=240, width=320)
            self._frame_data = mujoco.MjData(model)
        physics = self._shown.data
        data = self._frame_data
        data.qpos = np.asarray(physics.qpos[0])
        data.qvel = np.asarray(physics.qvel[0])
        mujoco.mj_forward(model, data)
        self._renderer.update_scene(data, camera=-1)
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
