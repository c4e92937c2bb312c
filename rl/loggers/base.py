"""The logger interface: a record is a flat mapping of names to numbers or strings."""

from __future__ import annotations

import abc
import re
from typing import Any, Mapping

import numpy as np

LoggingData = Mapping[str, Any]
# Step and episode counts of any node (`learner_steps`, `evaluator_episodes`, ...).
COUNT_KEY = re.compile(r"^(?P<node>[a-z0-9]+)_(steps|episodes)$")


class Logger(abc.ABC):
    @abc.abstractmethod
    def write(self, data: LoggingData) -> None:
        """Records one row."""

    def close(self) -> None:
        """Flushes and releases whatever the logger holds."""


class LoggerFactory:
    """Makes a node's logger (`factory(label, steps_key, instance)`); holds the run's clock
    (`start_time`, epoch seconds), W&B run and end (None, no-ops: none)."""

    start_time: float | None = None
    wandb_run: Any = None

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        raise NotImplementedError

    def start(self) -> None:
        """Before the first step: the W&B run shows up, with its config, even if the run fails."""

    def record_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's results (summary.json's fields), for the trackers."""

    def close(self, exit_code: int = 0) -> None:
        """Closes every sink (idempotent); W&B marks the run finished, or failed for a non-zero code."""

    def replica(self, directory: str, index: int, seed: int) -> "LoggerFactory":
        """The factory of replica `index` (launcher=anakin) writing under `directory`."""
        return self


class NoOpLogger(Logger):
    def write(self, data: LoggingData) -> None:
        pass


def to_python_scalar(value: Any) -> Any:
    """numpy/JAX scalars as Python numbers, arrays as lists: what every sink can store."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    array = np.asarray(value)
    return array.item() if array.size == 1 else array.tolist()
