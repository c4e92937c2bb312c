"""The dm_env specs of the environments here: gymnasium spaces as specs, and the float32 reward and discount
every wrapper reports (one module below the factories and vectors that share them), and their one error."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from dm_env import specs


class RenderingError(RuntimeError):
    """An environment cannot render frames here (no headless OpenGL, or none for it); the message is one line."""


class Float32Specs:
    """Specs from `_observation_spec` and `_action_spec`; float32 rewards and discounts in [0, 1]."""

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return specs.Array((), np.float32, "reward")

    def discount_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((), np.float32, 0.0, 1.0, "discount")

    game_score: float | None = None  # Atari: the game's own score where a step ended a game.


def space_to_spec(space: gymnasium.Space, name: str, float32: bool = False) -> Any:
    """The dm_env spec of a gymnasium space (nested for Dict/Tuple); `float32`: floating Boxes as float32."""
    if isinstance(space, gymnasium.spaces.Discrete):
        if space.start != 0:
            raise ValueError(f"{name}: Discrete spaces must start at 0, got start={space.start}")
        return specs.DiscreteArray(num_values=int(space.n), dtype=np.int32, name=name)
    if isinstance(space, gymnasium.spaces.Box):
        dtype = np.float32 if float32 and np.issubdtype(space.dtype, np.floating) else space.dtype
        return specs.BoundedArray(space.shape, dtype, np.asarray(space.low, dtype), np.asarray(space.high, dtype), name)
    if isinstance(space, gymnasium.spaces.MultiBinary):
        return specs.BoundedArray(space.shape, space.dtype, 0, 1, name)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return specs.BoundedArray(space.shape, space.dtype, 0, space.nvec - 1, name)
    if isinstance(space, gymnasium.spaces.Dict):
        return {key: space_to_spec(sub, f"{name}/{key}", float32) for key, sub in space.spaces.items()}
    if isinstance(space, gymnasium.spaces.Tuple):
        return tuple(space_to_spec(sub, f"{name}/{i}", float32) for i, sub in enumerate(space.spaces))
    raise TypeError(f"{name}: unsupported gymnasium space {space!r}")
