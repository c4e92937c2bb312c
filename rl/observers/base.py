"""The observer interface, as the environment loop calls it."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np


class Observer:
    """Does nothing; subclasses override what they watch: batched timesteps and actions
    of a loop's `VectorEnvironment` copies `env_ids`, and per copy the metrics of the
    episode it ended. One per loop, made with its `label` ("actor" or "evaluator"),
    `instance` and run directory; `labels` names the loops it runs in (None: all), and
    `render` asks for environments made with `render_mode="rgb_array"`.
    """

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
