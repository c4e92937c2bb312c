"""Loggers that wrap other loggers: fan-out, rate limiting, fixed fields and wall time."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from rl.loggers.base import Logger, LoggingData


class Dispatcher(Logger):
    """Writes each record to several loggers."""

    def __init__(self, loggers: Sequence[Logger]):
        self._loggers = list(loggers)

    def write(self, data: LoggingData) -> None:
        for logger in self._loggers:
            logger.write(data)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class TimeFilter(Logger):
    """Passes at most one record every `time_delta` seconds (all of them when it is 0)."""

    def __init__(self, logger: Logger, time_delta: float):
        self._logger = logger
        self._time_delta = time_delta
        self._last = -float("inf")

    def write(self, data: LoggingData) -> None:
        now = time.monotonic()
        if self._time_delta <= 0 or now - self._last >= self._time_delta:
            self._last = now
            self._logger.write(data)

    def close(self) -> None:
        self._logger.close()


class StepFilter(Logger):
    """Passes the first record in each window of `every` counts of `steps_key`: unlike
    `TimeFilter`'s, a schedule that does not depend on how fast the run goes."""

    def __init__(self, logger: Logger, steps_key: str, every: int):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self._logger = logger
        self._steps_key = steps_key
        self._every = every
        self._window = -1

    def write(self, data: LoggingData) -> None:
        window = int(data.get(self._steps_key, 0)) // self._every
        if window > self._window:
            self._window = window
            self._logger.write(data)

    def get_state(self) -> int:
        """The last window a record passed in (a resumed deterministic run continues it)."""
        return self._window

    def set_state(self, window: int) -> None:
        self._window = int(window)

    def close(self) -> None:
        self._logger.close()


class WallTime(Logger):
    """Adds `fields` (a node's `<label>_id`) to each record and stamps it with `wall_time_s`,
    seconds since the run started by `clock()`, unless it has one (stamped in another process)."""

    def __init__(self, logger: Logger, clock: Callable[[], float], fields: Mapping[str, Any] | None = None):
        self._logger = logger
        self._clock = clock
        self._fields = dict(fields or {})

    def write(self, data: LoggingData) -> None:
        data = {**self._fields, **data}
        if "wall_time_s" not in data:
            data["wall_time_s"] = round(self._clock(), 3)
        self._logger.write(data)

    def close(self) -> None:
        self._logger.close()
