"""The observer interface, as the environment loop calls it."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np


class Observer:
    """Watches a loop's `VectorEnvironment` copies `env_ids`; subclasses override what they use.
    One per loop (`label` "actor" or "evaluator"); `labels`: the loops it runs in (None: all);
    `render`: environments made with `render_mode="rgb_array"`."""

    labels: tuple[str, ...] | None = None
    render = False

    def __init__(self, label: str = "actor", instance: int = 0, run_directory: str = "."):
        self.label = label
        self.instance = instance
        self.run_directory = run_directory

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        """The first timesteps of new episodes in copies `env_ids`."""

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        """The actions taken in copies `env_ids` and the timesteps they led to."""

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        """Metrics of the episode copy `env_id` has just ended, for its record."""
        return {}
