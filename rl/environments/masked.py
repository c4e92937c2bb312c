"""`environment=cartpole_masked`: observations that keep only some components (CartPole without
its velocities: a feed-forward agent plays it poorly, a recurrent one, R2D2, can learn it)."""

from __future__ import annotations

import functools
from typing import Sequence

import dm_env
import gymnasium
import numpy as np
from dm_env import specs

from rl.environments.factories import GymnasiumToDmEnv, make_gymnasium_environment
from rl.environments.specs import space_to_spec


def make_masked_environment(
    seed: int,
    task: str = "CartPole-v1",
    keep: Sequence[int] = (0, 2),
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
) -> dm_env.Environment:
    """Task `task` showing only the components `keep` of its flat observation, in that order."""
    environment = make_gymnasium_environment(task, seed, render_mode, max_episode_steps).gymnasium_environment
    spec = space_to_spec(environment.observation_space, "observation")
    if not isinstance(spec, specs.BoundedArray) or len(spec.shape) != 1:
        raise ValueError(f"masking needs a flat vector observation, got {spec}")
    keep = np.asarray([int(index) for index in keep], np.int64)
    if not len(keep) or any(not 0 <= index < spec.shape[0] for index in keep):
        raise ValueError(f"keep must name components in [0, {spec.shape[0]}), got {keep.tolist()}")
    low, high = (np.broadcast_to(bound, spec.shape)[keep] for bound in (spec.minimum, spec.maximum))
    masked = gymnasium.spaces.Box(low, high, dtype=spec.dtype)
    environment = gymnasium.wrappers.TransformObservation(environment, functools.partial(np.take, indices=keep), masked)
    return GymnasiumToDmEnv(environment, seed=int(seed))
