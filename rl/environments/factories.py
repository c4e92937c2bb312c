"""Factories named by `_target_` in conf/environment."""

from __future__ import annotations

import difflib
from typing import Any

import dm_env
import gymnasium

from rl.environments.gymnasium_adapter import GymnasiumToDmEnv
from rl.environments.wrappers import SinglePrecisionWrapper


def validate_gymnasium_id(name: str) -> None:
    """Raises a ValueError naming close matches when `name` is not a registered id."""
    if name in gymnasium.envs.registry:
        return
    known = sorted(gymnasium.envs.registry.keys())
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f"did you mean one of {close}?" if close else f"registered ids include {known[:8]}"
    raise ValueError(f"'{name}' is not a registered gymnasium environment; {hint}")


def make_gymnasium_environment(
    name: str,
    seed: int,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
) -> dm_env.Environment:
    """Makes gymnasium environment `name` as a float32 dm_env, seeded with a uint32."""
    validate_gymnasium_id(name)
    environment = gymnasium.make(
        name, render_mode=render_mode, max_episode_steps=max_episode_steps, **(kwargs or {})
    )
    environment.action_space.seed(int(seed))
    return SinglePrecisionWrapper(GymnasiumToDmEnv(environment, seed=int(seed)))
