"""The gymnasium -> dm_env adapter and the spec helpers the other environments share."""

from __future__ import annotations

from typing import Any

import dm_env
import gymnasium
import numpy as np
import tree
from dm_env import specs


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

    game_score: float | None = None  # The game's own score where a step ended a game (Atari).


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


class GymnasiumToDmEnv(Float32Specs, dm_env.Environment):
    """A float32 dm_env view of a gymnasium environment: termination ends the episode with discount 0,
    truncation (a time limit) with discount 1. Only the first reset is seeded."""

    def __init__(self, environment: gymnasium.Env, seed: int | None = None):
        self.gymnasium_environment = self._environment = environment
        self._seed, self._reset_next = seed, True
        self._observation_spec = space_to_spec(environment.observation_space, "observation", float32=True)
        # A single array (the common case) skips the structure walk.
        self._single_dtype = None if tree.is_nested(self._observation_spec) else self._observation_spec.dtype
        self._action_spec = space_to_spec(environment.action_space, "action")

    def _timestep(self, step_type: dm_env.StepType, reward: Any, discount: Any, observation: Any) -> dm_env.TimeStep:
        if self._single_dtype is not None:
            observation = np.asarray(observation, dtype=self._single_dtype)
        else:
            observation = tree.map_structure(
                lambda x, s: np.asarray(x, dtype=s.dtype), observation, self._observation_spec
            )
        return dm_env.TimeStep(step_type, reward, discount, observation)

    def reset(self) -> dm_env.TimeStep:
        observation, _ = self._environment.reset(seed=self._seed)
        self.game_score = self._seed = None
        self._reset_next = False
        return self._timestep(dm_env.StepType.FIRST, None, None, observation)

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next:
            return self.reset()
        if isinstance(self._action_spec, specs.DiscreteArray):
            action = int(action)
        observation, reward, terminated, truncated, info = self._environment.step(action)
        self.game_score = info["game_score"]["r"] if "game_score" in info else None
        self._reset_next = terminated or truncated
        step_type = dm_env.StepType.LAST if self._reset_next else dm_env.StepType.MID
        return self._timestep(step_type, np.float32(reward), np.float32(0.0 if terminated else 1.0), observation)

    def render(self) -> Any:
        return self._environment.render()

    def close(self) -> None:
        self._environment.close()
