"""The logger interface: a record is a flat mapping of names to numbers or strings."""

from __future__ import annotations

import abc
import numbers
from typing import Any, Mapping, Protocol

import numpy as np

LoggingData = Mapping[str, Any]


class Logger(abc.ABC):
    @abc.abstractmethod
    def write(self, data: LoggingData) -> None:
        """Records one row."""

    def close(self) -> None:
        """Flushes and releases whatever the logger holds."""


class LoggerFactory(Protocol):
    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger: ...


class NoOpLogger(Logger):
    def write(self, data: LoggingData) -> None:
        pass


def to_python_scalar(value: Any) -> Any:
    """Turns numpy/JAX scalars into plain Python numbers so every sink can store them."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    array = np.asarray(value)
    if array.size == 1:
        item = array.reshape(()).item()
        return item
    if isinstance(value, numbers.Number):
        return value
    return array.tolist()
