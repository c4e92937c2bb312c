"""DeepMind Control Suite tasks as dm_envs with one flat float32 observation vector."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from rl.environments.factories import Float32Specs
from rl.environments.rendering import RenderingError, choose_mujoco_gl, missing_backend_message
from rl.quiet import known_warnings_dropped


def _suite(rendering: bool = False) -> Any:
    # dm_control picks its OpenGL backend when first imported.
    choose_mujoco_gl(rendering)
    try:
        from dm_control import suite
    except Exception as error:  # noqa: BLE001 - a broken OpenGL backend fails the import.
        if not rendering:
            raise
        raise RenderingError(missing_backend_message(str(error).strip().splitlines()[-1][:200])) from None
    return suite


class FlatDmControlWrapper(Float32Specs, dm_env.Environment):
    """The observation dict as one float32 vector (the spec's key order), float32 actions and
    rewards; dm_control's time limit and `max_episode_steps` truncate (discount 1)."""

    def __init__(self, environment: dm_env.Environment, max_episode_steps: int | None, render_mode: str | None):
        self._environment = environment
        self._render_mode = render_mode
        self._keys = list(environment.observation_spec().keys())
        size = sum(int(np.prod(spec.shape)) for spec in environment.observation_spec().values())
        self._observation_spec = specs.Array((size,), np.float32, "observation")
        action = environment.action_spec()
        bounds = (np.asarray(action.minimum, np.float32), np.asarray(action.maximum, np.float32))
        self._action_spec = specs.BoundedArray(action.shape, np.float32, *bounds, "action")
        self._action_dtype = action.dtype
        self._max_episode_steps = max_episode_steps
        self._steps = 0
        self._reset_next = True

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        parts = [np.asarray(timestep.observation[key], np.float32).reshape(-1) for key in self._keys]
        reward = None if timestep.reward is None else np.float32(timestep.reward)
        discount = None if timestep.discount is None else np.float32(timestep.discount)
        observation = np.concatenate(parts).astype(np.float32, copy=False)
        return timestep._replace(observation=observation, reward=reward, discount=discount)

    def reset(self) -> dm_env.TimeStep:
        self._steps = 0
        self._reset_next = False
        return self._convert(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next:
            return self.reset()
        timestep = self._environment.step(np.asarray(action, self._action_dtype))
        self._steps += 1
        if not timestep.last() and self._max_episode_steps is not None and self._steps >= self._max_episode_steps:
            timestep = dm_env.truncation(timestep.reward, timestep.observation, timestep.discount)
        self._reset_next = timestep.last()
        return self._convert(timestep)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._environment, name)

    def close(self) -> None:
        self._environment.close()

    def render(self) -> np.ndarray:
        """An RGB frame of camera 0, 480 x 640 (made with `render_mode="rgb_array"`)."""
        if self._render_mode != "rgb_array":
            raise RenderingError("this dm_control environment was made without render_mode='rgb_array'")
        return self._environment.physics.render(height=480, width=640, camera_id=0)


def make_dm_control_environment(
    seed: int,
    domain: str = "cheetah",
    task: str = "run",
    max_episode_steps: int | None = None,
    task_kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    render_mode: str | None = None,
) -> dm_env.Environment:
    """Control Suite task `domain`-`task` seeded with a uint32; `render_mode="rgb_array"` renders
    headless (EGL or OSMesa). `name` only labels runs."""
    if max_episode_steps is not None and max_episode_steps <= 0:
        raise ValueError(f"max_episode_steps must be > 0 or null, got {max_episode_steps}")
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"render_mode must be null or 'rgb_array', got {render_mode!r}")
    suite = _suite()
    if (domain, task) not in suite.ALL_TASKS:
        domains = sorted({d for d, _ in suite.ALL_TASKS})
        if domain not in domains:
            raise ValueError(f"unknown dm_control domain '{domain}'; domains: {domains}")
        tasks = sorted(t for d, t in suite.ALL_TASKS if d == domain)
        raise ValueError(f"unknown task '{task}' for dm_control domain '{domain}'; tasks: {tasks}")
    suite = _suite(rendering=render_mode is not None)
    with known_warnings_dropped():  # cheetah's model: a 'settotalmass' deprecation on every load.
        environment = suite.load(domain, task, task_kwargs={**(task_kwargs or {}), "random": int(seed)})
    return FlatDmControlWrapper(environment, max_episode_steps, render_mode)
