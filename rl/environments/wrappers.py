"""dm_env wrappers applied to every environment the experiments build."""

from __future__ import annotations

import time
from typing import Any

import dm_env
import numpy as np
import tree
from dm_env import specs


class EnvironmentWrapper(dm_env.Environment):
    """Forwards everything to the wrapped environment; subclasses override what they change."""

    def __init__(self, environment: dm_env.Environment):
        self._environment = environment

    def reset(self) -> dm_env.TimeStep:
        return self._environment.reset()

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._environment.step(action)

    def observation_spec(self) -> Any:
        return self._environment.observation_spec()

    def action_spec(self) -> Any:
        return self._environment.action_spec()

    def reward_spec(self) -> Any:
        return self._environment.reward_spec()

    def discount_spec(self) -> Any:
        return self._environment.discount_spec()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._environment, name)

    def close(self) -> None:
        self._environment.close()


def float32_spec(spec: Any) -> Any:
    if not np.issubdtype(spec.dtype, np.floating) or spec.dtype == np.float32:
        return spec
    if isinstance(spec, specs.BoundedArray):
        return specs.BoundedArray(
            spec.shape,
            np.float32,
            np.asarray(spec.minimum, np.float32),
            np.asarray(spec.maximum, np.float32),
            spec.name,
        )
    return specs.Array(spec.shape, np.float32, spec.name)


class SinglePrecisionWrapper(EnvironmentWrapper):
    """Casts float64 observations and rewards to float32, the dtype networks and replay use."""

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        self._observation_spec = tree.map_structure(float32_spec, environment.observation_spec())
        # A single array (the common case) skips the structure walk on every step.
        self._single_dtype = None if tree.is_nested(self._observation_spec) else self._observation_spec.dtype

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        if self._single_dtype is not None:
            observation = np.asarray(timestep.observation, dtype=self._single_dtype)
        else:
            observation = tree.map_structure(
                lambda x, s: np.asarray(x, dtype=s.dtype), timestep.observation, self._observation_spec
            )
        reward = None if timestep.reward is None else np.float32(timestep.reward)
        discount = None if timestep.discount is None else np.float32(timestep.discount)
        return dm_env.TimeStep(timestep.step_type, reward, discount, observation)

    def reset(self) -> dm_env.TimeStep:
        return self._convert(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._convert(self._environment.step(action))

    def observation_spec(self) -> Any:
        return self._observation_spec

    def reward_spec(self) -> Any:
        return float32_spec(self._environment.reward_spec())

    def discount_spec(self) -> Any:
        return specs.BoundedArray((), np.float32, 0.0, 1.0, "discount")


class EpisodeStatisticsWrapper(EnvironmentWrapper):
    """Tracks the return, length and duration of the current and last finished episode."""

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        self.episode_return = 0.0
        self.episode_length = 0
        self.last_episode: dict[str, float] | None = None
        self._start = time.perf_counter()

    def reset(self) -> dm_env.TimeStep:
        self.episode_return = 0.0
        self.episode_length = 0
        self._start = time.perf_counter()
        return self._environment.reset()

    def step(self, action: Any) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        if timestep.first():  # The wrapped environment reset itself.
            self.episode_return, self.episode_length = 0.0, 0
            return timestep
        self.episode_return += float(np.sum(timestep.reward))
        self.episode_length += 1
        if timestep.last():
            duration = time.perf_counter() - self._start
            self.last_episode = {
                "episode_return": self.episode_return,
                "episode_length": self.episode_length,
                "episode_duration_s": duration,
            }
        return timestep
