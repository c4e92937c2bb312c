"""Gymnasium MuJoCo locomotion tasks (HalfCheetah-v5, Hopper-v5, ...) as float32 dm_envs."""

from __future__ import annotations

from typing import Any

import dm_env
import gymnasium

from rl.environments.factories import make_gymnasium_environment, validate_gymnasium_id
from rl.environments.rendering import choose_mujoco_gl

MUJOCO_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")


def validate_mujoco_id(name: str) -> None:
    """Raises a ValueError unless `name` is a registered gymnasium MuJoCo task."""
    validate_gymnasium_id(name)
    entry_point = str(gymnasium.envs.registry[name].entry_point)
    if not entry_point.startswith("gymnasium.envs.mujoco"):
        raise ValueError(
            f"'{name}' is not a gymnasium MuJoCo task; use one of {list(MUJOCO_TASKS)} "
            "(or environment=gymnasium for other ids)"
        )


def make_mujoco_environment(
    seed: int,
    name: str = "HalfCheetah-v5",
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> dm_env.Environment:
    """A gymnasium MuJoCo task, seeded with a uint32; no display needed, and with
    `render_mode="rgb_array"` it renders headless (EGL or OSMesa, rl/environments/rendering.py).

    Time limits (1,000 steps by default) end episodes with discount 1, falls with discount 0.
    """
    validate_mujoco_id(name)
    choose_mujoco_gl(rendering=render_mode is not None)
    return make_gymnasium_environment(
        name, seed, render_mode=render_mode, max_episode_steps=max_episode_steps, kwargs=kwargs
    )
