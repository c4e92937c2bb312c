"""conf/observers/action_stats.yaml: what the policy did in each episode."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

from rl.observers.base import Observer
from rl.core import is_discrete


class ActionStatistics(Observer):
    """Per episode: `action_mean`, `action_std`, `action_min` and `action_max` over every
    action component taken; with discrete actions also a histogram, `action_<a>_fraction`
    (the share of the episode's steps that took action `a`)."""

    def __init__(self, label: str = "actor", instance: int = 0, run_directory: str = "."):
        super().__init__(label, instance, run_directory)
        self._count: np.ndarray | None = None

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        if self._count is None:
            num_envs, spec = environment.num_envs, environment.action_spec()
            self._count = np.zeros(num_envs, np.int64)
            self._sum = np.zeros(num_envs, np.float64)
            self._squares = np.zeros(num_envs, np.float64)
            self._min = np.full(num_envs, np.inf)
            self._max = np.full(num_envs, -np.inf)
            self._histogram = np.zeros((num_envs, spec.num_values), np.int64) if is_discrete(spec) else None
        self._count[env_ids] = 0
        self._sum[env_ids] = self._squares[env_ids] = 0.0
        self._min[env_ids], self._max[env_ids] = np.inf, -np.inf
        if self._histogram is not None:
            self._histogram[env_ids] = 0

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        values = np.asarray(actions, np.float64).reshape(len(env_ids), -1)
        self._count[env_ids] += values.shape[1]
        self._sum[env_ids] += values.sum(axis=1)
        self._squares[env_ids] += np.square(values).sum(axis=1)
        self._min[env_ids] = np.minimum(self._min[env_ids], values.min(axis=1))
        self._max[env_ids] = np.maximum(self._max[env_ids], values.max(axis=1))
        if self._histogram is not None:
            np.add.at(self._histogram, (env_ids, np.asarray(actions, np.int64)), 1)

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        count = int(self._count[env_id])
        if count == 0:
            return {}
        mean = self._sum[env_id] / count
        metrics = {
            "action_mean": float(mean),
            "action_std": float(np.sqrt(max(self._squares[env_id] / count - mean**2, 0.0))),
            "action_min": float(self._min[env_id]),
            "action_max": float(self._max[env_id]),
        }
        if self._histogram is not None:
            steps = self._histogram[env_id].sum()
            for action, taken in enumerate(self._histogram[env_id]):
                metrics[f"action_{action}_fraction"] = float(taken / steps)
        return metrics
