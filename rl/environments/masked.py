"""`environment=cartpole_masked`: observations that keep only some components. CartPole
without its velocities must infer them from the past: a feed-forward agent plays it
poorly, a recurrent one (R2D2) can learn it."""

from __future__ import annotations

from typing import Any, Sequence

import dm_env
import numpy as np
from dm_env import specs

from rl.environments.factories import make_gymnasium_environment
from rl.environments.wrappers import EnvironmentWrapper


class MaskedObservationWrapper(EnvironmentWrapper):
    """Keeps the components `keep` (indices into a flat observation vector), in that order."""

    def __init__(self, environment: dm_env.Environment, keep: Sequence[int]):
        super().__init__(environment)
        spec = environment.observation_spec()
        if not isinstance(spec, specs.Array) or len(spec.shape) != 1:
            raise ValueError(f"masking needs a flat vector observation, got {spec}")
        keep = tuple(int(index) for index in keep)
        if not keep or any(not 0 <= index < spec.shape[0] for index in keep):
            raise ValueError(f"keep must name components in [0, {spec.shape[0]}), got {list(keep)}")
        self._keep = np.asarray(keep, np.int64)
        self._spec = specs.Array((len(keep),), spec.dtype, spec.name)
        if isinstance(spec, specs.BoundedArray):
            bounds = [np.broadcast_to(bound, spec.shape)[self._keep] for bound in (spec.minimum, spec.maximum)]
            self._spec = specs.BoundedArray((len(keep),), spec.dtype, *bounds, spec.name)

    def _mask(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        return timestep._replace(observation=np.asarray(timestep.observation)[self._keep])

    def reset(self) -> dm_env.TimeStep:
        return self._mask(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._mask(self._environment.step(action))

    def observation_spec(self) -> specs.Array:
        return self._spec


def make_masked_environment(
    seed: int,
    task: str = "CartPole-v1",
    keep: Sequence[int] = (0, 2),
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
) -> dm_env.Environment:
    """Gymnasium task `task` (as `make_gymnasium_environment` makes it) showing only the
    observation components `keep`: by default CartPole-v1's cart position and pole angle."""
    environment = make_gymnasium_environment(task, seed, render_mode=render_mode, max_episode_steps=max_episode_steps)
    return MaskedObservationWrapper(environment, keep)
