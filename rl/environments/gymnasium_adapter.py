"""Adapts gymnasium environments to the dm_env interface the rest of the library uses."""

from __future__ import annotations

from typing import Any

import dm_env
import gymnasium
import numpy as np
from dm_env import specs


def space_to_spec(space: gymnasium.Space, name: str) -> Any:
    """Converts a gymnasium space into the equivalent dm_env spec (nested for Dict/Tuple)."""
    if isinstance(space, gymnasium.spaces.Discrete):
        if space.start != 0:
            raise ValueError(f"{name}: Discrete spaces must start at 0, got start={space.start}")
        return specs.DiscreteArray(num_values=int(space.n), dtype=np.int32, name=name)
    if isinstance(space, gymnasium.spaces.Box):
        return specs.BoundedArray(
            shape=space.shape, dtype=space.dtype, minimum=space.low, maximum=space.high, name=name
        )
    if isinstance(space, gymnasium.spaces.MultiBinary):
        return specs.BoundedArray(shape=space.shape, dtype=space.dtype, minimum=0, maximum=1, name=name)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return specs.BoundedArray(shape=space.shape, dtype=space.dtype, minimum=0, maximum=space.nvec - 1, name=name)
    if isinstance(space, gymnasium.spaces.Dict):
        return {key: space_to_spec(sub, f"{name}/{key}") for key, sub in space.spaces.items()}
    if isinstance(space, gymnasium.spaces.Tuple):
        return tuple(space_to_spec(sub, f"{name}/{i}") for i, sub in enumerate(space.spaces))
    raise TypeError(f"{name}: unsupported gymnasium space {space!r}")


class GymnasiumToDmEnv(dm_env.Environment):
    """A dm_env view of a gymnasium environment.

    Termination ends the episode with discount 0 (no future value), truncation (a time
    limit) with discount 1, so learners keep bootstrapping through time limits.
    """

    def __init__(self, environment: gymnasium.Env, seed: int | None = None):
        self._environment = environment
        self._seed = seed
        self._reset_next = True
        # The game's own score of a game its last step ended (rl/environments/atari.py's
        # `info["game_score"]`), else None.
        self.game_score: float | None = None
        self._observation_spec = space_to_spec(environment.observation_space, "observation")
        self._action_spec = space_to_spec(environment.action_space, "action")

    def reset(self) -> dm_env.TimeStep:
        # Only the first reset is seeded; later resets continue the seeded generator.
        observation, _ = self._environment.reset(seed=self._seed)
        self.game_score = None
        self._seed = None
        self._reset_next = False
        return dm_env.restart(observation)

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next:
            return self.reset()
        if isinstance(self._action_spec, specs.DiscreteArray):
            action = int(action)
        observation, reward, terminated, truncated, info = self._environment.step(action)
        self.game_score = info.get("game_score")
        reward = np.asarray(reward, dtype=np.float32)
        if terminated:
            self._reset_next = True
            return dm_env.termination(reward, observation)
        if truncated:
            self._reset_next = True
            return dm_env.truncation(reward, observation)
        return dm_env.transition(reward, observation)

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return specs.Array(shape=(), dtype=np.float32, name="reward")

    def render(self) -> Any:
        return self._environment.render()

    @property
    def gymnasium_environment(self) -> gymnasium.Env:
        return self._environment

    def close(self) -> None:
        self._environment.close()
